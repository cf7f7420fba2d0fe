"""Decode operating points: what the calibration fits and the prediction replays.

One point is one measured steady state of one replica: B sequences decoded per step, the
step time τ (the token-weighted ITL), the bytes that step must read (W(B) + the KV of its
B sequences) and the prompt FLOPs it carries (prompt tokens per step × 2 × active
parameters: under continuous batching every admitted prompt is prefilled inside decode
steps; decode tokens' own FLOPs hide under the memory read, as the simulator prices them).
A result's probes carry every one of these in their MBU inputs, so a
point is read, never re-derived; a probe without a measured decode regime is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenwatt.errors import TokenwattError
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.result import BenchResult, ProbeSummary

__all__ = ["PredictError", "StepPoint", "points_from_probes", "points_from_result"]


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
    prefill_flops_per_step: float = 0.0  # 2 × active params × prompt tokens per step
    peak_flops_per_gpu: float | None = None  # rated dense FLOP/s for the prefill dtype
    concurrency: float | None = None  # requests in flight the source held (None: open loop)
    output_tokens_per_s: float | None = None  # node, measured
    power_w_per_gpu: float | None = None  # measured mean power over the window
    tdp_w_per_gpu: float | None = None  # the source accelerator's rated TDP
    # the measured workload, replayed on the target (``predict.replay``); None: not known
    prompt_tokens: float | None = None  # mean prompt tokens per request
    output_tokens: float | None = None  # mean output tokens per request
    rate_rps: float | None = None  # offered request rate (closed loops: the counted rate)

    @property
    def bytes_per_step(self) -> float:
        return self.weight_bytes_per_step + self.kv_bytes_per_step

    @property
    def rated_read_s(self) -> float:
        """Seconds the step's bytes take at the replica's rated bandwidth (efficiency 1)."""
        return self.bytes_per_step / (self.gpus_per_replica * self.bandwidth_bytes_per_s_per_gpu)

    @property
    def rated_compute_s(self) -> float:
        """Seconds the step's prompt FLOPs take at the replica's rated peak (efficiency 1)."""
        if self.prefill_flops_per_step == 0.0:
            return 0.0
        if not self.peak_flops_per_gpu:
            raise PredictError(f"{self.label}: prompt FLOPs per step but no rated FLOP/s")
        return self.prefill_flops_per_step / (self.gpus_per_replica * self.peak_flops_per_gpu)

    @property
    def rated_s(self) -> float:
        """x: the step's rated read time plus its rated prompt compute time."""
        return self.rated_read_s + self.rated_compute_s

    @property
    def decode_share(self) -> float:
        """T·τ ÷ (R·B): the share of the ideal decode rate the node delivered (prefill steps,
        ramps); 1 where T was not measured."""
        if self.output_tokens_per_s is None:
            return 1.0
        return self.output_tokens_per_s * self.step_s / (self.replicas * self.batch)


def _probe_point(probe: ProbeSummary, geom: ModelGeometry, acc: Accelerator) -> StepPoint | None:
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
    mixed = i.mixed_steps
    prompt_tokens = 0.0 if mixed is None else mixed.prompts_per_step * mixed.uncached_prompt_tokens
    return StepPoint(
        label=f"probe {probe.index}",
        batch=i.batch_per_replica,
        step_s=i.itl_token_weighted_s,
        weight_bytes_per_step=i.weight_bytes_per_step,
        kv_bytes_per_step=kv_per_step,
        prefill_flops_per_step=2.0 * geom.active_params * prompt_tokens,
        peak_flops_per_gpu=acc.peak_flops(geom.weight_dtype),
        gpus_per_replica=max(1, i.gpus // i.replicas),
        replicas=i.replicas,
        bandwidth_bytes_per_s_per_gpu=i.bandwidth_bytes_per_s_per_gpu,
        output_tokens_per_s=i.output_tokens_per_s,
        power_w_per_gpu=power,
        tdp_w_per_gpu=acc.tdp_w,
        prompt_tokens=None if probe.run is None else probe.run.prompt_tokens_mean,
        output_tokens=None if probe.run is None else probe.run.output_tokens_mean,
        rate_rps=probe.rate_rps or probe.counted_rate_rps or None,
    )


def points_from_probes(
    probes: Sequence[ProbeSummary], geometry: ModelGeometry, accelerator: Accelerator
) -> list[StepPoint]:
    """The probes with a measured decode regime, as points (the others are skipped)."""
    return [pt for p in probes if (pt := _probe_point(p, geometry, accelerator)) is not None]


def points_from_result(result: BenchResult) -> list[StepPoint]:
    """Every probe (and the single-stream point) with a measured decode regime."""
    if result.accelerator is None or result.geometry is None:
        why = result.mbu_unavailable or "no geometry or accelerator recorded"
        raise PredictError(f"the result has no MBU inputs ({why}); re-run with model.source set")
    probes = [p for p in (result.single_stream, *result.probes) if p is not None]
    points = points_from_probes(probes, result.geometry, result.accelerator)
    if not points:
        raise PredictError(
            "the result has no probe with a measured decode regime (B, τ, W(B), KV/s); "
            "predict needs at least one"
        )
    return points
