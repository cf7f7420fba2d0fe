"""Latency, throughput and SLO figures of one probe, from its request records alone.

Which requests count: those *scheduled* inside the measurement window ``[start, end)``
(``window_start_ns <= scheduled_ns < window_end_ns``), whatever became of them. The probe
drains them after the window closes, so each counted request ran to completion, failed or
timed out; failures stay in the denominators of rates, attainment and percentile checks.

Per request (all times from the client's monotonic clock):

* TTFT = first content chunk − request sent
* E2E  = last content chunk − request sent (a trailing usage-only chunk does not extend it)
* TPOT = (E2E − TTFT) / (n − 1) for n ≥ 2 output tokens (the vLLM / MLPerf definition)
* chunk ITL = the gaps between consecutive content chunks (one gap per chunk, not per token)

Across counted successful requests: τ = Σ(E2E − TTFT) / Σ(n − 1), the token-weighted mean
inter-token latency the seed's MBU uses. ``docs/methodology.md`` has every definition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tokenwatt.metrics.stats import Distribution, summarize
from tokenwatt.records import RequestRecord
from tokenwatt.spec.slo import SLO

__all__ = [
    "ProbeMetrics",
    "SloResult",
    "compute_probe_metrics",
    "counted_records",
    "e2e_s",
    "is_counted",
    "meets_slo",
    "tpot_s",
    "ttft_s",
]

_NS = 1e9
# A chunk is "multi-token" when it carries more than one token; above this share of chunks the
# per-chunk timing no longer reflects one engine step per token (speculative decoding, coalescing).
MULTI_TOKEN_CHUNK_SHARE = 0.01


def is_counted(rec: RequestRecord, window_start_ns: int, window_end_ns: int) -> bool:
    """A request counts when it was scheduled inside the window, half-open ``[start, end)``."""
    return window_start_ns <= rec.scheduled_ns < window_end_ns


def counted_records(
    records: Iterable[RequestRecord], window_start_ns: int, window_end_ns: int
) -> list[RequestRecord]:
    return [r for r in records if is_counted(r, window_start_ns, window_end_ns)]


def ttft_s(rec: RequestRecord) -> float | None:
    if rec.sent_ns is None or rec.first_token_ns is None:
        return None
    return (rec.first_token_ns - rec.sent_ns) / _NS


def e2e_s(rec: RequestRecord) -> float | None:
    if rec.sent_ns is None or rec.end_ns is None:
        return None
    return (rec.end_ns - rec.sent_ns) / _NS


def _decode_ns(rec: RequestRecord) -> int | None:
    """E2E − TTFT: last content chunk − first content chunk."""
    if rec.first_token_ns is None or rec.end_ns is None:
        return None
    return rec.end_ns - rec.first_token_ns


def tpot_s(rec: RequestRecord) -> float | None:
    """(E2E − TTFT) / (n − 1); None when n < 2 (no inter-token time exists)."""
    n = rec.output_tokens
    d = _decode_ns(rec)
    if d is None or n < 2:
        return None
    return d / _NS / (n - 1)


def meets_slo(rec: RequestRecord, slo: SLO) -> bool:
    """Per-request attainment: a successful request whose TTFT, TPOT and (if set) E2E are each
    within their limits. Failures never attain. TPOT of a one-token output is taken as 0
    (it has no inter-token time), as in vLLM's goodput."""
    if not rec.ok:
        return False
    t = ttft_s(rec)
    if t is None:
        return False
    if slo.ttft_ms is not None and t > slo.ttft_ms / 1e3:
        return False
    if slo.tpot_ms is not None and (tpot_s(rec) or 0.0) > slo.tpot_ms / 1e3:
        return False
    if slo.e2e_ms is not None:
        e = e2e_s(rec)
        if e is None or e > slo.e2e_ms / 1e3:
            return False
    return True


