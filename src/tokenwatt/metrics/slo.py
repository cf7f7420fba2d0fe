"""Judging one probe against the SLO: the verdict, early stop of a clear failure, and trends.

Percentile form (MLPerf's LLM server scenarios): the q-quantile of TTFT and of TPOT (and of
E2E when set) over the probe's counted requests each meet their limit. Attainment form: at
least a fraction of requests meet every limit. In both forms a failed request counts as
missing every limit, so errors count against the SLO rather than vanishing from it.

Quantiles here are nearest-rank (the ⌈q·N⌉-th smallest sample), so the verdict is a count:
p99 over N requests passes exactly when at most N − ⌈0.99·N⌉ of them exceed the limit. (The
reported distributions use ``stats.interpolated_quantile``, vLLM's definition; the verdict
never does.)

This module is the one SLO judge: ``Limits.from_spec`` is the one ms → s conversion,
``RequestLatency.meets`` the one per-request check, ``judge_probe`` the one verdict
(quantiles or attainment, trend, early stop, interruption) that ``tokenwatt probe`` and
``tokenwatt bench`` both call, and ``EarlyStop`` the one early-stop rule. Cancelled requests
(ended by the client) are not judged.

Errors are not SLO misses. A failed request counts against the SLO as above, but a probe
whose judged requests failed with *broken-endpoint* errors more often than
``slo.max_error_rate`` is an **error probe** (``ErrorTally``): the endpoint is broken, not
slow, and no boundary may be called from it. Broken-endpoint kinds are the transport ones
(``connect``, ``reset``: nothing or half an answer came back) and the server ones
(``http_status``, ``stream_error``, ``truncated``, ``protocol``: the server answered wrongly).
Timeouts (``timeout_first_token``, ``stall``, ``timeout_total``) are latency failures: an
overloaded server is slow, and slowness is exactly what the SLO judges. A probe whose load
generator fell behind its schedule (``saturated``) is neither a pass nor an SLO failure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from tokenwatt.metrics.accuracy import probe_accuracy
from tokenwatt.metrics.request import e2e_s, tpot_s, ttft_s
from tokenwatt.records import RequestRecord
from tokenwatt.spec.endpoint import Timeouts
from tokenwatt.spec.slo import SLO

__all__ = [
    "BROKEN_ENDPOINT_KINDS",
    "EARLY_STOP_CONFIDENCE",
    "FIRST_TOKEN_CAP_S",
    "FIRST_TOKEN_FLOOR_S",
    "FIRST_TOKEN_LIMITS",
    "SERVER_ERROR_KINDS",
    "TRANSPORT_ERROR_KINDS",
    "TREND_MIN_RANK_CORRELATION",
    "TREND_MIN_REQUESTS",
    "TREND_SHIFT_OF_LIMIT",
    "EarlyStop",
    "ErrorTally",
    "Limits",
    "RequestLatency",
    "SLOVerdict",
    "Trend",
    "binomial_sf",
    "clearly_failed",
    "detect_trend",
    "evaluate_slo",
    "first_token_limit_s",
    "judge_probe",
    "latencies",
    "nearest_rank",
    "slo_timeouts",
    "violation_budget",
]

# Early stop: the probe is abandoned once the violations seen so far would occur with
# probability below 1 − this for a server that meets the SLO (one-sided binomial test).
EARLY_STOP_CONFIDENCE = 0.99
# Trend: a probe is overloaded when TTFT climbs across its window: the robust (Theil–Sen)
# slope of TTFT against send time, times the window's span, is at least TREND_SHIFT_OF_LIMIT
# of the TTFT limit (a rise that matters for the SLO, not a 20 → 45 ms drift under 2 s) AND
# the rise is consistent: Spearman rank correlation of TTFT with send time ≥
# TREND_MIN_RANK_CORRELATION (one late burst does not make a trend).
TREND_SHIFT_OF_LIMIT = 0.25
TREND_MIN_RANK_CORRELATION = 0.5
TREND_MIN_REQUESTS = 20
_TREND_MAX_POINTS = 1500  # pairwise slopes are O(n²): thin longer windows evenly
# Error kinds that say the endpoint is broken rather than slow (see the module doc).
TRANSPORT_ERROR_KINDS = frozenset({"connect", "reset"})
SERVER_ERROR_KINDS = frozenset({"http_status", "stream_error", "truncated", "protocol"})
BROKEN_ENDPOINT_KINDS = TRANSPORT_ERROR_KINDS | SERVER_ERROR_KINDS


# A request with no first token this many TTFT limits after its send is a known miss: it is
# failed there (``timeout_first_token``) instead of waiting out endpoint.timeouts. Bounded:
# never under FIRST_TOKEN_FLOOR_S, and over FIRST_TOKEN_CAP_S only for a TTFT limit so long
# that twice the limit is more (an endpoint that never answers is called so within a minute).
FIRST_TOKEN_LIMITS = 10.0
FIRST_TOKEN_FLOOR_S = 1.0
FIRST_TOKEN_CAP_S = 60.0


def first_token_limit_s(ttft_limit_s: float | None) -> float:
    """How long a request may wait for its first token under a TTFT limit (see above)."""
    if ttft_limit_s is None:
        return FIRST_TOKEN_CAP_S
    cap = max(FIRST_TOKEN_CAP_S, 2.0 * ttft_limit_s)
    return max(FIRST_TOKEN_FLOOR_S, min(FIRST_TOKEN_LIMITS * ttft_limit_s, cap))


def slo_timeouts(timeouts: Timeouts, slo: SLO) -> Timeouts:
    """The endpoint's timeouts with the first-token wait bounded by the SLO's TTFT limit
    (``first_token_limit_s``): a request past it is a TTFT miss whatever comes later, so the
    client ends it there. A shorter ``endpoint.timeouts.first_token_s`` stays."""
    limit = first_token_limit_s(Limits.from_spec(slo).ttft_s)
    if timeouts.first_token_s <= limit:
        return timeouts
    return timeouts.model_copy(update={"first_token_s": limit})


@dataclass(frozen=True, slots=True)
class Limits:
    """The SLO in seconds, presets resolved."""

    kind: Literal["percentile", "attainment"]
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    percentile: float
    attainment: float
    accuracy_min: float | None = None  # floor on the graded answers' accuracy (None: none)

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
            accuracy_min=slo.accuracy_min,
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

    @classmethod
    def from_record(cls, rec: RequestRecord, origin_ns: int = 0) -> RequestLatency:
        """A record as the SLO sees it; ``sent_s`` counts from ``origin_ns``."""
        sent = rec.sent_ns if rec.sent_ns is not None else rec.scheduled_ns
        return cls(
            ok=rec.ok,
            sent_s=(sent - origin_ns) / 1e9,
            ttft_s=ttft_s(rec),
            tpot_s=tpot_s(rec),
            e2e_s=e2e_s(rec),
        )

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


def latencies(records: Iterable[RequestRecord], origin_ns: int = 0) -> list[RequestLatency]:
    """The judged requests (every one but the cancelled) as the SLO sees them."""
    return [RequestLatency.from_record(r, origin_ns) for r in records if not r.cancelled]


@dataclass(frozen=True, slots=True)
class ErrorTally:
    """Broken-endpoint errors among a probe's judged (not cancelled) requests."""

    judged: int
    broken: int  # errors of a BROKEN_ENDPOINT_KINDS kind
    by_kind: dict[str, int]

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> ErrorTally:
        judged = broken = 0
        by_kind: dict[str, int] = {}
        for r in records:
            if r.cancelled:
                continue
            judged += 1
            if r.failed and r.error_kind in BROKEN_ENDPOINT_KINDS:
                broken += 1
                by_kind[r.error_kind] = by_kind.get(r.error_kind, 0) + 1
        return cls(judged, broken, by_kind)

    @property
    def rate(self) -> float | None:
        return self.broken / self.judged if self.judged else None

    def is_error_probe(self, max_error_rate: float) -> bool:
        """More broken-endpoint errors than the budget allows (strictly: a 5 % budget
        tolerates exactly 5 %)."""
        return self.rate is not None and self.rate > max_error_rate

    def reason(self, max_error_rate: float) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        return (
            f"error probe: {self.broken} of {self.judged} requests failed with endpoint errors "
            f"({kinds}), over slo.max_error_rate {max_error_rate:.0%}: the endpoint is "
            "broken, not slow"
        )


