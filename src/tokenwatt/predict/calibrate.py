"""The stack's constants, fitted to measured decode points, with their residuals.

The model is the simulator's roofline: a decode step of B sequences takes

    τ(B) = floor + x ÷ efficiency,
    x = bytes(B) ÷ (GPUs × rated bandwidth) + prompt FLOPs per step ÷ (GPUs × rated FLOP/s)

with bytes(B) = W(B) + KV(B): the simulator's step price (memory time + prompt compute +
overhead) with one efficiency for both rated figures. Two constants stand for the software
stack: ``efficiency`` (the share of the rated figures the kernels reach) and ``floor_s``
(launch, scheduling, all-reduce: time that scales with neither bytes nor FLOPs). One shared
efficiency is a choice forced by the data, not a finding: with the batch as the only thing
that varies, a dense model's x is linear in B, so separate memory and compute efficiencies
cannot both be fitted. The achieved MBU it implies, x/(floor + x/efficiency), rises with B
towards ``efficiency``: the batch dependence of MBU, with no third constant. The fit is linear least
squares on relative error (each point weighted 1/τ), so a 5 ms step and a 50 ms step count
alike; a negative floor is refused by refitting with the floor at zero.

How wrong the model is when it is carried away from what it was fitted on is measured on
the source itself, never on a target: the points are split at the median of x, the step law
is fitted on one half and each point of the other half is predicted from it (both ways).
``extrapolation_per_log_x`` is √(Σ e² ÷ Σ d²) over those held-out points, e the relative
error and d = |ln(x ÷ the nearest fitted x)| the distance moved: the out-of-sample error per
unit of log-distance in rated step time, which ``predict.transfer`` multiplies by the
distance a target moves each step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokenwatt.predict.points import PredictError, StepPoint
from tokenwatt.predict.power_law import PowerLaw, fit_power

__all__ = ["Calibration", "calibrate"]


@dataclass(frozen=True, slots=True)
class Calibration:
    """The fitted stack and how well it fits: relative residuals (measured τ ÷ fitted τ − 1)."""

    efficiency: float
    floor_s: float
    residuals: tuple[float, ...]
    power: PowerLaw | None
    notes: tuple[str, ...] = ()
    # measured τ ÷ τ predicted by a fit without that point − 1 (leave-one-out); () when
    # fewer than three points or two distinct batches remain
    loo_residuals: tuple[float, ...] = ()
    batch_range: tuple[float, float] | None = None  # the fitted points' smallest and largest B
    # held-out relative error per unit of |ln x| moved (split fits; 0 under four points)
    extrapolation_per_log_x: float = 0.0
    rated_range_s: tuple[float, float] | None = None  # the fitted points' smallest and largest x

    @property
    def rms_residual(self) -> float:
        """Relative standard error of one step time: RMS over n − (constants fitted) degrees
        of freedom; 0 when no degree of freedom is left (the interval then rests on the
        transfer error alone, and the notes say so)."""
        n = len(self.residuals)
        dof = n - (2 if self.floor_s > 0 else 1)
        if dof <= 0:
            return 0.0
        return math.sqrt(sum(r * r for r in self.residuals) / dof)

    @property
    def out_of_sample_rms(self) -> float:
        """σ_fit of the interval: the larger of the residual RMS and the leave-one-out RMS
        (a fitted point's residual understates the error on a point the fit never saw)."""
        loo = self.loo_residuals
        loo_rms = math.sqrt(sum(r * r for r in loo) / len(loo)) if loo else 0.0
        return max(self.rms_residual, loo_rms)

    @property
    def max_abs_residual(self) -> float:
        return max((abs(r) for r in self.residuals), default=0.0)

    def step_s(self, rated_s: float) -> float:
        """τ for a step whose bytes and prompt FLOPs take ``rated_s`` at the rated figures."""
        return self.floor_s + rated_s / self.efficiency

    def busy_share(self, rated_s: float) -> float:
        """u: the share of a step spent reading or computing (1 − floor/τ), the power law's
        load axis."""
        return (rated_s / self.efficiency) / self.step_s(rated_s)


def _fit_step(xs: np.ndarray, taus: np.ndarray, with_floor: bool) -> tuple[float, float]:
    """(floor_s, 1/efficiency) minimising Σ((floor + x/eff − τ)/τ)²."""
    w = 1.0 / taus
    if with_floor:
        a = np.column_stack([w, xs * w])
        coef, *_ = np.linalg.lstsq(a, np.ones_like(taus), rcond=None)
        return float(coef[0]), float(coef[1])
    inv = float(np.sum(xs * w) / np.sum((xs * w) ** 2))
    return 0.0, inv


def _loo(points: Sequence[StepPoint]) -> tuple[float, ...]:
    """Each point's τ against the fit of the others (the same rules: floor ≥ 0)."""
    if len(points) < 3:
        return ()
    out = []
    for k, held in enumerate(points):
        fit = _fit_rest([p for j, p in enumerate(points) if j != k])
        if fit is None:
            return ()
        floor, inv = fit
        out.append(held.step_s / (floor + held.rated_s * inv) - 1.0)
    return tuple(out)


def _fit_rest(rest: Sequence[StepPoint]) -> tuple[float, float] | None:
    """(floor_s, 1/efficiency) by the calibration's rules; None when nothing can be fitted."""
    xs = np.array([p.rated_s for p in rest])
    taus = np.array([p.step_s for p in rest])
    floor, inv = _fit_step(xs, taus, with_floor=len({round(p.batch, 3) for p in rest}) >= 2)
    if floor < 0:
        floor, inv = _fit_step(xs, taus, with_floor=False)
    return None if inv <= 0 else (floor, inv)


def _split_extrapolation(points: Sequence[StepPoint]) -> float:
    """√(Σ e² ÷ Σ d²) over each half's points predicted from a fit on the other half."""
    if len(points) < 4:
        return 0.0
    ordered = sorted(points, key=lambda p: p.rated_s)
    half = len(ordered) // 2
    low, high = ordered[:half], ordered[half:]
    sum_e2 = sum_d2 = 0.0
    for fitted, held in ((low, high), (high, low)):
        fit = _fit_rest(fitted)
        if fit is None:
            return 0.0
        floor, inv = fit
        xs = [p.rated_s for p in fitted]
        for p in held:
            d = min(abs(math.log(p.rated_s / x)) for x in xs)
            sum_e2 += (p.step_s / (floor + p.rated_s * inv) - 1.0) ** 2
            sum_d2 += d * d
    return math.sqrt(sum_e2 / sum_d2) if sum_d2 > 0 else 0.0


def calibrate(points: Sequence[StepPoint]) -> Calibration:
    """Fit efficiency and floor (floor only with two or more distinct batches)."""
    if not points:
        raise PredictError("no decode point to calibrate on; give a result with measured probes")
    xs = np.array([p.rated_s for p in points])
    taus = np.array([p.step_s for p in points])
    if not (np.all(np.isfinite(taus)) and np.all(taus > 0)):
        raise PredictError("a point's step time (ITL/TPOT) is missing or not positive")
    notes: list[str] = []
    distinct = len({round(p.batch, 3) for p in points}) >= 2
    floor, inv = _fit_step(xs, taus, with_floor=distinct)
    if not distinct:
        notes.append("one batch size only: the floor is taken as 0 and efficiency absorbs it")
    elif floor < 0:
        floor, inv = _fit_step(xs, taus, with_floor=False)
        notes.append("the fitted floor came out negative: refitted with the floor at 0")
    if inv <= 0:
        raise PredictError("the step times do not grow with the bytes read; nothing to fit")
    eff = 1.0 / inv
    if eff > 1.0:
        notes.append(
            f"fitted efficiency {eff:.2f} exceeds 1: the source reads fewer bytes than "
            "W(B) + KV assumes (routing skew, cached weights) or its bandwidth is understated"
        )
    fitted = floor + xs * inv
    residuals = tuple(float(r) for r in taus / fitted - 1.0)
    cal = Calibration(eff, floor, residuals, None, tuple(notes))
    if cal.rms_residual == 0.0:
        notes.append("no degree of freedom left: the interval rests on the transfer error only")
    power = fit_power(points, cal.busy_share)
    batches = [p.batch for p in points]
    return Calibration(
        eff, floor, residuals, power, tuple(notes), _loo(points), (min(batches), max(batches)),
        _split_extrapolation(points), (float(xs.min()), float(xs.max())),
    )  # fmt: skip
