"""The SLO boundary as an interval: a monotone fit of each limit's miss fraction against rate.

Every probe is evidence about one curve: at the rate the server saw (its achieved rate r), v
of its n judged requests missed a limit. A p99 limit holds at r while the true miss fraction
p(r) ≤ α = 1 − q, so the boundary is the rate r* where p crosses α. The only shape assumed is
that p does not fall as load rises (**monotone**, no curve family): the fit is the isotonic
maximum-likelihood estimate (pool-adjacent-violators over the probes in rate order, binomial
weights), and the interval is a **likelihood-ratio interval**: r* = ρ is kept when the best
monotone fit with p ≤ α below ρ and p ≥ α from ρ up (the isotonic fit clipped at α on each
side, which is that constrained optimum) loses at most χ²₁(c)/2 of log-likelihood against the
unconstrained one (Wilks; 1.92 at 95 %). χ²₁ is conservative here (the monotone problem's own
limit law is narrower, Banerjee & Wellner 2001), which leaves room for what the binomial model
misses: requests that overlap share one queue, so their misses are not independent.

Consequences a reader can check by hand: the statistic changes only when ρ crosses a probed
rate, so the interval's ends are probed rates (or open: ``None``); a clean pass of n requests
excludes the boundary below its rate once 2·n·(−ln(1 − α)) > χ²₁, i.e. n ≥ 192 at p99 and
95 % (the sequential test passes at 194); a probe far above the boundary where every request
missed says only "p ≥ α there" and has no leverage on where the curve crosses α; two probes at
one rate are one probe with their counts added (the likelihood is a sum), so a re-measured
rate is combined, never replaced. The point is where the isotonic fit crosses α, its log-odds
interpolated linearly in log rate between the probes on either side. The SLO's boundary is
the lowest limit's; its
interval runs from the lowest low to the lowest high (the minimum of monotone curves).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from tokenwatt.metrics.slo import binomial_sf

__all__ = [
    "BOUNDARY_CONFIDENCE",
    "REPORTED_DESIGN_EFFECT",
    "BoundaryFit",
    "Evidence",
    "binomial_upper",
    "fit_boundary",
    "fit_limit",
    "isotonic",
    "log_likelihood",
    "miss_fraction_upper",
    "profile_threshold",
]

BOUNDARY_CONFIDENCE = 0.95
# The reported interval reads n requests as n/D independent ones. Misses come in bursts (the
# batch drifts high for a while; one-minute windows catch a burst or not): over 200 seeded
# virtual-time searches per case D = 1 held the long-run boundary in 28 % (dense), 27 % (MoE),
# 18 % (prefill-heavy); D = 4 in 99 %, 97 % and 94 % (prefill-heavy not used to choose D;
# docs/methodology.md, "Coverage of the boundary's interval"). The search stops at D = 1.
REPORTED_DESIGN_EFFECT = 4.0
Point = tuple[float, int, int]  # (rate, judged, misses)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One probe as the fit sees it: achieved rate, judged requests, misses per limit."""

    rate_rps: float
    judged: int
    misses: dict[str, int]


@dataclass(frozen=True, slots=True)
class BoundaryFit:
    """The boundary rate with its interval at ``confidence``; ``high_rps`` None: open above
    (no probe showed the limit failing clearly); ``low_rps`` None: open below."""

    rate_rps: float | None
    low_rps: float | None
    high_rps: float | None
    confidence: float
    limit: str | None  # the limit whose boundary is lowest

    @property
    def relative_half_width(self) -> float | None:
        """Half the interval's width over its point: the search stops below its precision."""
        if self.rate_rps is None or self.low_rps is None or self.high_rps is None:
            return None
        return (self.high_rps - self.low_rps) / (2.0 * self.rate_rps)


