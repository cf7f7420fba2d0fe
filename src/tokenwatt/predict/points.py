"""Decode operating points: what the calibration fits and the prediction replays.

One point is one measured steady state of one replica: B sequences decoded per step, the
step time τ (the token-weighted ITL), and the bytes that step must read (W(B) + the KV of
its B sequences). A result's probes carry every one of these in their MBU inputs, so a
point is read, never re-derived; a probe without a measured decode regime is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenwatt.errors import TokenwattError
from tokenwatt.result import BenchResult, ProbeSummary

__all__ = ["PredictError", "StepPoint", "points_from_result"]


class PredictError(TokenwattError):
    """A source or target the prediction cannot use (one line naming the figure)."""


@dataclass(frozen=True, slots=True)
class StepPoint:
    """One replica's decode steady state, in the units the roofline prices."""

    label: str
    batch: float  # B: sequences per decode step per replica
    step_s: float  # τ: seconds per decode step (token-weighted ITL)
    weight_bytes_per_step: float  # W(B)
    kv_bytes_per_step: float  # KV bytes the B sequences read per step
    gpus_per_replica: int
    replicas: int
    bandwidth_bytes_per_s_per_gpu: float  # rated
    concurrency: float | None = None  # requests in flight the source held (None: open loop)
    output_tokens_per_s: float | None = None  # node, measured
    power_w_per_gpu: float | None = None  # measured mean power over the window
    tdp_w_per_gpu: float | None = None  # the source accelerator's rated TDP

    @property
    def bytes_per_step(self) -> float:
        return self.weight_bytes_per_step + self.kv_bytes_per_step

    @property
    def rated_read_s(self) -> float:
        """Seconds the step's bytes take at the replica's rated bandwidth (efficiency 1)."""
        return self.bytes_per_step / (self.gpus_per_replica * self.bandwidth_bytes_per_s_per_gpu)

    @property
    def decode_share(self) -> float:
        """T·τ ÷ (R·B): the share of the ideal decode rate the node delivered (prefill steps,
        ramps); 1 where T was not measured."""
        if self.output_tokens_per_s is None:
            return 1.0
        return self.output_tokens_per_s * self.step_s / (self.replicas * self.batch)


def _probe_point(probe: ProbeSummary, tdp_w: float | None) -> StepPoint | None:
    detail = probe.mbu_detail
    if detail is None:
        return None
    i = detail.inputs
    if (
        i.batch_per_replica is None
        or i.weight_bytes_per_step is None
        or i.kv_bytes_per_s is None
        or i.steps_per_s_per_replica is None
        or i.batch_per_replica <= 0
    ):
        return None
    kv_per_step = i.kv_bytes_per_s / (i.replicas * i.steps_per_s_per_replica)
    energy = probe.energy
    power = None
    if energy is not None and energy.valid and not energy.is_modelled and energy.mean_power_w:
        power = energy.mean_power_w / i.gpus
    return StepPoint(
        label=f"probe {probe.index}",
        batch=i.batch_per_replica,
        step_s=i.itl_token_weighted_s,
        weight_bytes_per_step=i.weight_bytes_per_step,
        kv_bytes_per_step=kv_per_step,
        gpus_per_replica=max(1, i.gpus // i.replicas),
        replicas=i.replicas,
        bandwidth_bytes_per_s_per_gpu=i.bandwidth_bytes_per_s_per_gpu,
        output_tokens_per_s=i.output_tokens_per_s,
        power_w_per_gpu=power,
        tdp_w_per_gpu=tdp_w,
    )


def points_from_result(result: BenchResult) -> list[StepPoint]:
    """Every probe (and the single-stream point) with a measured decode regime."""
    if result.accelerator is None or result.geometry is None:
        why = result.mbu_unavailable or "no geometry or accelerator recorded"
        raise PredictError(f"the result has no MBU inputs ({why}); re-run with model.source set")
    probes = [p for p in (result.single_stream, *result.probes) if p is not None]
    tdp = result.accelerator.tdp_w
    points = [pt for p in probes if (pt := _probe_point(p, tdp)) is not None]
    if not points:
        raise PredictError(
            "the result has no probe with a measured decode regime (B, τ, W(B), KV/s); "
            "predict needs at least one"
        )
    return points
