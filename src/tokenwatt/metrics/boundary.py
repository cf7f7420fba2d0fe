"""The SLO boundary as an interval: a monotone fit of each limit's miss fraction against rate.

Every probe is evidence about the same curve: at the rate the server saw (the achieved rate
r), v of its n judged requests missed a limit. A p99 limit holds at r while the true miss
fraction p(r) ≤ α = 1 − q, so the boundary is the rate r* where p(r*) = α. Each limit is fitted
with a logistic curve in log rate, constrained to rise with load:

    logit p(r) = logit α + b · (ln r − ln r*),   b ≥ 0

by binomial likelihood over all probes, and r* gets a **profile-likelihood interval**: every r*
whose best fit (over b) is within χ²₁(c)/2 of the best overall (Wilks; 1.92 at 95 %). A rate
probed twice simply contributes twice, so a re-measured rate is combined, never replaced.
With no miss anywhere the curve may lie beyond every probed rate: the interval has no upper
end (``high_rps`` None). The boundary of the SLO is the lowest of the limits' boundaries, and
its interval runs from the lowest low to the lowest high (the minimum of monotone curves).

The profile is evaluated on a fixed grid (``GRID_POINTS`` rates spanning a factor ``GRID_SPAN``
beyond the probed rates, ``B_POINTS`` slopes from 0 to 10⁴ per unit of ln r): no optimizer
that can stall, and the same answer on every machine. Where the profile is flat (the data
cannot tell rates apart, e.g. a clean pass and a clean failure with nothing between) the point
is the middle of the flat top in log rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

__all__ = [
    "BOUNDARY_CONFIDENCE",
    "BoundaryFit",
    "Evidence",
    "fit_boundary",
    "fit_limit",
    "miss_fraction_upper",
    "profile_threshold",
]

BOUNDARY_CONFIDENCE = 0.95
GRID_POINTS = 801
GRID_SPAN = 4.0  # the grid runs from min rate / 4 to max rate × 4
B_POINTS = 241
_FLAT = 1e-6  # log-likelihood ties


@dataclass(frozen=True, slots=True)
class Evidence:
    """One probe as the fit sees it: achieved rate, judged requests, misses per limit."""

    rate_rps: float
    judged: int
    misses: dict[str, int]


@dataclass(frozen=True, slots=True)
class BoundaryFit:
    """The boundary rate with its interval at ``confidence``; ``high_rps`` None: unbounded
    above (no limit's miss fraction was seen to reach α); ``low_rps`` None: below every
    probed rate by more than the grid spans."""

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


def _grid(rates: Sequence[float]) -> npt.NDArray[np.float64]:
    lo, hi = math.log(min(rates) / GRID_SPAN), math.log(max(rates) * GRID_SPAN)
    return np.linspace(lo, hi, GRID_POINTS)


def _slopes() -> npt.NDArray[np.float64]:
    return np.concatenate(([0.0], np.logspace(-1, 4, B_POINTS - 1)))


Array = npt.NDArray[np.float64]


def _loglik(alpha: float, x: Array, n: Array, v: Array, grid: Array) -> Array:
    """The binomial log-likelihood at every (ln r* in ``grid``, b in the slopes) pair."""
    b = _slopes()
    shift = x[None, None, :] - grid[:, None, None]
    eta = math.log(alpha / (1 - alpha)) + b[None, :, None] * shift
    # log p and log(1 − p) without overflow: −softplus(−η) and −softplus(η)
    log_p = -np.logaddexp(0.0, -eta)
    log_q = -np.logaddexp(0.0, eta)
    return np.asarray((v * log_p + (n - v) * log_q).sum(axis=2), dtype=np.float64)


def profile(alpha: float, x: Array, n: Array, v: Array, grid: Array) -> Array:
    """max over b of the binomial log-likelihood, for each ln r* in ``grid`` (x = ln r)."""
    return np.asarray(_loglik(alpha, x, n, v, grid).max(axis=1), dtype=np.float64)


def _arrays(points: Sequence[tuple[float, int, int]]) -> tuple[Array, Array, Array] | None:
    pts = [(r, n, v) for r, n, v in points if n > 0 and r > 0 and math.isfinite(r)]
    if not pts:
        return None
    x = np.log(np.array([p[0] for p in pts], dtype=np.float64))
    n = np.array([p[1] for p in pts], dtype=np.float64)
    v = np.array([p[2] for p in pts], dtype=np.float64)
    return x, n, v


def miss_fraction_upper(
    alpha: float,
    points: Sequence[tuple[float, int, int]],
    rate_rps: float,
    confidence: float = BOUNDARY_CONFIDENCE,
) -> float:
    """The highest miss fraction at ``rate_rps`` among the curves (r*, b) the data allow at
    ``confidence`` (log-likelihood within χ²₁/2 of the best): what a later probe there may
    show before it contradicts the fit. 1.0 without data."""
    arrays = _arrays(points)
    if arrays is None:
        return 1.0
    x, n, v = arrays
    grid = _grid([float(r) for r in np.exp(x)])
    ll = _loglik(alpha, x, n, v, grid)
    allowed = ll >= ll.max() - profile_threshold(confidence)
    eta = math.log(alpha / (1 - alpha)) + _slopes()[None, :] * (math.log(rate_rps) - grid[:, None])
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -700, 700)))
    return float(p[allowed].max())


def fit_limit(
    alpha: float,
    points: Sequence[tuple[float, int, int]],
    confidence: float = BOUNDARY_CONFIDENCE,
) -> tuple[float | None, float | None, float | None]:
    """(point, low, high) of r* for one limit from (rate, judged, misses) triples; an end at
    the grid's edge is None (unbounded that way)."""
    arrays = _arrays(points)
    if arrays is None:
        return None, None, None
    x, n, v = arrays
    grid = _grid([float(r) for r in np.exp(x)])
    ll = profile(alpha, x, n, v, grid)
    top = float(ll.max())
    inside = np.nonzero(ll >= top - profile_threshold(confidence))[0]
    best = np.nonzero(ll >= top - _FLAT)[0]
    point = float(np.exp(grid[int(best[len(best) // 2])]))
    low_i, high_i = int(inside[0]), int(inside[-1])
    low = None if low_i == 0 else float(np.exp(grid[low_i]))
    high = None if high_i == len(grid) - 1 else float(np.exp(grid[high_i]))
    return point, low, high


def fit_boundary(
    evidence: Sequence[Evidence],
    allowed: float,
    confidence: float = BOUNDARY_CONFIDENCE,
) -> BoundaryFit:
    """The SLO's boundary: the lowest limit boundary, interval [lowest low, lowest high]."""
    names = sorted({k for e in evidence for k in e.misses})
    fits = {}
    for k in names:
        pts = [(e.rate_rps, e.judged, e.misses.get(k, 0)) for e in evidence]
        f = fit_limit(allowed, pts, confidence)
        if f[0] is not None:
            fits[k] = f
    if not fits:
        return BoundaryFit(None, None, None, confidence, None)
    limit = min(fits, key=lambda k: fits[k][0] or math.inf)
    point = fits[limit][0]

    def lowest(vals: list[float | None]) -> float | None:
        # None low: unbounded below (lowest of all); None high: unbounded above (ignored)
        return None if any(v is None for v in vals) else min(v for v in vals if v is not None)

    low = lowest([f[1] for f in fits.values()])
    highs = [f[2] for f in fits.values() if f[2] is not None]
    high = min(highs) if highs else None
    return BoundaryFit(point, low, high, confidence, limit)
