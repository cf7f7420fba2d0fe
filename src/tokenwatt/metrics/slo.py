"""Judging one probe against the SLO: the verdict, early stop of a clear failure, and trends.

Percentile form (MLPerf's LLM server scenarios): the q-quantile of TTFT and of TPOT (and of
E2E when set) over the probe's counted requests each meet their limit. Attainment form: at
least a fraction of requests meet every limit. In both forms a failed request counts as
missing every limit, so errors count against the SLO rather than vanishing from it.

Quantiles here are nearest-rank (the ⌈q·N⌉-th smallest sample), so the verdict is a count:
p99 over N requests passes exactly when at most N − ⌈0.99·N⌉ of them exceed the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tokenwatt.spec.slo import SLO

__all__ = [
    "EARLY_STOP_CONFIDENCE",
    "TREND_MIN_REQUESTS",
    "TREND_RATIO",
    "TREND_SHIFT_OF_LIMIT",
    "Limits",
    "RequestLatency",
    "SLOVerdict",
    "Trend",
    "binomial_sf",
    "clearly_failed",
    "detect_trend",
    "evaluate_slo",
    "nearest_rank",
    "violation_budget",
]

# Early stop: the probe is abandoned once the violations seen so far would occur with
# probability below 1 − this for a server that meets the SLO (one-sided binomial test).
EARLY_STOP_CONFIDENCE = 0.99
# Trend: a probe is overloaded when the median TTFT of the last third of its requests (by
# send time) is more than TREND_RATIO × that of the first third AND has grown by more than
# TREND_SHIFT_OF_LIMIT × the TTFT limit (so a rise from 20 to 45 ms under a 2 s limit is noise,
# while a queue that grows by half a second across the window is not).
TREND_RATIO = 2.0
TREND_SHIFT_OF_LIMIT = 0.25
TREND_MIN_REQUESTS = 30


@dataclass(frozen=True, slots=True)
class Limits:
    """The SLO in seconds, presets resolved."""

    kind: Literal["percentile", "attainment"]
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    percentile: float
    attainment: float

    @classmethod
    def from_spec(cls, slo: SLO) -> Limits:
        def s(ms: float | None) -> float | None:
            return None if ms is None else ms / 1000.0

        return cls(
            kind=slo.kind,
            ttft_s=s(slo.ttft_ms),
            tpot_s=s(slo.tpot_ms),
            e2e_s=s(slo.e2e_ms),
            percentile=slo.percentile,
            attainment=slo.attainment,
        )

    @property
    def allowed_violation_fraction(self) -> float:
        """Per limit (percentile) or per request (attainment): the fraction allowed to miss."""
        return 1.0 - (self.percentile if self.kind == "percentile" else self.attainment)

    def names(self) -> list[str]:
        q = _pct_name(self.percentile)
        return [f"{m}_{q}" for m, v in self._pairs() if v is not None]

    def _pairs(self) -> list[tuple[str, float | None]]:
        return [("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s)]


def _pct_name(q: float) -> str:
    p = q * 100
    return f"p{p:g}" if abs(p - round(p)) > 1e-9 else f"p{round(p)}"


@dataclass(frozen=True, slots=True)
class RequestLatency:
    """One counted request as the SLO sees it. ``tpot_s`` is None for one-token outputs (no
    inter-token time exists; they meet any TPOT limit, as in vLLM's goodput)."""

    ok: bool
    sent_s: float  # send time, any origin (used only for ordering and trends)
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def value(self, metric: str) -> float:
        """The metric, with a failure as +inf so that it misses every limit."""
        if not self.ok:
            return math.inf
        v = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2e": self.e2e_s}[metric]
        if v is None:
            return 0.0 if metric == "tpot" else math.inf
        return v

    def meets(self, limits: Limits) -> bool:
        return all(self.value(m) <= lim for m, lim in limits._pairs() if lim is not None)


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The ⌈q·N⌉-th smallest value (q in (0, 1]); NaN for no values."""
    if not values:
        return math.nan
    k = max(1, math.ceil(q * len(values) - 1e-9))
    return sorted(values)[k - 1]


def violation_budget(n: int, q: float) -> int:
    """Samples of n that may exceed the limit while the nearest-rank q-quantile still meets
    it: n − ⌈q·n⌉ (p99: 0 below 100 requests, 1 at 100–199, 2 at 200–299, …)."""
    return n - math.ceil(q * n - 1e-9)


@dataclass(slots=True)
class SLOVerdict:
    passed: bool
    kind: Literal["percentile", "attainment"]
    failed: list[str] = field(default_factory=list)
    attainment: float | None = None  # fraction of requests meeting every limit
    quantiles_s: dict[str, float | None] = field(default_factory=dict)  # nearest-rank
    requests: int = 0
    errors: int = 0
    reason: str | None = None


def evaluate_slo(limits: Limits, reqs: Sequence[RequestLatency]) -> SLOVerdict:
    """Pass or fail over the probe's counted requests. No requests at all is a failure."""
    n = len(reqs)
    errors = sum(1 for r in reqs if not r.ok)
    if n == 0:
        return SLOVerdict(False, limits.kind, ["no_requests"], None, {}, 0, 0, "no requests")
    attain = sum(1 for r in reqs if r.meets(limits)) / n
    quant: dict[str, float | None] = {}
    failed: list[str] = []
    q = limits.percentile
    for metric, lim in limits._pairs():
        if lim is None:
            continue
        name = f"{metric}_{_pct_name(q)}"
        v = nearest_rank([r.value(metric) for r in reqs], q)
        quant[name] = v if math.isfinite(v) else None
        if limits.kind == "percentile" and not v <= lim:
            failed.append(name)
    if limits.kind == "attainment" and attain < limits.attainment:
        failed.append("attainment")
    if failed and errors and not _fails_without_errors(limits, reqs):
        failed.append("errors")
    reason = None
    if failed:
        parts = []
        for name in failed:
            if name == "attainment":
                parts.append(f"attainment {attain:.1%} < {limits.attainment:.1%}")
            elif name == "errors":
                parts.append(f"{errors} of {n} requests failed")
            else:
                got = quant.get(name)
                limit = dict(limits._pairs())[name.split("_")[0]]
                shown = "failed requests" if got is None else f"{got * 1000:.1f} ms"
                parts.append(f"{name} {shown} > {(limit or 0) * 1000:g} ms")
        reason = "; ".join(parts)
    return SLOVerdict(not failed, limits.kind, failed, attain, quant, n, errors, reason)


def _fails_without_errors(limits: Limits, reqs: Sequence[RequestLatency]) -> bool:
    """Would the successful requests alone fail? (False: the errors tipped the verdict.)"""
    oks = [r for r in reqs if r.ok]
    if not oks:
        return False
    return not evaluate_slo(limits, oks).passed


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p), summed in log space (no scipy at run time)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    lc = math.lgamma(n + 1)
    total = 0.0
    for i in range(k, n + 1):
        total += math.exp(lc - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
    return min(1.0, total)


def clearly_failed(
    violations: int,
    decided: int,
    allowed_fraction: float,
    *,
    confidence: float = EARLY_STOP_CONFIDENCE,
) -> bool:
    """True when ``violations`` misses among ``decided`` requests are too many for a server
    whose true miss rate is at most ``allowed_fraction``: P(X ≥ violations) < 1 − confidence.

    This is MLPerf LoadGen's early-stopping binomial argument turned around: LoadGen asks how
    few misses prove a pass; a probe asks how many prove a failure, and stops there.
    """
    if violations <= 0 or decided <= 0:
        return False
    return binomial_sf(violations, decided, allowed_fraction) < 1.0 - confidence


@dataclass(frozen=True, slots=True)
class Trend:
    """Did latency climb across the window? (An overloaded queue grows while it is observed.)"""

    rising: bool
    first_third_ttft_s: float | None
    last_third_ttft_s: float | None
    ratio: float | None
    slope: float | None  # least-squares d(TTFT)/d(send time), s per s
    reason: str | None = None


def detect_trend(reqs: Sequence[RequestLatency], ttft_limit_s: float | None) -> Trend:
    """Compare the median TTFT of the first and last thirds of successful requests, by send
    time. Rising: last ≥ TREND_RATIO × first and last − first ≥ TREND_SHIFT_OF_LIMIT × limit
    (without a TTFT limit, the shift must exceed TREND_SHIFT_OF_LIMIT × the last third itself,
    i.e. the ratio test alone). Fewer than TREND_MIN_REQUESTS successes: no verdict (False)."""
    pts = sorted((r.sent_s, r.ttft_s) for r in reqs if r.ok and r.ttft_s is not None)
    if len(pts) < TREND_MIN_REQUESTS:
        return Trend(False, None, None, None, None)
    third = len(pts) // 3
    first = _median([y for _, y in pts[:third]])
    last = _median([y for _, y in pts[-third:]])
    slope = _slope(pts)
    ratio = last / first if first > 0 else math.inf
    floor = TREND_SHIFT_OF_LIMIT * (ttft_limit_s if ttft_limit_s is not None else last)
    rising = ratio >= TREND_RATIO and (last - first) >= floor and slope > 0
    reason = (
        f"TTFT rose across the window: median {first * 1000:.0f} ms → {last * 1000:.0f} ms "
        f"(×{ratio:.1f}, first to last third): the queue is growing"
        if rising
        else None
    )
    return Trend(rising, first, last, ratio, slope, reason)


def _median(v: list[float]) -> float:
    s = sorted(v)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


def _slope(pts: list[tuple[float, float]]) -> float:
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in pts) / sxx