def profile_threshold(confidence: float) -> float:
    """χ²₁(confidence)/2: the drop in log-likelihood that bounds the interval."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    return z * z / 2.0


def _pooled(points: Sequence[Point]) -> list[Point]:
    """Probes sorted by rate, those at one rate merged (their counts added)."""
    by_rate: dict[float, list[int]] = {}
    for r, n, v in points:
        if n > 0 and r > 0 and math.isfinite(r):
            acc = by_rate.setdefault(r, [0, 0])
            acc[0] += n
            acc[1] += v
    return [(r, n, v) for r, (n, v) in sorted(by_rate.items())]


def isotonic(points: Sequence[Point]) -> list[float]:
    """Pool-adjacent-violators: the non-decreasing p that maximizes the binomial likelihood
    of ``points`` (in the given order), one value per point."""
    blocks: list[list[float]] = []  # [misses, judged, count of points]
    for _, n, v in points:
        blocks.append([float(v), float(n), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            v2, n2, c2 = blocks.pop()
            blocks[-1][0] += v2
            blocks[-1][1] += n2
            blocks[-1][2] += c2
    out: list[float] = []
    for bv, bn, bc in blocks:
        out += [bv / bn] * int(bc)
    return out


def log_likelihood(points: Sequence[Point], p: Sequence[float]) -> float:
    total = 0.0
    for (_, n, v), q in zip(points, p, strict=True):
        if v > 0:
            total += v * math.log(q) if q > 0 else -math.inf
        if n - v > 0:
            total += (n - v) * math.log1p(-q) if q < 1 else -math.inf
    return total


def _constrained(points: Sequence[Point], p_hat: Sequence[float], cut: int, alpha: float) -> float:
    """Log-likelihood of the best monotone fit with p ≤ α on points[:cut], ≥ α after."""
    clipped = [min(q, alpha) if i < cut else max(q, alpha) for i, q in enumerate(p_hat)]
    return log_likelihood(points, clipped)


def _logit(v: float, n: float) -> float:
    """Log-odds of v/n with half a count of continuity (finite at 0 and n misses)."""
    q = min(max(v / n, 0.5 / n), 1.0 - 0.5 / n)
    return math.log(q / (1.0 - q))


def _crossing(points: Sequence[Point], p_hat: Sequence[float], alpha: float) -> float:
    """Where the isotonic fit crosses α: log-odds against log rate, linear between the probes
    on either side (half a count of continuity, so a clean pass and an all-miss failure still
    place it between them)."""
    above = next((i for i, q in enumerate(p_hat) if q > alpha), None)
    if above is None:
        return points[-1][0]
    if above == 0:
        return points[0][0]
    (r0, n0, _), (r1, n1, _) = points[above - 1], points[above]
    y0, y1 = _logit(p_hat[above - 1] * n0, n0), _logit(p_hat[above] * n1, n1)
    target = math.log(alpha / (1.0 - alpha))
    f = min(1.0, max(0.0, (target - y0) / (y1 - y0))) if y1 > y0 else 0.5
    return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0)))


def fit_limit(
    alpha: float,
    points: Sequence[Point],
    confidence: float = BOUNDARY_CONFIDENCE,
    design_effect: float = 1.0,
) -> tuple[float | None, float | None, float | None]:
    """(point, low, high) of r* for one limit from (rate, judged, misses) triples; an open
    end is None. ``design_effect`` D reads every count as n/D independent requests (the
    log-likelihood scales by 1/D, so the allowed drop grows by D)."""
    pts = _pooled(points)
    if not pts:
        return None, None, None
    p_hat = isotonic(pts)
    best = log_likelihood(pts, p_hat)
    drop = profile_threshold(confidence) * design_effect
    # cut k: r* lies between pts[k-1] and pts[k] (k = 0: below all; k = len: above all)
    kept = [
        k for k in range(len(pts) + 1) if best - _constrained(pts, p_hat, k, alpha) <= drop + 1e-12
    ]
    low = None if kept[0] == 0 else pts[kept[0] - 1][0]
    high = None if kept[-1] == len(pts) else pts[kept[-1]][0]
    return _crossing(pts, p_hat, alpha), low, high


def fit_boundary(
    evidence: Sequence[Evidence],
    allowed: float,
    confidence: float = BOUNDARY_CONFIDENCE,
    design_effect: float = 1.0,
) -> BoundaryFit:
    """The SLO's boundary: the lowest limit boundary, interval [lowest low, lowest high]."""
    names = sorted({k for e in evidence for k in e.misses})
    fits = {}
    for k in names:
        pts = [(e.rate_rps, e.judged, e.misses.get(k, 0)) for e in evidence]
        f = fit_limit(allowed, pts, confidence, design_effect)
        if f[0] is not None:
            fits[k] = f
    if not fits:
        return BoundaryFit(None, None, None, confidence, None)
    limit = min(fits, key=lambda k: fits[k][0] or math.inf)
    lows = [f[1] for f in fits.values()]
    low = None if any(v is None for v in lows) else min(v for v in lows if v is not None)
    highs = [f[2] for f in fits.values() if f[2] is not None]
    return BoundaryFit(fits[limit][0], low, min(highs) if highs else None, confidence, limit)


def miss_fraction_upper(
    alpha: float,
    points: Sequence[Point],
    rate_rps: float,
    confidence: float = BOUNDARY_CONFIDENCE,
) -> float:
    """The highest miss fraction at ``rate_rps`` that the monotone fit allows at
    ``confidence``: the Clopper–Pearson-style upper bound of the pooled isotonic block that
    holds the nearest probe at or above ``rate_rps`` (1.0 when none is above: monotonicity
    then bounds nothing). What a later probe there may show before it contradicts the fit."""
    pts = _pooled(points)
    above = [i for i, (r, _, _) in enumerate(pts) if r >= rate_rps]
    if not above:
        return 1.0
    p_hat = isotonic(pts)
    i = above[0]
    block = [j for j in range(len(pts)) if p_hat[j] == p_hat[i] and j >= i]
    n = sum(pts[j][1] for j in block)
    v = sum(pts[j][2] for j in block)
    return binomial_upper(v, n, confidence)


def binomial_upper(misses: int, n: int, confidence: float) -> float:
    """Clopper–Pearson one-sided upper bound u: P(X ≤ misses | n, u) = 1 − confidence."""
    if n <= 0 or misses >= n:
        return 1.0
    lo, hi = misses / n, 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if 1.0 - binomial_sf(misses + 1, n, mid) > 1.0 - confidence:
            lo = mid
        else:
            hi = mid
    return hi