@dataclass(slots=True)
class SLOVerdict:
    passed: bool
    kind: Literal["percentile", "attainment"]
    failed: list[str] = field(default_factory=list)
    attainment: float | None = None  # fraction of requests meeting every limit
    quantiles_s: dict[str, float | None] = field(default_factory=dict)  # nearest-rank
    medians_s: dict[str, float | None] = field(default_factory=dict)  # judged_medians
    requests: int = 0
    errors: int = 0
    reason: str | None = None
    trend: Trend | None = None  # judge_probe only
    early_stopped: bool = False
    interrupted: bool = False
    error_probe: bool = False  # judge_probe only: over the error budget
    error_rate: float | None = None  # broken-endpoint errors ÷ judged requests
    saturated: bool = False  # the load generator could not keep its schedule


def judged_medians(reqs: Sequence[RequestLatency]) -> dict[str, float | None]:
    """Nearest-rank medians of TTFT and TPOT over the judged requests, a failed request read
    as +inf as the verdict reads it; None when the median lands on a failure (more than half of
    them failed: the median is beyond every finite value); empty for no requests. The drift
    checks' latency level (``metrics.drift``): a window whose requests mostly failed is slower
    than any the search measured, not one with nothing to compare."""
    out: dict[str, float | None] = {}
    for metric in ("ttft", "tpot"):
        v = nearest_rank([r.value(metric) for r in reqs], 0.5)
        if not math.isnan(v):
            out[metric] = v if math.isfinite(v) else None
    return out