class SloResult(BaseModel):
    """Per-request attainment of the spec's limits. The pass/fail verdict of a probe (percentile
    or attainment form, nearest-rank quantiles) is ``tokenwatt.metrics.slo.evaluate_slo``'s."""

    model_config = ConfigDict(frozen=True)

    ttft_limit_s: float | None
    tpot_limit_s: float | None
    e2e_limit_s: float | None
    attained_requests: int
    slo_attainment: float | None  # attained / counted (failures count as not attained)


class ProbeMetrics(BaseModel):
    """Every figure of one probe. Times in seconds, rates per second; see the module doc."""

    model_config = ConfigDict(frozen=True)

    window_s: float
    # counts
    requests_total: int  # every record of the probe (warm-up, window, drain-time load)
    requests_counted: int  # scheduled inside the window
    requests_ok: int  # counted and successful
    requests_failed: int  # counted and failed (any error kind, timeouts and cancellations too)
    errors_by_kind: dict[str, int]  # counted failures by error kind
    # rates
    target_requests_per_s: float | None  # the rate asked for (None: closed loop)
    offered_requests_per_s: float | None  # counted / window (what the client actually offered)
    achieved_requests_per_s: float | None  # counted successes / window
    output_tokens: int  # Σ n over counted requests (failures contribute what they delivered)
    output_tokens_per_s: float | None  # T = output_tokens / window
    window_output_tokens_per_s: float | None  # tokens whose chunks arrived in the window / window
    throughput_balance: float | None  # T / window_output_tokens_per_s (≈ 1 at steady state)
    # per-request latency distributions (counted successful requests)
    ttft_s: Distribution
    tpot_s: Distribution
    itl_chunk_s: Distribution  # gaps between consecutive content chunks, pooled
    e2e_s: Distribution
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
    send_lateness_s: Distribution  # sent − scheduled, counted requests
    # SLO
    slo_attainment: float | None
    goodput_requests_per_s: float | None
    goodput_output_tokens_per_s: float | None
    slo: SloResult | None


def _rate(x: float, window_s: float) -> float | None:
    return x / window_s if window_s > 0 else None


