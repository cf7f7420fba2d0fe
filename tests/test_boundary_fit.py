"""The boundary's profile-likelihood interval against a brute-force computation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import chi2

from tokenwatt.metrics.boundary import (
    BoundaryFit,
    Evidence,
    fit_boundary,
    fit_limit,
    profile_threshold,
    reported_boundary,
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


# --- ends between probes: the profile of a crossing at ρ, against SLSQP on a fine grid ---

LOGIT_ALPHA = math.log(ALPHA / (1 - ALPHA))
PROFILE_SETS = [
    POINTS,
    [(5.0, 215, 0), (10.0, 236, 0), (12.1, 290, 1), (13.3, 300, 2), (15.9, 56, 3)],
    [(8.0, 300, 2), (9.0, 200, 0), (10.0, 250, 4), (11.0, 120, 1), (12.0, 90, 30)],
]


def _neg_ll_logit(x: np.ndarray, pts: list[tuple[float, int, int]]) -> float:
    """−log-likelihood with each probe's miss fraction as log-odds x (log σ(x) = −softplus(−x))."""
    n = np.array([p[1] for p in pts], dtype=float)
    v = np.array([p[2] for p in pts], dtype=float)
    return float(np.sum(v * np.logaddexp(0.0, -x) + (n - v) * np.logaddexp(0.0, x)))


def brute_profile(pts: list[tuple[float, int, int]], j: int, f: float) -> float:
    """The best log-likelihood of a monotone curve whose log-odds, linear in log rate between
    probes j and j + 1, cross logit α at the fraction f of that gap: SLSQP over every probe's
    log-odds with the order constraints and the crossing written out, several feasible starts."""
    m = len(pts)
    cons = [{"type": "ineq", "fun": (lambda x, i=i: x[i + 1] - x[i])} for i in range(m - 1)]
    cons.append({"type": "eq", "fun": lambda x: (1 - f) * x[j] + f * x[j + 1] - LOGIT_ALPHA})
    best = math.inf
    for spread in (0.5, 3.0):
        x0 = np.array([LOGIT_ALPHA + spread * (i - j - f) for i in range(m)])
        res = minimize(_neg_ll_logit, x0, args=(pts,), bounds=[(-30.0, 40.0)] * m,
                       constraints=cons, method="SLSQP",
                       options={"ftol": 1e-12, "maxiter": 1000})  # fmt: skip
        best = min(best, float(res.fun))
    return -best


def _brute_losses(pts: list[tuple[float, int, int]]) -> list[tuple[float, float]]:
    """(rate, loss) on a grid of 12 steps per gap in log rate."""
    top = _best(pts, [(1e-9, 1 - 1e-9)] * len(pts))
    out = []
    for j in range(len(pts) - 1):
        r0, r1 = pts[j][0], pts[j + 1][0]
        for i in range(1, 12):
            f = i / 12
            out.append((r0 * (r1 / r0) ** f, top - brute_profile(pts, j, f)))
    return out


@pytest.mark.parametrize("pts", PROFILE_SETS)
def test_profile_ends_match_a_brute_force_grid(pts: list[tuple[float, int, int]]) -> None:
    """For D = 1, 2 and 4: every grid rate the brute force keeps lies inside [low, high], the
    grid rate next outside each end is rejected, and at an end the brute-force loss is the
    allowed drop (the end is where the profile crosses it, not a probed rate)."""
    grid = _brute_losses(pts)
    for d in (1.0, 2.0, 4.0):
        drop = profile_threshold(0.95) * d
        _, low, high = fit_limit(ALPHA, pts, design_effect=d, profile_ends=True)
        kept = [r for r, loss in grid if loss <= drop]
        assert kept, (d, grid)
        if low is not None:
            assert low <= min(kept) * (1 + 1e-9)
            outside = [r for r, loss in grid if r < low and loss > drop]
            assert all(r < min(kept) for r in outside)
            _check_end(pts, low, drop)
        if high is not None:
            assert max(kept) <= high * (1 + 1e-9)
            _check_end(pts, high, drop)


def _check_end(pts: list[tuple[float, int, int]], end: float, drop: float) -> None:
    """An end inside a gap sits where the brute-force loss equals the allowed drop."""
    rates = [p[0] for p in pts]
    if any(abs(end - r) < 1e-9 * r for r in rates):
        return
    j = max(i for i, r in enumerate(rates) if r < end)
    f = math.log(end / rates[j]) / math.log(rates[j + 1] / rates[j])
    top = _best(pts, [(1e-9, 1 - 1e-9)] * len(pts))
    assert top - brute_profile(pts, j, f) == pytest.approx(drop, abs=2e-3)


def test_profile_ends_move_continuously_with_the_design_effect() -> None:
    """Probed ends jump from probe to probe as D grows (coverage moved in steps); the
    profile's ends move a little for a little more D, and always within the probed ends."""
    pts = PROFILE_SETS[1]
    lows = []
    for d in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5):
        point, low, high = fit_limit(ALPHA, pts, design_effect=d, profile_ends=True)
        _, p_low, p_high = fit_limit(ALPHA, pts, design_effect=d)
        assert point is not None and low is not None and p_low is not None
        assert p_low <= low <= point
        assert high is None or (p_high is not None and point <= high <= p_high)
        lows.append(low)
    steps = [a - b for a, b in itertools.pairwise(lows)]
    assert all(s > 0 for s in steps) and max(steps) < 0.05 * lows[0], lows


def test_reported_interval_reads_the_low_end_through_d_and_the_high_end_as_drawn() -> None:
    ev = [Evidence(r, n, {"tpot_p99": v}) for r, n, v in PROFILE_SETS[1]]
    rep = reported_boundary(ev, ALPHA, design_effect=4.0)
    pts = PROFILE_SETS[1]
    point, low4, _ = fit_limit(ALPHA, pts, design_effect=4.0, profile_ends=True)
    _, _, high1 = fit_limit(ALPHA, pts, design_effect=1.0, profile_ends=True)
    assert (rep.rate_rps, rep.low_rps, rep.high_rps) == (point, low4, high1)


def test_relative_reach_is_the_farther_end_over_the_point() -> None:
    assert BoundaryFit(10.0, 9.6, 10.2, 0.95, "t").relative_reach == pytest.approx(0.04)
    assert BoundaryFit(10.0, 9.9, 10.5, 0.95, "t").relative_reach == pytest.approx(0.05)
    assert BoundaryFit(10.0, None, 10.2, 0.95, "t").relative_reach is None
