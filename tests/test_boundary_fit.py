"""The boundary's profile-likelihood interval against a brute-force computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import chi2

from tokenwatt.metrics.boundary import (
    Evidence,
    fit_boundary,
    fit_limit,
    miss_fraction_upper,
    profile_threshold,
)

ALPHA = 0.01
# (achieved rate, judged, misses): passes below ~13, a mixed probe near it, failures above
POINTS = [(8.0, 200, 0), (11.0, 250, 1), (12.6, 300, 3), (13.4, 240, 9), (15.0, 80, 20)]


def _neg_ll(p: np.ndarray, pts: list[tuple[float, int, int]]) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    pairs = zip(pts, p, strict=True)
    terms = [v * math.log(q) + (n - v) * math.log(1 - q) for (_, n, v), q in pairs]
    return -float(sum(terms))


def _best(pts: list[tuple[float, int, int]], bounds: list[tuple[float, float]]) -> float:
    """The monotone maximum likelihood under per-point bounds, by a general optimizer (SLSQP
    with the order constraints written out), from several feasible starts."""
    cons = [{"type": "ineq", "fun": (lambda p, i=i: p[i + 1] - p[i])} for i in range(len(pts) - 1)]
    best = math.inf
    for frac in (0.2, 0.5, 0.8):
        x0 = np.array([lo + frac * (hi - lo) for lo, hi in bounds])
        x0 = np.maximum.accumulate(x0)
        res = minimize(_neg_ll, x0, args=(pts,), bounds=bounds, constraints=cons, method="SLSQP",
                       options={"ftol": 1e-12, "maxiter": 500})  # fmt: skip
        best = min(best, float(res.fun))
    return -best


def brute_interval(pts: list[tuple[float, int, int]]) -> tuple[float | None, float | None]:
    """Every placement of r* between probes, kept when 2·ΔLL ≤ χ²₁(0.95)."""
    top = _best(pts, [(1e-9, 1 - 1e-9)] * len(pts))
    kept = []
    for k in range(len(pts) + 1):
        bounds = [(1e-9, ALPHA) if i < k else (ALPHA, 1 - 1e-9) for i in range(len(pts))]
        if 2 * (top - _best(pts, bounds)) <= chi2.ppf(0.95, 1) + 1e-6:
            kept.append(k)
    low = None if kept[0] == 0 else pts[kept[0] - 1][0]
    high = None if kept[-1] == len(pts) else pts[kept[-1]][0]
    return low, high


def test_threshold_is_half_the_chi_square_quantile() -> None:
    for c in (0.9, 0.95, 0.99):
        assert profile_threshold(c) == pytest.approx(chi2.ppf(c, 1) / 2, rel=1e-9)


@pytest.mark.parametrize(
    "pts",
    [
        POINTS,
        [(5.0, 215, 0), (10.0, 236, 0), (15.9, 56, 3), (20.9, 29, 29)],
        [(8.0, 300, 2), (9.0, 200, 0), (10.0, 250, 4), (11.0, 120, 1), (12.0, 90, 30)],
        [(4.0, 400, 0), (8.0, 400, 0)],
    ],
)
def test_interval_matches_brute_force(pts: list[tuple[float, int, int]]) -> None:
    point, low, high = fit_limit(ALPHA, pts)
    assert (low, high) == brute_interval(pts)
    assert point is not None
    if low is not None:
        assert low <= point
    if high is not None:
        assert point <= high


def test_far_failures_have_no_leverage() -> None:
    """A probe where every request missed says only p ≥ α there: adding one far above
    changes nothing (a logistic fit would let it drag the boundary up)."""
    near = [(5.0, 215, 0), (10.0, 236, 0), (15.9, 56, 3)]
    assert fit_limit(ALPHA, [*near, (40.0, 29, 29)]) == fit_limit(ALPHA, [*near, (20.9, 29, 29)])


def test_a_rate_measured_twice_is_combined() -> None:
    """Binomial likelihoods add: two probes at one rate are the same evidence as their sum."""
    split = [*POINTS[:2], (12.6, 100, 1), (12.6, 200, 2), *POINTS[3:]]
    assert fit_limit(ALPHA, split) == fit_limit(ALPHA, POINTS)


def test_no_miss_anywhere_leaves_the_interval_open_above() -> None:
    _, low, high = fit_limit(ALPHA, [(4.0, 400, 0), (8.0, 400, 0)])
    # 400 clean requests at 8 req/s: at r* ≤ 8 they would have probability ≤ 0.99^400 =
    # e^−4.0, beyond the 1.92 allowed, so the boundary is above 8 at 95 %, with no upper end
    assert (low, high) == (8.0, None)


def test_the_slo_boundary_is_the_lowest_limit() -> None:
    ev = [Evidence(r, n, {"ttft_p99": v, "tpot_p99": 0}) for r, n, v in POINTS]
    ev += [Evidence(20.0, 50, {"ttft_p99": 50, "tpot_p99": 50})]
    fit = fit_boundary(ev, ALPHA)
    ttft = fit_limit(ALPHA, [(e.rate_rps, e.judged, e.misses["ttft_p99"]) for e in ev])
    tpot = fit_limit(ALPHA, [(e.rate_rps, e.judged, e.misses["tpot_p99"]) for e in ev])
    assert fit.limit == "ttft_p99" and fit.rate_rps == ttft[0]
    assert ttft[0] is not None and tpot[0] is not None and ttft[0] < tpot[0]
    assert fit.low_rps == min(x for x in (ttft[1], tpot[1]) if x is not None)


def test_upper_miss_fraction_at_the_point_is_above_alpha_and_below_one() -> None:
    point, _, _ = fit_limit(ALPHA, POINTS)
    assert point is not None
    up = miss_fraction_upper(ALPHA, POINTS, point)
    assert ALPHA < up < 0.5
    # below the lowest probe, monotonicity bounds it by that probe's own upper bound: 0 of
    # 200 clean requests, 1 − 0.05^(1/200) = 1.49 %
    assert miss_fraction_upper(ALPHA, POINTS, 5.0) == pytest.approx(1 - 0.05 ** (1 / 200))
