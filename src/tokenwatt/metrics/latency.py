"""Latency, throughput and SLO figures of one probe, from its request records alone.

Which requests count: those *scheduled* inside the measurement window ``[start, end)``
(``window_start_ns <= scheduled_ns < window_end_ns``), whatever became of them. The probe
drains them after the window closes, so each counted request ran to completion, failed or
timed out; failures stay in the denominators of rates, attainment and percentile checks.
Cancelled requests (the client ended them: early stop, Ctrl-C) are their own kind: counted
as offered, but neither failures nor attainment misses.

Per-request definitions (TTFT, TPOT, E2E) live in ``metrics.request``. T, the headline
throughput and MBU's T, is the output tokens whose receive stamps fall inside the window ÷
the window, over every request of the probe (a token delivered in the window is delivered,
whichever request carried it). τ = Σ(E2E − TTFT) / Σ(n − 1) over counted successful
requests. ``docs/methodology.md`` has every definition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tokenwatt.metrics.request import (
    counted_records,
    decode_ns,
    e2e_s,
    is_counted,
    tpot_s,
    ttft_answer_s,
    ttft_reasoning_s,
    ttft_s,
)
from tokenwatt.metrics.slo import Limits, RequestLatency
from tokenwatt.metrics.stats import summarize
from tokenwatt.records import RequestRecord
from tokenwatt.result import Latency
from tokenwatt.spec.slo import SLO

__all__ = [
    "LATENESS_FLOOR_S",
    "LATENESS_SHARE_OF_GAP",
    "ProbeMetrics",
    "compute_probe_metrics",
    "counted_records",
    "e2e_s",
    "is_counted",
    "sent_late",
    "tpot_s",
    "ttft_s",
]

_NS = 1e9
# A chunk is "multi-token" when it carries more than one token; above this share of chunks the
# per-chunk timing no longer reflects one engine step per token (speculative decoding, coalescing).
MULTI_TOKEN_CHUNK_SHARE = 0.01
# The client sent late (it, not the server, shaped the load) when its p99 send lateness exceeds
# this share of the mean gap between arrivals, and this absolute floor. The floor is what one
# client process reaches on a quiet machine: a step's chunks for every stream arrive together
# and are handled in one burst, so a send due inside it waits (measured 2.2-3.3 ms p99 at
# 32 req/s against the simulator, with and without the engine scraper); lateness below it is
# not a load generator falling behind, and more workers would not remove it.
LATENESS_SHARE_OF_GAP = 0.1
LATENESS_FLOOR_S = 5e-3


def sent_late(lateness_p99_s: float | None, rate_rps: float | None) -> bool:
    """The one lateness rule (``tokenwatt probe`` and the report's self-check both use it)."""
    if lateness_p99_s is None or rate_rps is None or not rate_rps > 0:
        return False
    return lateness_p99_s > max(LATENESS_FLOOR_S, LATENESS_SHARE_OF_GAP / rate_rps)


class ProbeMetrics(BaseModel):
    """Every figure of one probe. Times in seconds, rates per second; see the module doc."""

    model_config = ConfigDict(frozen=True)

    window_s: float
    # counts
    requests_total: int  # every record of the probe (warm-up, window, drain-time load)
    requests_counted: int  # scheduled inside the window
    requests_ok: int  # counted and successful
    requests_failed: int  # counted and failed (any error kind, timeouts too)
    requests_cancelled: int  # counted and cancelled by the client (not failures)
    errors_by_kind: dict[str, int]  # counted failures by error kind
    # rates
    offered_requests_per_s: float | None  # offered: the rate asked for (None: closed loop)
    counted_requests_per_s: float | None  # counted: requests scheduled in the window / window
    achieved_requests_per_s: float | None  # achieved: counted successes / window
    output_tokens: int  # tokens received inside the window (every request of the probe)
    output_tokens_per_s: float | None  # T = output_tokens / window
    counted_output_tokens: int  # Σ n over counted requests (what they delivered, ever)
    throughput_balance: float | None  # counted_output_tokens / output_tokens (≈ 1 at steady state)
    # per-request latency distributions (counted successful requests)
    ttft_s: Latency
    tpot_s: Latency
    itl_chunk_s: Latency  # gaps between consecutive content chunks, pooled
    e2e_s: Latency
    itl_token_weighted_s: float | None  # τ = Σ(E2E − TTFT) / Σ(n − 1)
    mean_concurrency: float | None  # Little's law: Σ(done − sent) over counted / window
    mean_context_per_token: float | None  # Σ(n·L + n(n−1)/2) / Σn, L = server prompt tokens
    prompt_tokens_mean: float | None  # server-reported (usage) prompt tokens, counted successes
    prompt_tokens_client_mean: float | None  # the client's own count for the same requests
    output_tokens_mean: float | None
    # chunks
    tokens_per_chunk_mean: float | None
    tokens_per_chunk_max: int | None
    multi_token_chunk_share: float | None
    multi_token_chunks: bool  # share > 1 %: per-chunk timing is not per-token timing
    coalesced_reads: int  # client reads that returned more than one content event
    usage_fallback_requests: int  # counted requests whose token counts are the client's fallback
    timestamp_source: Literal["kernel", "user", "mixed", "none"]
    # client keeping up
    send_lateness_s: Latency  # sent − scheduled, counted requests
    # SLO: attained / (counted − cancelled); goodput tokens = T × attaining share of tokens
    slo_attainment: float | None
    goodput_requests_per_s: float | None
    goodput_output_tokens_per_s: float | None
    # reasoning models (None / 0 when no counted request streamed reasoning): reasoning tokens
    # are in every output figure above; these split them out
    reasoning_output_tokens: int = 0  # Σ reasoning tokens over counted requests
    ttft_reasoning_s: Latency | None = None  # first reasoning chunk − sent, counted successes
    ttft_answer_s: Latency | None = None  # first answer chunk − sent, counted successes


def _rate(x: float, window_s: float) -> float | None:
    return x / window_s if window_s > 0 else None


def in_window_tokens(records: Sequence[RequestRecord], start_ns: int, end_ns: int) -> int:
    """Output tokens whose receive stamps fall in ``[start, end)``: the numerator of T."""
    total = 0
    for r in records:
        for t_ns, k in zip(r.chunk_ns, r.chunk_tokens, strict=False):
            if start_ns <= t_ns < end_ns:
                total += k
    return total


def _token_weighted_itl_s(ok: Sequence[RequestRecord]) -> float | None:
    """τ over counted successes that have a first and last chunk."""
    total_ns = 0
    tokens = 0
    for r in ok:
        d = decode_ns(r)
        if d is not None and r.output_tokens >= 1:
            total_ns += d
            tokens += r.output_tokens - 1
    return total_ns / _NS / tokens if tokens > 0 else None


def _mean_context(counted: Sequence[RequestRecord]) -> float | None:
    ctx_sum = 0
    ctx_tokens = 0
    for r in counted:
        n = r.output_tokens
        if n > 0 and r.prompt_tokens is not None:
            ctx_sum += n * r.prompt_tokens + n * (n - 1) // 2
            ctx_tokens += n
    return ctx_sum / ctx_tokens if ctx_tokens else None


def _busy_s(counted: Sequence[RequestRecord]) -> float:
    busy_ns = 0
    for r in counted:
        stop = r.done_ns if r.done_ns is not None else r.end_ns
        if r.sent_ns is not None and stop is not None:
            busy_ns += max(0, stop - r.sent_ns)
    return busy_ns / _NS


def _timestamp_source(
    counted: Sequence[RequestRecord],
) -> Literal["kernel", "user", "mixed", "none"]:
    sources = {r.timestamp_source for r in counted if r.chunk_ns}
    if not sources:
        return "none"
    if len(sources) > 1:
        return "mixed"
    return "kernel" if "kernel" in sources else "user"


def _chunk_figures(counted: Sequence[RequestRecord]) -> dict[str, object]:
    chunk_counts = [k for r in counted for k in r.chunk_tokens]
    n_chunks = len(chunk_counts)
    multi_share = sum(1 for k in chunk_counts if k > 1) / n_chunks if n_chunks else None
    return {
        "tokens_per_chunk_mean": (sum(chunk_counts) / n_chunks) if n_chunks else None,
        "tokens_per_chunk_max": max(chunk_counts) if chunk_counts else None,
        "multi_token_chunk_share": multi_share,
        "multi_token_chunks": multi_share is not None and multi_share > MULTI_TOKEN_CHUNK_SHARE,
    }


def _prompt_figures(ok: Sequence[RequestRecord]) -> dict[str, object]:
    with_prompt = [r for r in ok if r.prompt_tokens is not None]
    n = len(with_prompt)
    return {
        "prompt_tokens_mean": sum(r.prompt_tokens or 0 for r in with_prompt) / n if n else None,
        "prompt_tokens_client_mean": (
            sum(r.prompt_tokens_client for r in with_prompt) / n if n else None
        ),
        "output_tokens_mean": (sum(r.output_tokens for r in ok) / len(ok)) if ok else None,
    }


def _slo_figures(
    judged: Sequence[RequestRecord], slo: SLO | None, window_s: float, t_rate: float | None
) -> dict[str, object]:
    """Attainment and goodput. Goodput in tokens is T × the share of the judged requests'
    tokens that came from attaining requests: on T's footing (tokens received in the window),
    so goodput ≤ T always; at steady state it equals attaining tokens ÷ window."""
    if slo is None:
        return {
            "slo_attainment": None,
            "goodput_requests_per_s": None,
            "goodput_output_tokens_per_s": None,
        }
    limits = Limits.from_spec(slo)
    good = [r for r in judged if RequestLatency.from_record(r).meets(limits)]
    judged_tokens = sum(r.output_tokens for r in judged)
    good_share = sum(r.output_tokens for r in good) / judged_tokens if judged_tokens else 0.0
    return {
        "slo_attainment": len(good) / len(judged) if judged else None,
        "goodput_requests_per_s": _rate(len(good), window_s),
        "goodput_output_tokens_per_s": None if t_rate is None else t_rate * good_share,
    }


def compute_probe_metrics(
    records: Sequence[RequestRecord],
    *,
    window_start_ns: int,
    window_end_ns: int,
    slo: SLO | None = None,
    target_rate_rps: float | None = None,
) -> ProbeMetrics:
    """All figures of one probe from its records and its window. Pure; no clock is read."""
    window_s = max(0.0, (window_end_ns - window_start_ns) / _NS)
    counted = counted_records(records, window_start_ns, window_end_ns)
    ok = [r for r in counted if r.ok]
    failed = [r for r in counted if r.failed]
    judged = [r for r in counted if not r.cancelled]
    tokens = in_window_tokens(records, window_start_ns, window_end_ns)
    counted_tokens = sum(r.output_tokens for r in counted)
    gaps = [(c[i + 1] - c[i]) / _NS for r in ok for c in (r.chunk_ns,) for i in range(len(c) - 1)]
    lateness = [(r.sent_ns - r.scheduled_ns) / _NS for r in counted if r.sent_ns is not None]
    return ProbeMetrics(
        window_s=window_s,
        requests_total=len(records),
        requests_counted=len(counted),
        requests_ok=len(ok),
        requests_failed=len(failed),
        requests_cancelled=len(counted) - len(judged),
        errors_by_kind=dict(sorted(Counter(r.error_kind or "unknown" for r in failed).items())),
        offered_requests_per_s=target_rate_rps,
        counted_requests_per_s=_rate(len(counted), window_s),
        achieved_requests_per_s=_rate(len(ok), window_s),
        output_tokens=tokens,
        output_tokens_per_s=_rate(tokens, window_s),
        counted_output_tokens=counted_tokens,
        throughput_balance=counted_tokens / tokens if tokens else None,
        ttft_s=summarize([v for r in ok if (v := ttft_s(r)) is not None]),
        tpot_s=summarize([v for r in ok if (v := tpot_s(r)) is not None]),
        itl_chunk_s=summarize(gaps),
        e2e_s=summarize([v for r in ok if (v := e2e_s(r)) is not None]),
        itl_token_weighted_s=_token_weighted_itl_s(ok),
        mean_concurrency=_rate(_busy_s(counted), window_s) if counted else None,
        mean_context_per_token=_mean_context(counted),
        coalesced_reads=sum(r.coalesced_reads for r in counted),
        usage_fallback_requests=sum(1 for r in counted if r.usage_source == "fallback"),
        timestamp_source=_timestamp_source(counted),
        send_lateness_s=summarize(lateness),
        **_prompt_figures(ok),
        **_chunk_figures(counted),
        **_slo_figures(judged, slo, window_s, _rate(tokens, window_s)),
        **_reasoning_figures(counted, ok),
    )


def _reasoning_figures(
    counted: Sequence[RequestRecord], ok: Sequence[RequestRecord]
) -> dict[str, Any]:
    """Reasoning tokens and the two first-token times, only where reasoning was streamed."""
    if not any(r.first_reasoning_ns is not None for r in counted):
        return {}
    return {
        "reasoning_output_tokens": sum(r.reasoning_tokens for r in counted),
        "ttft_reasoning_s": summarize([v for r in ok if (v := ttft_reasoning_s(r)) is not None]),
        "ttft_answer_s": summarize([v for r in ok if (v := ttft_answer_s(r)) is not None]),
    }