def evaluate_slo(limits: Limits, reqs: Sequence[RequestLatency]) -> SLOVerdict:
    """Pass or fail over the probe's counted requests. No requests at all is a failure."""
    n = len(reqs)
    errors = sum(1 for r in reqs if not r.ok)
    if n == 0:
        return SLOVerdict(False, limits.kind, ["no_requests"], None, {}, {}, 0, 0, "no requests")
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
    medians = judged_medians(reqs)
    return SLOVerdict(not failed, limits.kind, failed, attain, quant, medians, n, errors, reason)


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
    """Did TTFT climb across the window? (An overloaded queue grows while it is observed.)"""

    rising: bool
    first_third_ttft_s: float | None  # medians by send time, for readers
    last_third_ttft_s: float | None
    slope: float | None  # Theil–Sen d(TTFT)/d(send time), s per s
    rise_s: float | None  # slope × span of send times
    rank_correlation: float | None  # Spearman, TTFT against send time
    reason: str | None = None


def detect_trend(reqs: Sequence[RequestLatency], ttft_limit_s: float | None) -> Trend:
    """Rising when slope × span ≥ TREND_SHIFT_OF_LIMIT × the TTFT limit (without a limit: ×
    the window's median TTFT) and the rank correlation ≥ TREND_MIN_RANK_CORRELATION.
    Fewer than TREND_MIN_REQUESTS successful requests: no verdict (not rising)."""
    pts = sorted((r.sent_s, r.ttft_s) for r in reqs if r.ok and r.ttft_s is not None)
    n = len(pts)
    if n < TREND_MIN_REQUESTS:
        return Trend(False, None, None, None, None, None)
    third = n // 3
    first = _median([y for _, y in pts[:third]])
    last = _median([y for _, y in pts[-third:]])
    if n > _TREND_MAX_POINTS:
        idx = np.linspace(0, n - 1, _TREND_MAX_POINTS).round().astype(int)
        pts = [pts[i] for i in idx]
    x = np.array([p[0] for p in pts], dtype=np.float64)
    y = np.array([p[1] for p in pts], dtype=np.float64)
    slope = _theil_sen(x, y)
    span = float(x[-1] - x[0])
    rise = slope * span
    rho = _spearman(x, y)
    scale = ttft_limit_s if ttft_limit_s is not None else float(np.median(y))
    rising = rise >= TREND_SHIFT_OF_LIMIT * scale and rho >= TREND_MIN_RANK_CORRELATION
    reason = (
        f"TTFT rose across the window by {rise * 1000:.0f} ms (median {first * 1000:.0f} → "
        f"{last * 1000:.0f} ms, first to last third; rank correlation {rho:.2f}): "
        "the queue is growing"
        if rising
        else None
    )
    return Trend(rising, first, last, slope, rise, rho, reason)


