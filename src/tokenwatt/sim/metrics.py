"""``/metrics``: vLLM's V1 metric names per replica, plus the ``tokenwatt_sim_*`` ground truth.

Counts live in plain Python numbers updated once per step; a custom collector turns them
into Prometheus families only when scraped, on a registry of this server's own (never the
process-global one). Labels follow vLLM: ``model_name`` and ``engine`` (replica index).
The ground-truth families are node totals without labels.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tokenwatt.sim.truth import LATENESS_BUCKETS_S

__all__ = ["EngineStats", "Hist", "SimCollector", "make_registry"]

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to max_model_len."""
    out: list[float] = []
    m = 1
    while True:
        for f in (1, 2, 5):
            v = f * m
            if v > max_model_len:
                return tuple(out)
            out.append(float(v))
        m *= 10


class Hist:
    """A histogram without locks: bucket counts, sum, count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = list(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def family(
        self, name: str, doc: str, labels: dict[str, str], fam: HistogramMetricFamily | None
    ) -> HistogramMetricFamily:
        if fam is None:
            fam = HistogramMetricFamily(name, doc, labels=list(labels))
        cum = 0
        buckets: list[tuple[str, float]] = []
        for b, c in zip(self.bounds, self.counts, strict=False):
            cum += c
            buckets.append((_fmt(b), float(cum)))
        buckets.append(("+Inf", float(self.count)))
        fam.add_metric(list(labels.values()), buckets, self.sum)
        return fam


def _fmt(b: float) -> str:
    return repr(float(b))


class EngineStats:
    """vLLM-named counters and histograms of one replica."""

    def __init__(self, max_model_len: int, spec_positions: int = 0) -> None:
        tb = token_buckets(max_model_len)
        # speculative decoding (vLLM's spec-decode counters; exposed only when it is on)
        self.spec_positions = spec_positions
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted_tokens = 0
        self.spec_accepted_per_pos = [0] * spec_positions
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.routed_tokens = 0  # decode + prompt (and recompute) tokens routed per MoE layer
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.iteration_tokens = Hist(ITERATION_BUCKETS)
        self.ttft = Hist(TTFT_BUCKETS)
        self.itl = Hist(ITL_BUCKETS)
        self.tpot = Hist(ITL_BUCKETS)
        self.e2e = Hist(REQUEST_BUCKETS)
        self.queue = Hist(REQUEST_BUCKETS)
        self.prefill = Hist(REQUEST_BUCKETS)
        self.decode = Hist(REQUEST_BUCKETS)
        self.inference = Hist(REQUEST_BUCKETS)
        self.req_prompt = Hist(tb)
        self.req_generation = Hist(tb)
        self.req_max_tokens = Hist(tb)
        self.req_n = Hist((1, 2, 5, 10, 20))


_HISTS: tuple[tuple[str, str, str], ...] = (
    ("iteration_tokens", "vllm:iteration_tokens_total", "Tokens per engine step"),
    ("ttft", "vllm:time_to_first_token_seconds", "Time to first token"),
    ("itl", "vllm:inter_token_latency_seconds", "Inter-token latency"),
    ("itl", "vllm:time_per_output_token_seconds", "Deprecated alias of inter-token latency"),
    ("tpot", "vllm:request_time_per_output_token_seconds", "Per-request mean TPOT"),
    ("e2e", "vllm:e2e_request_latency_seconds", "End-to-end request latency"),
    ("queue", "vllm:request_queue_time_seconds", "Time in the waiting queue"),
    ("prefill", "vllm:request_prefill_time_seconds", "Scheduled to first token"),
    ("decode", "vllm:request_decode_time_seconds", "First to last token"),
    ("inference", "vllm:request_inference_time_seconds", "Scheduled to last token"),
    ("req_prompt", "vllm:request_prompt_tokens", "Prompt tokens per request"),
    ("req_generation", "vllm:request_generation_tokens", "Generated tokens per request"),
    ("req_max_tokens", "vllm:request_params_max_tokens", "max_tokens per request"),
    ("req_n", "vllm:request_params_n", "n per request"),
)


# The ground-truth counters: (name without _total, help, key of SimServer.truth_totals()).
_TRUTH_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("tokenwatt_sim_energy_joules", "Energy of all GPUs of the node, J", "energy_j"),
    (
        "tokenwatt_sim_decode_weight_bytes",
        "Weight bytes read by steps that decode at least one sequence",
        "decode_weight_bytes",
    ),
    ("tokenwatt_sim_weight_bytes", "Weight bytes read by all steps", "weight_bytes"),
    ("tokenwatt_sim_decode_kv_bytes", "KV-cache bytes read by decodes", "decode_kv_bytes"),
    ("tokenwatt_sim_prefill_tokens", "Prompt and recompute tokens prefilled", "prefill_tokens"),
    ("tokenwatt_sim_busy_seconds", "Modelled step time", "busy_s"),
    ("tokenwatt_sim_idle_seconds", "Time with no step", "idle_s"),
    ("tokenwatt_sim_memory_seconds", "Step time spent reading", "memory_s"),
    ("tokenwatt_sim_prefill_seconds", "Step time spent in prefill", "prefill_s"),
    ("tokenwatt_sim_overhead_seconds", "Fixed per-step overhead time", "overhead_s"),
    (
        "tokenwatt_sim_running_seconds",
        "Integral of sequences scheduled per step over step time (all replicas); its "
        "increase over a window / (window x replicas) is the time-weighted mean running set",
        "running_s",
    ),
    (
        "tokenwatt_sim_decode_batch_seconds",
        "Integral of decode sequences per step over step time (all replicas); its increase "
        "over a window / (window x replicas) is the time-weighted mean decode batch",
        "decode_batch_s",
    ),
    (
        "tokenwatt_sim_prefix_cache_evicted_blocks",
        "Cached prompt blocks whose name was forgotten to make room",
        "evicted_blocks",
    ),
    ("tokenwatt_sim_draft_bytes", "Bytes read by the speculative drafter", "draft_bytes"),
    ("tokenwatt_sim_steps", "Engine steps", "steps"),
    ("tokenwatt_sim_decode_steps", "Steps with a decode", "decode_steps"),
    ("tokenwatt_sim_tokens_emitted", "Tokens emitted", "tokens_emitted"),
    ("tokenwatt_sim_decode_tokens", "Tokens emitted by decodes (not first)", "decode_tokens"),
    ("tokenwatt_sim_catchup_steps", "Steps that started behind schedule", "late_steps"),
)


class SimCollector(Collector):
    """Reads the server's state at scrape time. ``source`` returns a snapshot dict."""

    def __init__(self, source: Callable[[], dict[str, Any]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        s = self.source()
        yield from self._engine_families(s)
        yield from self._truth_families(s)

    def _engine_families(self, s: dict[str, Any]) -> Iterator[Metric]:
        """vLLM's names, one sample per replica (``engine`` label)."""
        model: str = s["model"]
        engines: list[dict[str, Any]] = s["engines"]
        labels = ["model_name", "engine"]

        def gauge(name: str, doc: str, key: str) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            for i, e in enumerate(engines):
                g.add_metric([model, str(i)], float(e[key]))
            return g

        def counter(name: str, doc: str, attr: str) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            for i, e in enumerate(engines):
                c.add_metric([model, str(i)], float(getattr(e["stats"], attr)))
            return c

        yield gauge("vllm:num_requests_running", "Requests in the running set", "running")
        yield gauge("vllm:num_requests_waiting", "Requests waiting (incl. preempted)", "waiting")
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0-1", "kv_usage")
        yield gauge(
            "vllm:gpu_cache_usage_perc", "Deprecated alias of kv_cache_usage_perc", "kv_usage"
        )
        yield counter("vllm:num_preemptions", "Preemptions", "preemptions")
        yield counter("vllm:prompt_tokens", "Prompt tokens of completed prefills", "prompt_tokens")
        yield counter("vllm:generation_tokens", "Generated tokens", "generation_tokens")
        for name, key in (
            ("vllm:prefix_cache_queries", "prefix_queries"),
            ("vllm:prefix_cache_hits", "prefix_hits"),
        ):
            c = CounterMetricFamily(
                name, "Prefix cache tokens looked up / found at admission", labels=labels
            )
            for i, e in enumerate(engines):
                c.add_metric([model, str(i)], float(e[key]))
            yield c
        if engines and engines[0]["stats"].spec_positions:
            yield from _spec_families(model, engines)
        succ = CounterMetricFamily(
            "vllm:request_success", "Finished requests", labels=[*labels, "finished_reason"]
        )
        for i, e in enumerate(engines):
            for reason, n in e["stats"].success.items():
                succ.add_metric([model, str(i), reason], float(n))
        yield succ
        for attr, name, doc in _HISTS:
            fam: HistogramMetricFamily | None = None
            for i, e in enumerate(engines):
                h: Hist = getattr(e["stats"], attr)
                fam = h.family(name, doc, {"model_name": model, "engine": str(i)}, fam)
            if fam is not None:
                yield fam
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "KV-cache configuration",
            labels=[*labels, "block_size", "num_gpu_blocks", "gpu_memory_utilization",
                    "enable_prefix_caching"],
        )  # fmt: skip
        for i, e in enumerate(engines):
            caching = str(e["prefix_caching"])
            info.add_metric([model, str(i), "16", str(e["num_blocks"]), "0.9", caching], 1.0)
        yield info
        yield _expert_tokens(model, engines)

    def _truth_families(self, s: dict[str, Any]) -> Iterator[Metric]:
        """The ``tokenwatt_sim_*`` ground truth: node totals without labels."""
        t = s["truth"]
        for name, doc, key in _TRUTH_COUNTERS:
            yield CounterMetricFamily(name, doc, value=float(t[key]))
        yield GaugeMetricFamily(
            "tokenwatt_sim_catchup_deficit_seconds",
            "How far behind its deadlines the slowest replica is now",
            value=float(t["deficit_s"]),
        )
        yield GaugeMetricFamily(
            "tokenwatt_sim_max_catchup_deficit_seconds",
            "Largest deficit seen",
            value=float(t["max_deficit_s"]),
        )
        yield GaugeMetricFamily(
            "tokenwatt_sim_bandwidth_bytes_per_second",
            "Rated memory bandwidth of all GPUs of the node",
            value=float(s["bandwidth_bytes_per_s"]),
        )
        lat = s["lateness"]
        hl = HistogramMetricFamily(
            "tokenwatt_sim_emit_lateness_seconds",
            "From a step's deadline to the write of each of its chunks",
        )
        cum = 0
        buckets: list[tuple[str, float]] = []
        for b, c in zip(LATENESS_BUCKETS_S, lat.bucket_counts[:-1], strict=True):
            cum += int(c)
            buckets.append((_fmt(b), float(cum)))
        buckets.append(("+Inf", float(lat.count)))
        hl.add_metric([], buckets, lat.sum_s)
        yield hl


def _spec_families(model: str, engines: list[dict[str, Any]]) -> Iterator[Metric]:
    """vLLM's spec-decode counters (v1 ``SpecDecodingProm``): drafts = sequences verified,
    draft tokens = proposed, accepted tokens, and accepted tokens per draft position."""
    labels = ["model_name", "engine"]
    for name, doc, attr in (
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts", "spec_drafts"),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens", "spec_draft_tokens"),
        (
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens",
            "spec_accepted_tokens",
        ),
    ):
        c = CounterMetricFamily(name, doc, labels=labels)
        for i, e in enumerate(engines):
            c.add_metric([model, str(i)], float(getattr(e["stats"], attr)))
        yield c
    per = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position",
        labels=[*labels, "position"],
    )
    for i, e in enumerate(engines):
        for pos, n in enumerate(e["stats"].spec_accepted_per_pos):
            per.add_metric([model, str(i), str(pos)], float(n))
    yield per


def _expert_tokens(model: str, engines: list[dict[str, Any]]) -> CounterMetricFamily:
    """Per-expert routed-token counters, as SGLang's expert distribution recorder counts them
    (tokens routed to each expert of each MoE layer), for ``engine.expert_load``. The
    simulator draws how many distinct experts a step hits, not which tokens went where, so
    each expert's counter is its expected share π_r of the routed tokens; its layers share
    one routing law, so one ``layer="all"`` row stands for every MoE layer."""
    c = CounterMetricFamily(
        "tokenwatt_sim_expert_tokens",
        "Tokens routed to each expert (expected: routed tokens x the expert's inclusion "
        "probability); layer=all: every MoE layer alike",
        labels=["model_name", "engine", "layer", "expert"],
    )
    for i, e in enumerate(engines):
        routed = float(e["stats"].routed_tokens)
        for r, pi in enumerate(e.get("expert_inclusion", ())):
            c.add_metric([model, str(i), "all", str(r)], routed * float(pi))
    return c


def make_registry(source: Callable[[], dict[str, Any]]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimCollector(source))
    return registry
