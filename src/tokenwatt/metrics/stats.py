"""Summary statistics: the reported percentiles, one definition (interpolated).

Percentiles use linear interpolation between order statistics (numpy's default, the one vLLM
``bench serve`` reports), so figures are comparable with it. The SLO verdict is a count and
uses nearest rank instead (``metrics.slo.nearest_rank``); the two are named for what they
are. A value of +inf propagates: any quantile whose interpolation touches it is +inf.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tokenwatt.result import Latency

__all__ = ["interpolated_quantile", "summarize"]


def interpolated_quantile(
    values: Sequence[float], q: float, *, presorted: bool = False
) -> float | None:
    """The q-quantile (0 ≤ q ≤ 1) by linear interpolation; None for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    n = len(values)
    if n == 0:
        return None
    xs = values if presorted else sorted(values)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    a, b = float(xs[lo]), float(xs[hi])
    frac = pos - lo
    if frac == 0.0 or a == b:
        return a
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return a + (b - a) * frac


def summarize(values: Sequence[float]) -> Latency:
    """Count, mean, p50/p90/p95/p99 and max of ``values``."""
    n = len(values)
    if n == 0:
        return Latency(count=0)
    xs = sorted(float(v) for v in values)
    return Latency(
        count=n,
        mean=math.fsum(xs) / n,
        p50=interpolated_quantile(xs, 0.50, presorted=True),
        p90=interpolated_quantile(xs, 0.90, presorted=True),
        p95=interpolated_quantile(xs, 0.95, presorted=True),
        p99=interpolated_quantile(xs, 0.99, presorted=True),
        max=xs[-1],
    )