def _slo_result(counted: Sequence[RequestRecord], slo: SLO) -> SloResult:
    attained = sum(1 for r in counted if meets_slo(r, slo))
    return SloResult(
        ttft_limit_s=None if slo.ttft_ms is None else slo.ttft_ms / 1e3,
        tpot_limit_s=None if slo.tpot_ms is None else slo.tpot_ms / 1e3,
        e2e_limit_s=None if slo.e2e_ms is None else slo.e2e_ms / 1e3,
        attained_requests=attained,
        slo_attainment=attained / len(counted) if counted else None,
    )


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
    failed = [r for r in counted if not r.ok]
    errors = Counter(r.error_kind or "unknown" for r in failed)

    output_tokens = sum(r.output_tokens for r in counted)
    in_window_tokens = 0
    for r in records:
        for t_ns, k in zip(r.chunk_ns, r.chunk_tokens, strict=False):
            if window_start_ns <= t_ns < window_end_ns:
                in_window_tokens += k
    t_rate = _rate(output_tokens, window_s)
    w_rate = _rate(in_window_tokens, window_s)

    ttfts = [v for r in ok if (v := ttft_s(r)) is not None]
    tpots = [v for r in ok if (v := tpot_s(r)) is not None]
    e2es = [v for r in ok if (v := e2e_s(r)) is not None]
    gaps: list[float] = []
    for r in ok:
        c = r.chunk_ns
        gaps.extend((c[i + 1] - c[i]) / _NS for i in range(len(c) - 1))

    # τ over counted successes that have a first and last chunk.
    decode_ns = 0
    decode_tokens = 0
    for r in ok:
        d = _decode_ns(r)
        if d is not None and r.output_tokens >= 1:
            decode_ns += d
            decode_tokens += r.output_tokens - 1
    tau = decode_ns / _NS / decode_tokens if decode_tokens > 0 else None

    busy_ns = 0
    for r in counted:
        stop = r.done_ns if r.done_ns is not None else r.end_ns
        if r.sent_ns is not None and stop is not None:
            busy_ns += max(0, stop - r.sent_ns)
    concurrency = _rate(busy_ns / _NS, window_s) if counted else None

    ctx_sum = 0
    ctx_tokens = 0
    for r in counted:
        n = r.output_tokens
        if n > 0 and r.prompt_tokens is not None:
            ctx_sum += n * r.prompt_tokens + n * (n - 1) // 2
            ctx_tokens += n
    mean_ctx = ctx_sum / ctx_tokens if ctx_tokens else None

    with_prompt = [r for r in ok if r.prompt_tokens is not None]
    prompt_mean = (
        sum(r.prompt_tokens or 0 for r in with_prompt) / len(with_prompt) if with_prompt else None
    )
    prompt_client_mean = (
        sum(r.prompt_tokens_client for r in with_prompt) / len(with_prompt) if with_prompt else None
    )

    chunk_counts = [k for r in counted for k in r.chunk_tokens]
    n_chunks = len(chunk_counts)
    multi_share = sum(1 for k in chunk_counts if k > 1) / n_chunks if n_chunks else None

    sources = {r.timestamp_source for r in counted if r.chunk_ns}
    ts_source: Literal["kernel", "user", "mixed", "none"]
    if not sources:
        ts_source = "none"
    elif len(sources) > 1:
        ts_source = "mixed"
    else:
        ts_source = "kernel" if "kernel" in sources else "user"

    lateness = [(r.sent_ns - r.scheduled_ns) / _NS for r in counted if r.sent_ns is not None]

    slo_res = _slo_result(counted, slo) if slo is not None else None
    good = [r for r in counted if slo is not None and meets_slo(r, slo)]

    return ProbeMetrics(
        window_s=window_s,
        requests_total=len(records),
        requests_counted=len(counted),
        requests_ok=len(ok),
        requests_failed=len(failed),
        errors_by_kind=dict(sorted(errors.items())),
        target_requests_per_s=target_rate_rps,
        offered_requests_per_s=_rate(len(counted), window_s),
        achieved_requests_per_s=_rate(len(ok), window_s),
        output_tokens=output_tokens,
        output_tokens_per_s=t_rate,
        window_output_tokens_per_s=w_rate,
        throughput_balance=(t_rate / w_rate) if t_rate is not None and w_rate else None,
        ttft_s=summarize(ttfts),
        tpot_s=summarize(tpots),
        itl_chunk_s=summarize(gaps),
        e2e_s=summarize(e2es),
        itl_token_weighted_s=tau,
        mean_concurrency=concurrency,
        mean_context_per_token=mean_ctx,
        prompt_tokens_mean=prompt_mean,
        prompt_tokens_client_mean=prompt_client_mean,
        output_tokens_mean=(sum(r.output_tokens for r in ok) / len(ok)) if ok else None,
        tokens_per_chunk_mean=(sum(chunk_counts) / n_chunks) if n_chunks else None,
        tokens_per_chunk_max=max(chunk_counts) if chunk_counts else None,
        multi_token_chunk_share=multi_share,
        multi_token_chunks=multi_share is not None and multi_share > MULTI_TOKEN_CHUNK_SHARE,
        coalesced_reads=sum(r.coalesced_reads for r in counted),
        usage_fallback_requests=sum(1 for r in counted if r.usage_source == "fallback"),
        timestamp_source=ts_source,
        send_lateness_s=summarize(lateness),
        slo_attainment=slo_res.slo_attainment if slo_res else None,
        goodput_requests_per_s=_rate(len(good), window_s) if slo is not None else None,
        goodput_output_tokens_per_s=(
            _rate(sum(r.output_tokens for r in good), window_s) if slo is not None else None
        ),
        slo=slo_res,
    )