def _theil_sen(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> float:
    """Median of pairwise slopes (pairs with distinct x)."""
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx > 0
    if not keep.any():
        return 0.0
    return float(np.median((y[j] - y[i])[keep] / dx[keep]))


def _ranks(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Ranks with ties averaged."""
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v), dtype=np.float64)
    ranks[order] = np.arange(len(v), dtype=np.float64)
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return np.asarray(sums[inverse] / counts[inverse], dtype=np.float64)


def _spearman(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> float:
    rx, ry = _ranks(x), _ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    den = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / den) if den > 0 else 0.0


def _median(v: list[float]) -> float:
    s = sorted(v)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


def accuracy_shortfall(limits: Limits, counted: Sequence[RequestRecord]) -> str | None:
    """Why the graded answers miss ``limits.accuracy_min`` (their accuracy, a point estimate
    as the latency percentiles are), or None when they meet it or no floor is set. A window
    with no judged answer (a short one, the single stream's few requests) shows no accuracy
    below the floor; its result's ``accuracy`` says none was judged."""
    floor = limits.accuracy_min
    if floor is None:
        return None
    acc = probe_accuracy(counted)
    if acc is None or acc.accuracy is None or acc.accuracy >= floor:
        return None
    return f"accuracy {acc.accuracy:.1%} of {acc.graded} graded answers < {floor:.1%}"


def judge_probe(
    limits: Limits,
    counted: Sequence[RequestRecord],
    *,
    origin_ns: int = 0,
    early_stop_reason: str | None = None,
    stopped_early: bool = False,
    interrupted: bool = False,
    max_error_rate: float | None = None,
    saturated: bool = False,
    halted: str | None = None,
) -> SLOVerdict:
    """The probe's verdict: the SLO over its judged requests (cancelled ones excluded), a
    rising TTFT trend, an early stop and an interruption each fail it, with one reason line.
    Over ``max_error_rate`` broken-endpoint errors it is an error probe, and a ``saturated``
    load generator makes it a saturated probe: both fail it, and a search must not read
    either as an SLO failure (``error_probe``, ``saturated``). ``halted`` (one line: an
    endpoint that never answered, a sender that failed) makes it an error probe whatever the
    tally says: the probe measured nothing an SLO can judge."""
    tally = ErrorTally.of(counted)
    error_probe = max_error_rate is not None and tally.is_error_probe(max_error_rate)
    lats = latencies(counted, origin_ns)
    verdict = evaluate_slo(limits, lats)
    trend = detect_trend(lats, limits.ttft_s)
    failed = list(verdict.failed)
    reasons = [verdict.reason] if verdict.reason else []
    short = accuracy_shortfall(limits, counted)
    if short is not None:
        failed.append("accuracy")
        reasons.append(short)
    if trend.rising:
        failed.append("trend")
        reasons.append(trend.reason or "TTFT rose across the window")
    if stopped_early:
        failed.append("early_stop")
        reasons.append(early_stop_reason or "stopped early: clearly failing")
    if interrupted:
        failed.append("interrupted")
        reasons.append("interrupted before the window completed")
    if error_probe and max_error_rate is not None:
        failed.insert(0, "error_probe")
        reasons.insert(0, tally.reason(max_error_rate))
    if halted is not None:
        if not error_probe:
            failed.insert(0, "error_probe")
        error_probe = True
        reasons.insert(0, halted)
    if saturated:
        failed.insert(0, "saturated")
        reasons.insert(
            0, "load generator saturated: it fell behind its schedule, the load was not offered"
        )
    verdict.error_probe = error_probe
    verdict.error_rate = tally.rate
    verdict.saturated = saturated
    verdict.passed = not failed
    verdict.failed = failed
    verdict.reason = "; ".join(reasons) or None
    verdict.trend = trend
    verdict.early_stopped = stopped_early
    verdict.interrupted = interrupted
    return verdict


@dataclass(slots=True)
class EarlyStop:
    """``should_stop`` for a probe: True once the probe has clearly failed.

    Two conditions, both required: (1) the misses seen so far already exceed what the whole
    probe may have (the violation budget of the requests it is expected to count, so the final
    verdict is a fail whatever comes next, up to the count's own randomness), and (2) a passing
    server would show that many misses among the requests counted so far with probability below
    1 % (binomial, MLPerf LoadGen's early-stopping argument turned around). The denominator is
    every request counted so far, finished or not, which only makes the test more cautious.
    """

    limits: Limits
    expected_requests: int
    counted_so_far: int = 0
    reason: str | None = None

    def on_counted(self, counted: int) -> None:
        """The probe's count of requests scheduled in the window so far."""
        self.counted_so_far = counted

    def _checks(self, lats: Sequence[RequestLatency]) -> list[tuple[str, int, int]]:
        lim = self.limits
        if lim.kind == "attainment":
            budget = self.expected_requests - math.ceil(
                lim.attainment * self.expected_requests - 1e-9
            )
            return [("attainment", sum(1 for r in lats if not r.meets(lim)), budget)]
        budget = violation_budget(self.expected_requests, lim.percentile)
        return [
            (name, sum(1 for r in lats if r.value(name) > limit), budget)
            for name, limit in lim._pairs()
            if limit is not None
        ]

    def __call__(self, done: Sequence[RequestRecord]) -> bool:
        lats = latencies(done)
        n = max(self.counted_so_far, len(lats))
        for name, misses, budget in self._checks(lats):
            if misses > budget and clearly_failed(
                misses, n, self.limits.allowed_violation_fraction
            ):
                self.reason = (
                    f"stopped early: {misses} of {n} requests already miss {name} "
                    f"(a passing probe of ~{self.expected_requests} may miss {budget})"
                )
                return True
        return False
