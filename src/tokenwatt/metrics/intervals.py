"""Intervals on a probe's figures: batch means over time blocks of the window.

A probe's figures (T, τ, goodput, MBU, tokens per joule, the p99s) are estimates of what the
server does at that load in the long run; one window of Poisson arrivals is one draw. The
window is cut into k equal blocks by send time (``load.intervals`` computes each figure over
each block exactly as over the whole window); the spread of the k block values is the
spread of the window's own figure times √k, so the interval is

    point ± t_{k/f−1}(c) · sd(block values) · √(f/k · (k − 1)/(k − f))

centred on the whole-window figure (batch means; Law & Kelton; the block figures of a ratio
are slightly biased, the window's is not). f ≥ 1 widens it for blocks that move together (a
request lives about as long as a block; the batch drifts over several): Geyer's initial
positive sequence over the block series' autocorrelations, each corrected for the sample
mean, and (k − 1)/(k − f) corrects the blocks' variance the same way (a short series read
about its own mean looks steadier than it is). Coverage is measured, not assumed
(docs/methodology.md, *Intervals on every figure*).

A p99 is no mean: its interval is Woodruff's, the quantiles of the sample at q ± t·se, where se
is the batch-means standard error of the share of requests at or below the point (floored at
the binomial q(1 − q)/n, its independent-requests value). With too few requests above the
quantile the upper end lies beyond the sample: ``None``, open.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from tokenwatt.metrics.boundary import BOUNDARY_CONFIDENCE

__all__ = [
    "FIGURE_CONFIDENCE",
    "MAX_BLOCKS",
    "MIN_BLOCKS",
    "REQUESTS_PER_BLOCK",
    "Span",
    "autocorrelation_factor",
    "batch_means",
    "block_count",
    "quantile_interval",
    "t_quantile",
    "window_for_half_width_s",
]

# One confidence for every interval the result states, the boundary's included.
FIGURE_CONFIDENCE = BOUNDARY_CONFIDENCE
# Blocks per window: enough for a usable t and a series long enough for the autocorrelation
# factor (20: 10 gave τ 84-88 % coverage, docs/methodology.md), each with enough requests for
# its figures to be defined; fewer than MIN_BLOCKS and no interval is stated.
MAX_BLOCKS = 20
MIN_BLOCKS = 4
REQUESTS_PER_BLOCK = 20


@dataclass(frozen=True, slots=True)
class Span:
    """An interval at a stated confidence; ``None`` at an end: open (the data do not bound it)."""

    low: float | None
    high: float | None


def block_count(counted_requests: int) -> int:
    """k blocks for a window of ``counted_requests``: up to ``MAX_BLOCKS`` with at least
    ``REQUESTS_PER_BLOCK`` each; 0 when fewer than ``MIN_BLOCKS`` would have them."""
    k = min(MAX_BLOCKS, counted_requests // REQUESTS_PER_BLOCK)
    return k if k >= MIN_BLOCKS else 0


def _t_density(x: float, dof: int) -> float:
    c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return math.exp(c - (dof + 1) / 2 * math.log1p(x * x / dof))


def _t_cdf_above_half(x: float, dof: int, steps: int = 400) -> float:
    """P(0 ≤ T ≤ x) for x ≥ 0 by Simpson's rule (the density is smooth; error < 1e-9 here)."""
    h = x / steps
    s = _t_density(0.0, dof) + _t_density(x, dof)
    for i in range(1, steps):
        s += (4 if i % 2 else 2) * _t_density(i * h, dof)
    return s * h / 3


@lru_cache(maxsize=256)
def t_quantile(p: float, dof: int) -> float:
    """The p-quantile (p ≥ 0.5) of Student's t with ``dof`` degrees of freedom, by bisection
    on its CDF (no SciPy at run time; the tests hold it to SciPy's)."""
    if not 0.5 <= p < 1.0 or dof < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and dof >= 1, got p={p}, dof={dof}")
    lo, hi = 0.0, 1.0
    while 0.5 + _t_cdf_above_half(hi, dof, steps=2000) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 + _t_cdf_above_half(mid, dof, steps=2000) < p else (lo, mid)
    return (lo + hi) / 2


