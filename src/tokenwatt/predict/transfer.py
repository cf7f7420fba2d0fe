"""Each measured point replayed on a target accelerator, with a 95 % interval.

The target keeps the point's batch (capped by ``max_batch`` if given), its bytes per step
(W(B) + KV, recomputed from the geometry when the cap changes B) and its prompt FLOPs per
step, and prices the step with the calibrated stack on the target's rated figures and GPU
count: τ' = floor + (bytes ÷ (GPUs' × bandwidth') + FLOPs ÷ (GPUs' × peak')) ÷ efficiency.
Throughput is the replicas' B ÷ τ' times the source's decode share (the prefill and ramp
share it measured at that point); tokens/J divides it by the target's GPUs × TDP' × the
power law's share at the target's busy share.

The interval: σ of ln(measured ÷ predicted), the prediction × exp(±1.96σ) (a step-time error
is a ratio: a step three times slower than predicted is as likely a miss as one three times
faster, and a linear band's low end would cross zero first), by a rule fixed from the fitting
data, the distance moved and held-out transfers, never from a scored point:

    σ² = (σ_fit × (1 + d_load))² + (k × (d_hw + d_x))² + e_hw² + e_load²

σ_fit is the calibration's out-of-sample error (the larger of its residual RMS and its
leave-one-out RMS); d_load = |ln(B ÷ the nearest end of the fitted batch range)| (0 inside
it): how far the point's batch lies outside what was fitted; k is the calibration's held-out
extrapolation error per unit of log-distance in rated step time
(``Calibration.extrapolation_per_log_x``: split fits on the source), d_hw = |ln(GPUs' ×
bandwidth' ÷ (GPUs × bandwidth))| per replica and d_x = |ln(x' ÷ the nearest end of the fitted
x range)| (0 inside it), x' the target step's rated time. e_hw and e_load are the **transfer
errors**: the RMS log error of the same kind of transfer, made by this code's own rules on
public files that no score reads (ML.ENERGY Qwen3-14B and Qwen3-32B, chat and GPQA;
``benchmarks/predict_heldout.py`` prints each figure and the points it rests on). e_hw applies
when the accelerator or the GPUs per replica change, per regime (long output or not, the one
split where the held-out transfers show other physics); e_load when the batch leaves the
fitted range. A same-accelerator prediction inside the fitted batches has neither.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.dtypes import canonical_dtype
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.predict.calibrate import Calibration
from tokenwatt.predict.points import PredictError, StepPoint

__all__ = [
    "Prediction",
    "Target",
    "assumptions",
    "check_weight_dtype",
    "interval_factors",
    "long_output",
    "power_transfer_sigma",
    "predict_points",
    "prediction_sigma",
    "transfer_error",
    "transfer_sigma",
]

Z_95 = 1.959963984540054
# Transfer errors, σ of ln(measured ÷ predicted TPOT), from the held-out transfers
# (benchmarks/predict_heldout.py). Wide where the evidence is: few points, and where the
# physics changes it is not known how much.
# another accelerator of the same vendor (H100 → B200: an HBM generation; 9 points with the
# same GPUs per replica, 9 with two H100s → one B200, whose error was no larger: pooled), by
# the point's regime: short outputs (18 points) and long outputs (8 points: GPQA, the B200
# steps 1.4–4× slower than the H100 fit predicts)
ACCELERATOR_TRANSFER = 0.11
ACCELERATOR_TRANSFER_LONG_OUTPUT = 0.97
# the same accelerator beyond the fitted batches (the score's rule, lower half of the caps →
# upper half, on the H100 and B200 rows: 26 points; chat and GPQA alike, pooled)
LOAD_TRANSFER = 0.20
# another vendor: no public pair was held out; stated, never below the same vendor's figure
# for the regime (scored after it was fixed: see OTHER_VENDOR_SCORED)
OTHER_VENDOR_TRANSFER = 0.20
# what the one public cross-vendor score measured (benchmarks/predict_score_inferencex.py
# --pair h200:mi300x etc.; docs/validation.md), said beside every prediction to another vendor:
# the constants above were not changed on it, so the direction is stated, not corrected
OTHER_VENDOR_SCORED = (
    "on the one public set scored (InferenceX DeepSeek-R1 FP8 on SGLang, H200 -> MI300X, "
    "MI325X, MI355X; 111 points) the predicted TPOT lay 37-40 % below the measured in "
    "median (the prediction read fast) and inside the 95 % interval at 89-95 % of points"
)
# the power law carried to another accelerator (σ of ln(measured ÷ predicted power per GPU);
# 26 held-out points, both regimes: the B200 drew more than the H100's shape says on chat,
# less on GPQA) and beyond the fitted batches on the same one (26 points); tokens/J adds them
POWER_ACCELERATOR_TRANSFER = 0.37
POWER_LOAD_TRANSFER = 0.13
# a point whose requests' mean output reaches this many tokens is a long-output (reasoning)
# workload: the held-out chat files' outputs average about 620 tokens, their GPQA files' about
# 7,000; this is their geometric mean rounded to a power of two
LONG_OUTPUT_TOKENS = 2048.0
# what the held-out long-output transfers showed (benchmarks/predict_heldout.py), said beside a
# long-output prediction to another accelerator: the direction there, and where it did not hold
LONG_OUTPUT_SEEN = (
    "on the held-out ML.ENERGY GPQA transfers (H100 -> B200, vLLM, 8 points) the target's steps "
    "ran 1.4-4 times slower than predicted (the prediction read fast); on InferenceX's fixed "
    "8,192-token outputs (SGLang, TensorRT-LLM) they did not (H200 -> B200 median error 8 %): "
    "the 95 % band is wide because a long-output step on other hardware is not known"
)


@dataclass(frozen=True, slots=True)
class Target:
    """Where the workload is to run: accelerator, GPUs per replica, replicas, batch cap."""

    accelerator: Accelerator
    gpus_per_replica: int | None = None  # None: the source's
    replicas: int | None = None  # None: the source's
    max_batch: int | None = None
    weight_dtype: str | None = None  # None: the source's; another dtype is refused


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Prediction:
    """One source point on the target: PREDICTED figures and their 95 % intervals."""

    label: str
    batch: float
    tpot_s: float
    tpot_interval_s: Interval
    output_tokens_per_s: float
    output_tokens_per_s_interval: Interval
    tokens_per_joule: float | None
    tokens_per_joule_interval: Interval | None
    power_w_per_gpu: float | None
    relative_sigma: float  # σ of ln(measured ÷ predicted) step time
    source_tpot_s: float
    transfer_sigma: float = 0.0  # the transfer errors inside relative_sigma (held-out)
    power_transfer_sigma: float = 0.0  # the power transfer errors tokens/J adds (held-out)


def long_output(point: StepPoint) -> bool:
    """Whether the point's workload is long-output (reasoning); unknown counts as long (the
    wider error: the regime is not known)."""
    return point.output_tokens is None or point.output_tokens >= LONG_OUTPUT_TOKENS


def transfer_error(
    source: Accelerator | None, target: Accelerator, *, long: bool = False,
    gpus_changed: bool = False,
) -> float:  # fmt: skip
    """e_hw: σ (log) of moving a calibrated stack from ``source`` to ``target`` for a
    workload of the regime ``long``; 0 on the same accelerator with the same GPUs per replica
    (a TP change alone has no held-out evidence of its own: it is given the accelerator's)."""
    same = ACCELERATOR_TRANSFER_LONG_OUTPUT if long else ACCELERATOR_TRANSFER
    if source is None:
        return max(OTHER_VENDOR_TRANSFER, same)
    if source.name == target.name and not gpus_changed:
        return 0.0
    if source.vendor == target.vendor:
        return same
    return max(OTHER_VENDOR_TRANSFER, same)


def _d_load(cal: Calibration, batch: float) -> float:
    """|ln(B ÷ the nearest end of the fitted batch range)|, 0 inside it."""
    if cal.batch_range is None or batch <= 0:
        return 0.0
    lo, hi = cal.batch_range
    return max(0.0, math.log(batch / hi), math.log(lo / batch))


def _moves(
    cal: Calibration, point: StepPoint, batch: float | None, gpus_per_replica: int | None
) -> tuple[bool, bool]:
    """(the GPUs per replica change, the batch leaves the fitted range): the two moves the
    held-out transfer errors are priced for, besides the accelerator."""
    gpus = gpus_per_replica or point.gpus_per_replica
    beyond = _d_load(cal, point.batch if batch is None else batch) > 0.0
    return gpus != point.gpus_per_replica, beyond


def transfer_sigma(
    cal: Calibration, point: StepPoint, target: Accelerator, *, source: Accelerator | None,
    batch: float | None = None, gpus_per_replica: int | None = None,
) -> float:  # fmt: skip
    """√(e_hw² + e_load²): the held-out transfer errors that apply to this move."""
    gpus_changed, beyond = _moves(cal, point, batch, gpus_per_replica)
    hw = transfer_error(source, target, long=long_output(point), gpus_changed=gpus_changed)
    return math.hypot(hw, LOAD_TRANSFER if beyond else 0.0)


def power_transfer_sigma(
    cal: Calibration, point: StepPoint, target: Accelerator, *, source: Accelerator | None,
    batch: float | None = None, gpus_per_replica: int | None = None,
) -> float:  # fmt: skip
    """The held-out power transfer errors that apply to this move (in quadrature): another
    accelerator or GPU count, and a batch beyond the fitted range."""
    gpus_changed, beyond = _moves(cal, point, batch, gpus_per_replica)
    moved = transfer_error(source, target, gpus_changed=gpus_changed) > 0.0
    return math.hypot(
        POWER_ACCELERATOR_TRANSFER if moved else 0.0, POWER_LOAD_TRANSFER if beyond else 0.0
    )


def prediction_sigma(
    cal: Calibration, point: StepPoint, target: Accelerator, *, source: Accelerator | None,
    batch: float | None = None, gpus_per_replica: int | None = None,
    rated_s: float | None = None,
) -> float:  # fmt: skip
    """σ of one predicted step time (the module's rule); ``rated_s`` is the target step's x
    (None: the source point's, scaled by the bandwidth moved)."""
    d_load = _d_load(cal, point.batch if batch is None else batch)
    gpus = gpus_per_replica or point.gpus_per_replica
    src_bw = point.gpus_per_replica * point.bandwidth_bytes_per_s_per_gpu
    d_hw = abs(math.log(gpus * target.bandwidth_bytes_per_s / src_bw))
    fit = cal.out_of_sample_rms * (1.0 + d_load)
    moved = transfer_sigma(
        cal, point, target, source=source, batch=batch, gpus_per_replica=gpus_per_replica
    )
    x = (
        point.rated_s * src_bw / (gpus * target.bandwidth_bytes_per_s)
        if rated_s is None
        else rated_s
    )
    d_x = 0.0
    if cal.rated_range_s is not None and x > 0:
        x_lo, x_hi = cal.rated_range_s
        d_x = max(0.0, math.log(x / x_hi), math.log(x_lo / x))
    carried = cal.extrapolation_per_log_x * (d_hw + d_x)
    return math.sqrt(fit**2 + moved**2 + carried**2)


def assumptions(
    points: Sequence[StepPoint], gpus_per_replica: int | None,
    source: Accelerator | None = None, target: Accelerator | None = None,
) -> list[str]:  # fmt: skip
    """What the prediction holds fixed that the target changes (said, not hidden)."""
    out = []
    src = points[0].gpus_per_replica if points else None
    if gpus_per_replica is not None and src is not None and gpus_per_replica != src:
        out.append(
            f"tensor parallel {src} -> {gpus_per_replica} GPUs per replica: the bytes are split "
            f"over {gpus_per_replica} GPUs; the all-reduce time stays the source's, inside the "
            "fitted floor (not modelled)"
        )
    if source is not None and target is not None and source.vendor != target.vendor:
        out.append(_other_vendor(source, target))
    moved = source is None or target is None or source.name != target.name
    if moved and any(long_output(p) for p in points):
        out.append(
            f"long outputs (a mean of {LONG_OUTPUT_TOKENS:,.0f} tokens or more, or not known) "
            f"on another accelerator: {LONG_OUTPUT_SEEN}"
        )
    return out


def _other_vendor(source: Accelerator, target: Accelerator) -> str:
    """The vendor change said with the direction the one public score measured, or that the
    direction was not scored: another vendor brings other kernels, whose efficiency and
    per-step cost the source's fit does not hold."""
    head = (
        f"another vendor ({source.vendor} -> {target.vendor}): the fitted efficiency and floor "
        "are the source's kernels, not the target's; "
    )
    if (source.vendor, target.vendor) == ("nvidia", "amd"):
        return head + OTHER_VENDOR_SCORED
    return head + "no public pair in this direction was scored"


def check_weight_dtype(wanted: str | None, geometry: ModelGeometry | None) -> None:
    """Refuse a change of weight dtype: the fitted efficiency and floor belong to the
    source's kernels (an FP8 GEMM is another kernel with another efficiency, and its
    dequantisation another per-step cost), so halving the bytes would predict a speed-up
    no measurement stands behind. The same dtype, named in any spelling, passes."""
    if wanted is None:
        return
    if geometry is None:
        raise PredictError(
            "--to-weight-dtype needs the source model's geometry; the source records none"
        )
    try:
        want = canonical_dtype(wanted, what="--to-weight-dtype")
    except GeometryError as exc:
        raise PredictError(str(exc)) from None
    have = canonical_dtype(geometry.weight_dtype)
    if want != have:
        raise PredictError(
            f"--to-weight-dtype {want}: the source ran {have} weights and a change of weight "
            f"dtype is not modelled; calibrate on a run with {want} weights"
        )


def interval_factors(sigma: float) -> tuple[float, float]:
    """(low, high) multipliers of a 95 % interval of log-σ ``sigma``: exp(∓1.96σ)."""
    return math.exp(-Z_95 * sigma), math.exp(Z_95 * sigma)


def _interval(value: float, sigma: float) -> Interval:
    low, high = interval_factors(sigma)
    return Interval(value * low, value * high)


def _rated_s_at(
    point: StepPoint, batch: float, geometry: ModelGeometry | None, acc: Accelerator, gpus: int
) -> float:
    """x on the target: bytes at its bandwidth plus prompt FLOPs at its peak (both scale with
    the batch as the source's did: same context and prompt share per sequence)."""
    nbytes = point.bytes_per_step
    if batch != point.batch:
        if geometry is None:
            raise PredictError("a batch cap below the source's batch needs the model's geometry")
        kv = point.kv_bytes_per_step * batch / point.batch
        nbytes = geometry.weight_bytes_per_step(batch) + kv
    flops = point.prefill_flops_per_step * batch / point.batch
    rated = nbytes / (gpus * acc.bandwidth_bytes_per_s)
    if flops > 0:
        dtype = geometry.weight_dtype if geometry is not None else "bf16"
        peak = acc.peak_flops(dtype)
        if not peak:
            raise PredictError(f"{acc.name} has no rated FLOP/s in the catalog; prompts need it")
        rated += flops / (gpus * peak)
    return rated


def _one(
    cal: Calibration, point: StepPoint, target: Target, geometry: ModelGeometry | None,
    source: Accelerator | None,
) -> Prediction:  # fmt: skip
    acc = target.accelerator
    gpus = target.gpus_per_replica or point.gpus_per_replica
    replicas = target.replicas or point.replicas
    batch = min(point.batch, target.max_batch) if target.max_batch else point.batch
    rated_s = _rated_s_at(point, batch, geometry, acc, gpus)
    sigma = prediction_sigma(
        cal, point, acc, source=source, batch=batch, gpus_per_replica=gpus, rated_s=rated_s
    )
    tau = cal.step_s(rated_s)
    tput = replicas * batch / tau * point.decode_share
    tpj = power = None
    tpj_iv = None
    power_moved = power_transfer_sigma(
        cal, point, acc, source=source, batch=batch, gpus_per_replica=gpus
    )
    if cal.power is not None and acc.tdp_w:
        power = acc.tdp_w * cal.power.share(cal.busy_share(rated_s))
        if power > 0:
            tpj = tput / (replicas * gpus * power)
            tpj_sigma = math.sqrt(sigma**2 + cal.power.rms_residual**2 + power_moved**2)
            tpj_iv = _interval(tpj, tpj_sigma)
    return Prediction(
        label=point.label,
        batch=batch,
        tpot_s=tau,
        tpot_interval_s=_interval(tau, sigma),
        output_tokens_per_s=tput,
        output_tokens_per_s_interval=_interval(tput, sigma),
        tokens_per_joule=tpj,
        tokens_per_joule_interval=tpj_iv,
        power_w_per_gpu=power,
        relative_sigma=sigma,
        source_tpot_s=point.step_s,
        transfer_sigma=transfer_sigma(
            cal, point, acc, source=source, batch=batch, gpus_per_replica=gpus
        ),
        power_transfer_sigma=power_moved,
    )


def predict_points(
    cal: Calibration,
    points: Sequence[StepPoint],
    target: Target,
    *,
    source: Accelerator | None,
    geometry: ModelGeometry | None = None,
) -> list[Prediction]:
    """One prediction per source point, in the source's order."""
    if target.max_batch is not None and target.max_batch < 1:
        raise PredictError(f"--max-batch {target.max_batch}: give a batch cap of at least 1")
    check_weight_dtype(target.weight_dtype, geometry)
    return [_one(cal, p, target, geometry, source) for p in points]
