"""Power against load, as a share of TDP: P/TDP = idle_share + slope × u.

u is the share of each step spent reading memory or computing prompts (1 − floor/τ from the
calibration), the load axis that carries to another accelerator: the simulator's own power
model has exactly this shape (idle power plus the rest of TDP in proportion to busy work),
and a real GPU's power rises with the same traffic. Fitted where two or more points measured power
with distinct loads; one point gives a flat share (slope 0) and says so; none gives no law.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tokenwatt.predict.points import StepPoint

__all__ = ["PowerLaw", "fit_power"]


@dataclass(frozen=True, slots=True)
class PowerLaw:
    """Per-GPU power as a share of TDP, linear in the read share u."""

    idle_share: float
    slope: float
    residuals: tuple[float, ...]  # measured ÷ fitted − 1

    def share(self, busy_share: float) -> float:
        """P/TDP at load u, held within [0, 1]: a prediction never exceeds the rating."""
        return min(1.0, max(0.0, self.idle_share + self.slope * busy_share))

    @property
    def rms_residual(self) -> float:
        n = len(self.residuals)
        dof = n - 2 if self.slope != 0.0 else n - 1
        if dof <= 0:
            return 0.0
        return math.sqrt(sum(r * r for r in self.residuals) / dof)


def fit_power(points: Sequence[StepPoint], busy_share: Callable[[float], float]) -> PowerLaw | None:
    """Least squares of P/TDP on u over the points that measured power; None without any."""
    rows = [
        (busy_share(p.rated_s), p.power_w_per_gpu / p.tdp_w_per_gpu)
        for p in points
        if p.power_w_per_gpu is not None and p.tdp_w_per_gpu
    ]
    if not rows:
        return None
    u = np.array([r[0] for r in rows])
    share = np.array([r[1] for r in rows])
    if len(rows) >= 2 and float(np.ptp(u)) > 1e-6:
        slope, idle = np.polyfit(u, share, 1)
    else:
        slope, idle = 0.0, float(np.mean(share))
    fitted = idle + slope * u
    residuals = tuple(float(r) for r in share / fitted - 1.0)
    return PowerLaw(float(idle), float(slope), residuals)