def _sd(xs: Sequence[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _initial_positive_lags(rho: Sequence[float]) -> int:
    """How many lags Geyer's initial positive sequence keeps: pairs (ρ₁ + ρ₂, ρ₃ + ρ₄, …)
    while a pair's sum stays positive (the noisy tail left out)."""
    m = 0
    while m + 1 < len(rho) and rho[m] + rho[m + 1] > 0:
        m += 2
    return m


def autocorrelation_factor(blocks: Sequence[float]) -> float:
    """f = 1 + 2 Σ ρ_j over the block series: how much blocks that move together widen the
    variance of their mean (Geyer 1992, the MCMC standard error), corrected for the mean.

    Around its own mean a short series' autocovariances all read low by the mean's variance,
    γ₀·f/k (γ₀ by as much), so ρ_j = r_j·(1 − f/k) + f/k with r_j the sample's: over 10
    blocks the plain sum often found no correlation where the batch drifted (τ covered 84 %,
    docs/methodology.md). Over the m lags of Geyer's initial positive sequence of the r_j
    (S their sum, f₀ = 1 + 2S the plain factor), f = 1 + 2 Σ ρ_j(f) is solved exactly:
    f = (1 + 2S)/(1 − 2(m − S)/k). The correction only widens, and by at most to k/4 (four
    blocks' worth of independent evidence; choosing the lags again on the corrected values
    runs away, as every corrected lag turns positive at large f); never above k/2."""
    k = len(blocks)
    mean = sum(blocks) / k
    d = [b - mean for b in blocks]
    c0 = sum(x * x for x in d) / k
    if c0 <= 0:
        return 1.0
    r = [sum(d[i] * d[i + j] for i in range(k - j)) / k / c0 for j in range(1, k)]
    m = _initial_positive_lags(r)
    total = sum(r[:m])
    plain = max(1.0, 1 + 2 * total)
    denominator = 1 - 2 * (m - total) / k
    corrected = (1 + 2 * total) / denominator if denominator > 0 else math.inf
    return min(k / 2, max(plain, corrected), max(plain, k / 4))


def batch_means(
    point: float | None, blocks: Sequence[float | None], confidence: float = FIGURE_CONFIDENCE
) -> Span | None:
    """point ± t · sd(blocks) · √(f/k · (k − 1)/(k − f)) over the finite block values, f the
    blocks' ``autocorrelation_factor`` and t Student's with k/f − 1 degrees of freedom (k/f
    blocks' worth of independent evidence, at least 1); None with no point or fewer than
    ``MIN_BLOCKS`` of them. (k − 1)/(k − f): the blocks' sample variance is low by the same
    mean's variance, E[s²] = σ²·(k − f)/(k − 1)."""
    vals = [float(b) for b in blocks if b is not None and math.isfinite(b)]
    if point is None or not math.isfinite(point) or len(vals) < MIN_BLOCKS:
        return None
    k = len(vals)
    f = autocorrelation_factor(vals)
    dof = max(1, round(k / f) - 1)  # k/f effectively independent blocks
    half = t_quantile(0.5 + confidence / 2, dof) * _sd(vals) * math.sqrt(f / k * (k - 1) / (k - f))
    return Span(point - half, point + half)


def _order_stat(xs: Sequence[float], u: float) -> float | None:
    """F_n⁻¹(u) = x₍⌈n·u⌉₎ of the sorted ``xs``; None outside the sample (u ≤ 0 or ⌈n·u⌉ > n)."""
    rank = math.ceil(len(xs) * u - 1e-12)
    if u <= 0 or rank < 1 or rank > len(xs):
        return None
    return xs[rank - 1]


def quantile_interval(
    values: Sequence[float],
    block_of: Sequence[int],
    q: float,
    point: float | None,
    confidence: float = FIGURE_CONFIDENCE,
) -> Span | None:
    """Woodruff's interval for the q-quantile whose estimate is ``point``: the sample's
    quantiles at q ± t·se, se the batch-means standard error (over the blocks ``block_of``
    gives each value) of the share at or below ``point``, at least √(q(1 − q)/n)."""
    n = len(values)
    k = len(set(block_of))
    if point is None or n == 0 or k < MIN_BLOCKS:
        return None
    below: dict[int, list[int]] = {}
    for v, b in zip(values, block_of, strict=True):
        acc = below.setdefault(b, [0, 0])
        acc[0] += v <= point
        acc[1] += 1
    share = sum(a for a, _ in below.values()) / n
    # the ratio estimator's batch-means variance: blocks may hold unequal counts
    var = k / (k - 1) * sum((a - share * m) ** 2 for a, m in below.values()) / (n * n)
    se = max(math.sqrt(var), math.sqrt(q * (1 - q) / n))
    t = t_quantile(0.5 + confidence / 2, k - 1)
    xs = sorted(values)
    return Span(_order_stat(xs, q - t * se), _order_stat(xs, q + t * se))


def window_for_half_width_s(window_s: float, half_width: float, target: float) -> float:
    """The window whose interval would be ``target`` wide on each side: half widths shrink as
    1/√window (the blocks' spread is the window's own)."""
    return window_s * (half_width / target) ** 2
