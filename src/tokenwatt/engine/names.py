"""Each engine's Prometheus names, mapped to one set of engine-side figures.

Why one set: the comparison with the client (T, B, s) and the second MBU must not depend on
which engine served the run. Every figure names the exposition samples that carry it; the
engine's own name is kept in the map so a report can say where a number came from.

Counters (cumulative; the window takes differences):
    requests_finished, prompt_tokens, generated_tokens, decode_steps, preemptions,
    busy_slot_decodes (llama.cpp: busy slots summed over decode calls)
Gauges (instantaneous; the window takes a time-weighted mean):
    running, waiting, kv_usage (0-1)

Sources (all hand-written from each engine's published metric list unless noted):
vLLM V1 (docs "Production Metrics"; also what the simulator serves, captured in tests),
SGLang (docs "Production Metrics"), TGI (docs "reference/metrics"), llama.cpp llama-server
``--metrics`` (tools/server, captured from a running server in the tests), TensorRT-LLM
(trtllm-serve's ``trtllm_`` metrics, 1.1: only request counts and latency histograms).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CACHE_COUNTERS",
    "CACHE_NAMES",
    "COUNTERS",
    "ENGINES",
    "ENGINE_NAMES",
    "GAUGES",
    "SPEC_COUNTERS",
    "SPEC_NAMES",
    "EngineName",
    "Source",
    "detect_engine",
]

EngineName = Literal["vllm", "sglang", "tgi", "llamacpp", "trtllm"]
ENGINES: tuple[EngineName, ...] = ("vllm", "sglang", "tgi", "llamacpp", "trtllm")
COUNTERS: tuple[str, ...] = (
    "requests_finished",
    "prompt_tokens",
    "generated_tokens",
    "decode_steps",
    "preemptions",
    "busy_slot_decodes",
)
GAUGES: tuple[str, ...] = ("running", "waiting", "kv_usage")


@dataclass(frozen=True, slots=True)
class Source:
    """Where one figure comes from: sample names tried in order (the first present wins),
    series filtered by ``labels``, summed over the remaining series (replicas, reasons) or,
    with ``mean``, averaged (KV usage is a fraction per replica); ``plus`` names samples
    added to it where present (llama.cpp counts cached prompt tokens apart)."""

    names: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)
    mean: bool = False
    plus: tuple[str, ...] = ()


def _s(*names: str, mean: bool = False, plus: tuple[str, ...] = (), **labels: str) -> Source:
    return Source(names, dict(labels), mean, plus)


ENGINE_NAMES: dict[EngineName, dict[str, Source]] = {
    "vllm": {
        "requests_finished": _s("vllm:request_success_total"),
        "prompt_tokens": _s("vllm:prompt_tokens_total"),
        "generated_tokens": _s("vllm:generation_tokens_total"),
        # one observation per engine step (prefill-only steps included)
        "decode_steps": _s("vllm:iteration_tokens_total_count"),
        "preemptions": _s("vllm:num_preemptions_total"),
        "running": _s("vllm:num_requests_running"),
        "waiting": _s("vllm:num_requests_waiting"),
        "kv_usage": _s("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", mean=True),
    },
    "sglang": {
        "requests_finished": _s("sglang:num_requests_total"),
        "prompt_tokens": _s("sglang:prompt_tokens_total"),
        "generated_tokens": _s("sglang:generation_tokens_total"),
        "running": _s("sglang:num_running_reqs"),
        "waiting": _s("sglang:num_queue_reqs"),
        "kv_usage": _s("sglang:token_usage", mean=True),
    },
    "tgi": {
        "requests_finished": _s("tgi_request_success_total", "tgi_request_success"),
        "prompt_tokens": _s("tgi_request_input_length_sum"),
        "generated_tokens": _s("tgi_request_generated_tokens_sum"),
        "decode_steps": _s(
            "tgi_batch_inference_count_total", "tgi_batch_inference_count", method="decode"
        ),
        "running": _s("tgi_batch_current_size"),
        "waiting": _s("tgi_queue_size"),
    },
    "llamacpp": {
        # prompt tokens of the requests: processed plus reused from the prompt cache
        "prompt_tokens": _s(
            "llamacpp:prompt_tokens_total", plus=("llamacpp:prompt_tokens_cached_total",)
        ),
        "generated_tokens": _s("llamacpp:tokens_predicted_total"),
        # llama_decode() calls: decode steps, plus calls that only prefill
        "decode_steps": _s("llamacpp:n_decode_total"),
        # exposed as a running average; the parser multiplies it by n_decode_total
        "busy_slot_decodes": _s("llamacpp:n_busy_slots_per_decode"),
        "running": _s("llamacpp:requests_processing"),
        "waiting": _s("llamacpp:requests_deferred"),
        "kv_usage": _s("llamacpp:kv_cache_usage_ratio", mean=True),
    },
    "trtllm": {
        "requests_finished": _s("trtllm_request_success_total", "trtllm:request_success_total"),
    },
}

# Speculative decoding (``engine.speculation``): present only while it is on, so kept out of
# COUNTERS (whose absence is reported as missing). vLLM V1 and llama-server share the names.
SPEC_COUNTERS: tuple[str, ...] = ("spec_drafts", "spec_accepted_tokens")
SPEC_NAMES: dict[EngineName, dict[str, Source]] = {
    e: {
        "spec_drafts": _s(f"{e}:spec_decode_num_drafts_total"),
        "spec_accepted_tokens": _s(f"{e}:spec_decode_num_accepted_tokens_total"),
    }
    for e in ("vllm", "llamacpp")
}

# Automatic prefix caching (``EngineFigures.prefix_cache_hit_rate``): prompt tokens looked up
# at admission and found cached. vLLM V1 counts both (the simulator serves the same names);
# absent while caching is off or on engines without them, so kept out of COUNTERS too.
CACHE_COUNTERS: tuple[str, ...] = ("prefix_cache_queries", "prefix_cache_hits")
CACHE_NAMES: dict[EngineName, dict[str, Source]] = {
    "vllm": {
        "prefix_cache_queries": _s("vllm:prefix_cache_queries_total"),
        "prefix_cache_hits": _s("vllm:prefix_cache_hits_total"),
    },
}

_PREFIXES: tuple[tuple[str, EngineName], ...] = (
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("tgi_", "tgi"),
    ("llamacpp:", "llamacpp"),
    ("trtllm_", "trtllm"),
    ("trtllm:", "trtllm"),
)


def detect_engine(sample_names: set[str] | list[str]) -> EngineName | None:
    """The engine whose name prefix the most samples carry, or None if no engine's does."""
    counts: dict[EngineName, int] = {}
    for name in sample_names:
        for prefix, engine in _PREFIXES:
            if name.startswith(prefix):
                counts[engine] = counts.get(engine, 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda e: counts[e])
