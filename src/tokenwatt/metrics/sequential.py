"""The sequential p99 verdict: stop a probe as soon as its verdict is decided.

A p99 limit holds when at most a fraction α = 1 − q of requests exceed it. Each finished
request is one Bernoulli draw (over the limit or not), so the evidence of a probe about one
limit is a count: v requests over it among n judged. Wald's sequential probability ratio test
(SPRT) reads that count as it grows and stops as soon as it can tell

    H0: p = α / r  (the limit holds with room)   from   H1: p = α · r  (it fails clearly)

with error probabilities at most 1 − confidence each way (Wald's bounds A = ln((1−β)/a),
B = ln(β/(1−a)), a = β = 1 − confidence). The log-likelihood ratio after v misses in n is

    LLR = v · ln(p1/p0) + (n − v) · ln((1 − p1)/(1 − p0))

and the test decides **fail** at LLR ≥ A, **pass** at LLR ≤ B, else goes on. Rates between
α/r and α·r are the indifference zone: there the test may take long or end undecided, which is
exactly where the probe sits on the boundary, and the search's interval (``metrics.uncertainty``)
takes over. With the defaults (q = 0.99, r = 2, 95 %): a pass needs 194 requests without a miss
(287 with one), a failure 3 misses in the first 82 requests (4 in the first 175).

A probe is decided **fail** as soon as any limit is; **pass** once every limit is. Failed
requests count as misses of every limit (``RequestLatency.value``). The binomial model treats
requests as independent; requests that overlap in time share a queue, so the test is
optimistic about its own error rates: the coverage measured in virtual time is the check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tokenwatt.metrics.slo import Limits, RequestLatency, latencies
from tokenwatt.records import RequestRecord

__all__ = [
    "INDIFFERENCE_RATIO",
    "SEQUENTIAL_CONFIDENCE",
    "Decision",
    "SequentialStop",
    "Sprt",
    "decides_fail_with_in_flight",
    "miss_counts",
]

SEQUENTIAL_CONFIDENCE = 0.95  # each probe's verdict, when decided, is wrong at most 5 % each way
INDIFFERENCE_RATIO = 2.0  # H0: p = α/2, H1: p = 2α
Decision = Literal["pass", "fail"]


@dataclass(frozen=True, slots=True)
class Sprt:
    """Wald's SPRT on a miss count against an allowed miss fraction ``allowed`` (α)."""

    allowed: float
    confidence: float = SEQUENTIAL_CONFIDENCE
    ratio: float = INDIFFERENCE_RATIO

    def __post_init__(self) -> None:
        if not 0 < self.allowed * self.ratio < 1:
            raise ValueError(f"allowed × ratio must be in (0, 1), got {self.allowed * self.ratio}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence}")

    @property
    def p0(self) -> float:
        return self.allowed / self.ratio

    @property
    def p1(self) -> float:
        return self.allowed * self.ratio

    @property
    def bounds(self) -> tuple[float, float]:
        """(B, A): decide pass at LLR ≤ B, fail at LLR ≥ A."""
        err = 1.0 - self.confidence
        return math.log(err / (1.0 - err)), math.log((1.0 - err) / err)

    def llr(self, misses: int, n: int) -> float:
        """ln of P(data | H1) / P(data | H0) for ``misses`` of ``n``."""
        per_miss = math.log(self.p1 / self.p0)
        per_hit = math.log1p(-self.p1) - math.log1p(-self.p0)
        return misses * per_miss + (n - misses) * per_hit

    @property
    def clean_pass_n(self) -> int:
        """The fewest requests that decide a pass: all of them within the limit (194 with
        the defaults)."""
        return math.ceil(self.bounds[0] / self.llr(0, 1) - 1e-9)

    def decide(self, misses: int, n: int) -> Decision | None:
        lo, hi = self.bounds
        x = self.llr(misses, n)
        if x >= hi:
            return "fail"
        if x <= lo:
            return "pass"
        return None


def miss_counts(limits: Limits, lats: Sequence[RequestLatency]) -> dict[str, int]:
    """Requests over each limit (percentile form; attainment: requests missing any limit)."""
    if limits.kind == "attainment":
        return {"attainment": sum(1 for r in lats if not r.meets(limits))}
    names = dict(zip([m for m, v in limits._pairs() if v is not None], limits.names(), strict=True))
    return {
        names[m]: sum(1 for r in lats if r.value(m) > lim)
        for m, lim in limits._pairs()
        if lim is not None
    }


def decide_probe(test: Sprt, misses: dict[str, int], n: int) -> Decision | None:
    """Fail as soon as any limit fails; pass once every limit passes."""
    decisions = [test.decide(v, n) for v in misses.values()]
    if "fail" in decisions:
        return "fail"
    if decisions and all(d == "pass" for d in decisions):
        return "pass"
    return None


