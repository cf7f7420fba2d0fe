"""The Pareto rule, one definition for every view: a point is on the frontier when no other
point is at least as good on both axes and strictly better on one (higher is better on both)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["pareto_mask"]


def pareto_mask(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (x, y): True when it is on the frontier of ``points``."""

    def dominated(a: tuple[float, float]) -> bool:
        return any(b[0] >= a[0] and b[1] >= a[1] and (b[0] > a[0] or b[1] > a[1]) for b in points)

    return [not dominated(p) for p in points]
