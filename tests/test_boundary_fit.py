"""The boundary's profile-likelihood interval against a brute-force computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
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


def _ll(rstar: float, b: float, pts: list[tuple[float, int, int]]) -> float:
    total = 0.0
    for r, n, v in pts:
        eta = math.log(ALPHA / (1 - ALPHA)) + b * (math.log(r) - math.log(rstar))
        log_p = -np.logaddexp(0.0, -eta)
        log_q = -np.logaddexp(0.0, eta)
        total += v * log_p + (n - v) * log_q
    return float(total)


def _brute_profile(rstar: float, pts: list[tuple[float, int, int]]) -> float:
    """max over b ≥ 0 by a bounded scalar optimizer over ln b, and b = 0 itself."""
    res = minimize_scalar(
        lambda t: -_ll(rstar, math.exp(t), pts), bounds=(-6, 11), method="bounded",
        options={"xatol": 1e-6},
    )  # fmt: skip
    return max(-float(res.fun), _ll(rstar, 0.0, pts))


def test_threshold_is_half_the_chi_square_quantile() -> None:
    for c in (0.9, 0.95, 0.99):
        assert profile_threshold(c) == pytest.approx(chi2.ppf(c, 1) / 2, rel=1e-9)


def test_interval_matches_brute_force() -> None:
    point, low, high = fit_limit(ALPHA, POINTS)
    assert point is not None and low is not None and high is not None
    grid = np.exp(np.linspace(math.log(9.0), math.log(16.0), 1200))
    prof = np.array([_brute_profile(float(r), POINTS) for r in grid])
    inside = grid[prof >= prof.max() - chi2.ppf(0.95, 1) / 2]
    best = float(grid[int(np.argmax(prof))])
    assert low == pytest.approx(float(inside[0]), rel=0.01)
    assert high == pytest.approx(float(inside[-1]), rel=0.01)
    assert point == pytest.approx(best, rel=0.01)
    assert low < point < high


def test_a_rate_measured_twice_is_combined() -> None:
    """Binomial likelihoods add: two probes at one rate are the same evidence as their sum."""
    split = [*POINTS[:2], (12.6, 100, 1), (12.6, 200, 2), *POINTS[3:]]
    assert fit_limit(ALPHA, split) == fit_limit(ALPHA, POINTS)


def test_no_miss_anywhere_leaves_the_interval_open_above() -> None:
    point, low, high = fit_limit(ALPHA, [(4.0, 400, 0), (8.0, 400, 0)])
    # 400 clean requests at 8 req/s: at r* = 8 they would have probability 0.99^400 = e^−4.0,
    # beyond the 1.92 allowed, so the boundary is above 8 at 95 %, with no upper end
    assert high is None and low is not None and 8.0 < low < 8.2


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
    # far below the boundary the fit allows almost nothing
    assert miss_fraction_upper(ALPHA, POINTS, 5.0) < ALPHA