def decides_fail_with_in_flight(
    test: Sprt, misses: dict[str, int], n: int, in_flight_misses: dict[str, int]
) -> bool:
    """The fail side only, with requests still in flight that already miss a limit for
    certain (one waiting for its first token past the TTFT limit is a TTFT miss whatever
    comes next). Limit m reads v_m + k_m misses of n + k_m: each such request is one more
    judged draw and a miss, for that limit alone (its other limits are unknown and are not
    counted as hits). A pass is never read here: a request not yet finished may still miss,
    so a pass waits for settled requests (``SequentialStop.should_close``)."""
    return any(
        test.decide(v + in_flight_misses.get(m, 0), n + in_flight_misses.get(m, 0)) == "fail"
        for m, v in misses.items()
    )


@dataclass(slots=True)
class SequentialStop:
    """A probe's two hooks: ``should_stop`` (decided fail: stop now, as the early stop does)
    and ``should_close`` (decided pass: close the window; the counted requests drain and the
    verdict is taken over all of them). ``should_stop`` looks at every counted request
    finished so far (a miss seen is a fact); ``load.probe`` hands ``should_close`` only those
    sent before the oldest one still running, a prefix in send order: read in order of
    completion the fast requests come first, and near saturation a pass was decided on them
    while the misses were still in flight."""

    limits: Limits
    confidence: float = SEQUENTIAL_CONFIDENCE
    # a failure is not called on fewer judged requests than this (the drift checks: the first
    # few requests to finish in a failing window are the fast ones, not its median TPOT)
    min_fail_judged: int = 0
    decision: Decision | None = None
    judged: int = 0
    misses: dict[str, int] = field(default_factory=dict)
    reason: str | None = None
    # known misses among requests in flight that decided the failure (empty: finished alone)
    in_flight_misses: dict[str, int] = field(default_factory=dict)

    @property
    def test(self) -> Sprt:
        return Sprt(self.limits.allowed_violation_fraction, self.confidence)

    def _update(self, done: Sequence[RequestRecord]) -> Decision | None:
        lats = latencies(done)
        self.judged = len(lats)
        self.misses = miss_counts(self.limits, lats)
        self.decision = decide_probe(self.test, self.misses, self.judged)
        return self.decision

    def should_stop(self, done: Sequence[RequestRecord]) -> bool:
        if self._update(done) != "fail" or self.judged < self.min_fail_judged:
            return False
        worst = max(self.misses, key=lambda k: self.misses[k])
        self.reason = (
            f"stopped early: {self.misses[worst]} of {self.judged} requests miss {worst}, "
            f"a failure at {self.confidence:.0%} (sequential test)"
        )
        return True

    @property
    def late_first_token_limit(self) -> str | None:
        """The limit a request known to get its first token past the TTFT limit misses
        (``ttft_p99``; ``attainment``: it misses the request's attainment); None without a
        TTFT limit."""
        if self.limits.ttft_s is None:
            return None
        return "attainment" if self.limits.kind == "attainment" else self.limits.names()[0]

    def should_stop_late(self, done: Sequence[RequestRecord], late_first_tokens: int) -> bool:
        """``should_stop_with_in_flight`` with ``late_first_tokens`` counted requests in flight
        whose first token is known to come past the TTFT limit (``load.probe`` asks its
        sender, ``StreamClient.late_first_tokens``)."""
        key = self.late_first_token_limit
        known = {key: late_first_tokens} if key is not None and late_first_tokens else {}
        return self.should_stop_with_in_flight(done, known)

    def should_stop_with_in_flight(
        self, done: Sequence[RequestRecord], in_flight_misses: dict[str, int]
    ) -> bool:
        """``should_stop`` with known misses among requests still in flight (see
        ``decides_fail_with_in_flight``); the reason says how many of the misses are those,
        and ``in_flight_misses`` keeps them. Never for a probe with ``min_fail_judged`` (the
        drift checks): it is read by the median TPOT of a full window of judged requests,
        which a stop on requests in flight would cut short."""
        if self.should_stop(done):
            return True
        if self.min_fail_judged or not any(in_flight_misses.values()):
            return False
        if not decides_fail_with_in_flight(self.test, self.misses, self.judged, in_flight_misses):
            return False
        self.decision = "fail"
        self.in_flight_misses = {m: k for m, k in in_flight_misses.items() if k}
        total = {m: v + in_flight_misses.get(m, 0) for m, v in self.misses.items()}
        n = {m: self.judged + in_flight_misses.get(m, 0) for m in total}
        failing = [m for m in total if self.test.decide(total[m], n[m]) == "fail"]
        worst = max(failing, key=lambda m: total[m])
        k = in_flight_misses.get(worst, 0)
        self.reason = (
            f"stopped early: {total[worst]} of {self.judged + k} requests miss {worst} "
            f"({k} of them still in flight, already past the limit), a failure at "
            f"{self.confidence:.0%} (sequential test)"
        )
        return True

    def should_close(self, done: Sequence[RequestRecord]) -> bool:
        return self._update(done) == "pass"
