"""Decode bandwidth utilization (MBU) from client timing and model geometry, as the seed defines it.

    s    = 1/τ                    decode steps per second per replica
    B    = T·τ / R                sequences decoded per step per replica
    W(B) = dense bytes + MoE layers × E[distinct experts | B] × bytes per expert
    KV/s = T × KV bytes read per generated token
    MBU  = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth per GPU)

Every input is returned beside the result so that a reader can redo the arithmetic, and the
places where the assumptions bend are raised as flags rather than silently corrected
(docs/methodology.md, "MBU").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.mixed_steps import MixedSteps, StepRegime, estimate_mixed_steps

__all__ = [
    "LOW_LOAD_BATCH",
    "MOE_UNTOUCHED_FRACTION",
    "SMALL_BATCH",
    "MBUFlags",
    "MBUInputs",
    "MBUResult",
    "StepRegime",
    "compute_mbu",
    "kv_read_per_output_token",
]

# Below this mean decode batch per replica a replica is likely idle part of the window:
# with independent (Poisson) arrivals the number of sequences in decode is roughly Poisson
# with mean B, so the idle fraction is about e^(−B) — 5% at B = 3.
LOW_LOAD_BATCH = 3.0
# MoE: flag the uniform-routing upper bound while more than this fraction of experts is
# expected to be untouched per step (skewed real routing then touches noticeably fewer).
MOE_UNTOUCHED_FRACTION = 0.05
# Validated range of the mixed-step estimate: at and above this decode batch per replica the
# headline lands within 2 points of the simulator's truth (docs/methodology.md, "Validation");
# below it the figure carries a note with the direction and size of the measured residual.
SMALL_BATCH = 8.0
# Measured regime worth a note: share of steps with prompt chunks, of idle time.
MIXED_STEP_NOTE_FRACTION = 0.05
IDLE_NOTE_FRACTION = 0.02
ROUTING_SKEW_NOTE_PT = 0.5  # measured routing moves MBU by more than this against uniform


def kv_read_per_output_token(
    geometry: ModelGeometry, requests: Iterable[tuple[int, int]]
) -> tuple[float, float]:
    """Mean context per generated token and KV bytes read per generated token.

    ``requests`` yields (prompt length L as the server cached it — its ``usage.prompt_tokens``
    — and output tokens n) for every counted request. Token i (0-based) reads L + i cached
    tokens, so a request contributes n·L + n(n−1)/2 context and the geometry's exact
    ``kv_bytes_read_sum(L, n)`` bytes (sliding windows, chunked attention and MLA included).
    Returns (0, 0) when no tokens were generated.
    """
    context = 0
    kv_bytes = 0
    tokens = 0
    for prompt_len, n in requests:
        if n <= 0:
            continue
        if prompt_len < 0:
            raise ValueError(f"prompt length must be >= 0, got {prompt_len}")
        context += n * prompt_len + n * (n - 1) // 2
        kv_bytes += geometry.kv_bytes_read_sum(prompt_len, n)
        tokens += n
    if tokens == 0:
        return 0.0, 0.0
    return context / tokens, kv_bytes / tokens


@dataclass(frozen=True, slots=True)
class MBUInputs:
    """Every quantity the MBU figure is built from, in the seed's symbols and in SI units."""

    output_tokens_per_s: float  # T, node
    itl_token_weighted_s: float  # τ
    replicas: int  # R
    gpus: int  # N_GPU
    bandwidth_bytes_per_s_per_gpu: float  # rated
    steps_per_s_per_replica: float | None  # s = 1/τ
    batch_per_replica: float | None  # B = T·τ/R
    experts: int  # E per MoE layer (0: dense)
    moe_layers: int
    expected_distinct_experts: float | None  # per MoE layer at B, uniform routing
    dense_weight_bytes: float
    expert_bytes: float
    weight_bytes_per_step: float | None  # W(B)
    weight_bytes_per_s: float | None  # R·s·W(B)
    mean_context_per_token: float
    kv_bytes_per_token: float  # geometry's bytes per cached token, all layers
    kv_bytes_per_output_token: float  # exact, from the geometry's per-group rule
    kv_bytes_per_s: float  # T × KV bytes per output token
    bytes_per_s: float | None  # numerator
    node_bandwidth_bytes_per_s: float  # denominator: N_GPU × rated bandwidth
    estimated_idle_fraction: float | None  # e^(−B), see LOW_LOAD_BATCH


@dataclass(frozen=True, slots=True)
class MBUFlags:
    """Where the figure's assumptions bend. True means "read the figure with this in mind"."""

    multi_token_chunks: bool  # several tokens per chunk: s = 1/τ overstates steps/s
    moe_uniform_routing_upper_bound: bool  # small batch: uniform routing overstates W(B)
    low_load_busy_bias: bool  # replicas idle part of the time: weight term is per busy time
    no_decode: bool  # T or τ not measured: MBU undefined
    # from the measured regime (StepRegime), each with a note that states direction and size
    mixed_steps: bool = False  # a visible share of steps also carry prompt chunks
    idle: bool = False  # replicas measurably idle: weight term scaled by the busy share
    over_slot_limit: bool = False  # B above max_num_seqs / slots: window not steady, no MBU
    small_batch: bool = False  # below SMALL_BATCH: outside the validated ±2 pt range
    routing_skew: bool = False  # measured expert load: uniform would read visibly differently
    details: tuple[str, ...] = ()  # the regime notes, with their numbers

    def notes(self) -> list[str]:
        out = list(self.details)
        if self.no_decode:
            out.append("no decode measured (T or τ missing): MBU undefined")
        if self.multi_token_chunks:
            out.append(
                "several tokens per chunk (speculative decoding or coalescing): one engine step "
                "is not one token per sequence, so s = 1/τ and MBU are overstated"
            )
        if self.moe_uniform_routing_upper_bound:
            out.append(
                "small MoE batch: uniform routing is an upper bound on distinct experts; "
                "skewed routing reads fewer, so MBU reads high"
            )
        if self.low_load_busy_bias:
            out.append(
                "low load: replicas idle part of the window; the weight term counts busy time, "
                "so MBU exceeds bytes ÷ (elapsed × bandwidth)"
            )
        return out


@dataclass(frozen=True, slots=True)
class MBUResult:
    """MBU, its split into weight and KV traffic, every input and the flags."""

    mbu: float | None
    mbu_weights: float | None
    mbu_kv: float | None
    inputs: MBUInputs
    flags: MBUFlags
    # With a measured regime: ``mbu`` counts every byte the decode steps read (prompt-routed
    # experts included); this is the seed's decode-only W(B)·s beside it (same busy scaling).
    mbu_decode_only: float | None = None
    mixed: MixedSteps | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mbu": self.mbu,
            "mbu_decode_only": self.mbu_decode_only,
            "mixed_steps": asdict(self.mixed) if self.mixed is not None else None,
            "mbu_weights": self.mbu_weights,
            "mbu_kv": self.mbu_kv,
            "inputs": asdict(self.inputs),
            "flags": {k: v for k, v in asdict(self.flags).items() if k != "details"},
            "notes": self.flags.notes(),
        }


def _positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def compute_mbu(
    geometry: ModelGeometry,
    *,
    output_tokens_per_s: float,
    itl_token_weighted_s: float,
    replicas: int,
    gpus: int,
    bandwidth_bytes_per_s: float,
    mean_context_per_token: float,
    kv_bytes_per_output_token: float,
    multi_token_chunks: bool = False,
    regime: StepRegime | None = None,
) -> MBUResult:
    """MBU = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth per GPU), with s = 1/τ, B = T·τ/R.

    ``bandwidth_bytes_per_s`` is the rated bandwidth of ONE GPU. ``kv_bytes_per_output_token``
    and ``mean_context_per_token`` come from :func:`kv_read_per_output_token` over the same
    counted requests as T and τ. When T or τ is not a positive number (nothing decoded, or
    every request produced one token) the MBU figures are None and ``flags.no_decode`` is set.
    With ``regime`` (the load the client measured and the engine's limits) the headline counts
    the bytes of mixed prefill/decode steps and idle time (:func:`apply_regime`).
    """
    if replicas < 1 or gpus < 1:
        raise ValueError(f"replicas and gpus must be >= 1, got R={replicas}, N_GPU={gpus}")
    if not _positive(bandwidth_bytes_per_s):
        raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s}")
    node_bw = gpus * bandwidth_bytes_per_s
    t = float(output_tokens_per_s)
    tau = float(itl_token_weighted_s)
    decoded = _positive(t) and _positive(tau)

    kv_per_s = t * kv_bytes_per_output_token if decoded else 0.0
    s = b = distinct = w = w_per_s = total = idle = None
    if decoded:
        s = 1.0 / tau
        b = t * tau / replicas
        distinct = geometry.expected_unique_experts(b) if geometry.is_moe else None
        w = geometry.weight_bytes_per_step(b)
        w_per_s = replicas * s * w
        total = w_per_s + kv_per_s
        idle = math.exp(-b)

    inputs = MBUInputs(
        output_tokens_per_s=t,
        itl_token_weighted_s=tau,
        replicas=replicas,
        gpus=gpus,
        bandwidth_bytes_per_s_per_gpu=float(bandwidth_bytes_per_s),
        steps_per_s_per_replica=s,
        batch_per_replica=b,
        experts=geometry.experts if geometry.is_moe else 0,
        moe_layers=geometry.moe_layers if geometry.is_moe else 0,
        expected_distinct_experts=distinct,
        dense_weight_bytes=float(geometry.dense_weight_bytes),
        expert_bytes=float(geometry.expert_bytes),
        weight_bytes_per_step=w,
        weight_bytes_per_s=w_per_s,
        mean_context_per_token=float(mean_context_per_token),
        kv_bytes_per_token=float(geometry.kv_bytes_per_token),
        kv_bytes_per_output_token=float(kv_bytes_per_output_token),
        kv_bytes_per_s=kv_per_s,
        bytes_per_s=total,
        node_bandwidth_bytes_per_s=node_bw,
        estimated_idle_fraction=idle,
    )
    untouched = (
        1.0 - distinct / geometry.experts if distinct is not None and geometry.experts else 0.0
    )
    flags = MBUFlags(
        multi_token_chunks=bool(multi_token_chunks),
        moe_uniform_routing_upper_bound=geometry.is_moe
        and decoded
        and untouched > MOE_UNTOUCHED_FRACTION,
        low_load_busy_bias=b is not None and b < LOW_LOAD_BATCH,
        no_decode=not decoded,
    )
    if w_per_s is None or total is None:
        return MBUResult(None, None, None, inputs, flags)
    result = MBUResult(
        mbu=total / node_bw,
        mbu_weights=w_per_s / node_bw,
        mbu_kv=kv_per_s / node_bw,
        inputs=inputs,
        flags=flags,
    )
    return result if regime is None else apply_regime(result, geometry, regime)


def apply_regime(result: MBUResult, geometry: ModelGeometry, regime: StepRegime) -> MBUResult:
    """Headline = all bytes the decode steps read per elapsed second (mixed steps, busy share,
    measured routing: ``metrics.mixed_steps``); the decode-only figure beside it; flags whose
    notes say which way the measured regime moves the figure and by how much."""
    i = result.inputs
    assert i.steps_per_s_per_replica is not None and i.batch_per_replica is not None
    mix = estimate_mixed_steps(
        geometry,
        batch_per_replica=i.batch_per_replica,
        steps_per_s=i.steps_per_s_per_replica,
        replicas=i.replicas,
        regime=regime,
        kv_bytes_per_output_token=i.kv_bytes_per_output_token,
    )
    node = i.node_bandwidth_bytes_per_s
    mbu = (mix.weight_bytes_per_s + i.kv_bytes_per_s) / node
    dec = (mix.decode_only_weight_bytes_per_s + i.kv_bytes_per_s) / node
    notes = _regime_notes(geometry, regime, mix, mbu, dec, node)
    skew = 0.0  # points uniform routing would add over the measured load
    if regime.expert_load is not None and geometry.is_moe:
        uniform = estimate_mixed_steps(
            geometry,
            batch_per_replica=i.batch_per_replica,
            steps_per_s=i.steps_per_s_per_replica,
            replicas=i.replicas,
            regime=replace(regime, expert_load=None),
            kv_bytes_per_output_token=i.kv_bytes_per_output_token,
        )
        skew = (uniform.weight_bytes_per_s - mix.weight_bytes_per_s) / node
        notes.append(
            f"routing from the measured expert load ({mix.routing}): uniform routing would "
            f"read {100 * abs(skew):.1f} pt {'higher' if skew >= 0 else 'lower'}"
        )
    flags = replace(
        result.flags,
        mixed_steps=mix.mixed_step_fraction > MIXED_STEP_NOTE_FRACTION and mbu - dec > 0.001,
        idle=1.0 - mix.busy_fraction > IDLE_NOTE_FRACTION,
        low_load_busy_bias=False,  # measured and corrected: see the idle flag
        moe_uniform_routing_upper_bound=result.flags.moe_uniform_routing_upper_bound
        and regime.expert_load is None,
        over_slot_limit=mix.over_slot_limit,
        small_batch=mix.batch_busy < SMALL_BATCH,
        routing_skew=abs(skew) > ROUTING_SKEW_NOTE_PT / 100,
        details=tuple(notes),
    )
    if mix.over_slot_limit:
        return replace(result, mbu=None, mbu_weights=None, mbu_kv=None, flags=flags, mixed=mix)
    return replace(
        result,
        mbu=mbu,
        mbu_weights=mix.weight_bytes_per_s / node,
        mbu_decode_only=dec,
        flags=flags,
        mixed=mix,
    )


def _regime_notes(  # noqa: PLR0917 - one private call site, every argument a figure
    geometry: ModelGeometry,
    regime: StepRegime,
    mix: MixedSteps,
    mbu: float,
    dec: float,
    node: float,
) -> list[str]:
    out = []
    if mix.over_slot_limit:
        out.append(
            f"decode batch T·τ/R = {mix.batch_counted:.2f} per replica is above the engine's "
            f"slot limit {regime.slot_limit}: the queue was growing, the window was not "
            "steady; no MBU"
        )
    if mix.mixed_step_fraction > MIXED_STEP_NOTE_FRACTION and mbu - dec > 0.001:
        ratio = mix.weight_bytes_mixed_step / mix.weight_bytes_decode_only
        out.append(
            f"{mix.mixed_step_fraction:.0%} of decode steps also carry prompt chunks "
            f"(~{mix.prompt_tokens_per_mixed_step:.0f} tokens) and read {ratio:.2f}× W(B): "
            f"MBU counts those bytes; the decode-only figure reads {100 * (mbu - dec):.1f} pt "
            "lower"
        )
    idle = 1.0 - mix.busy_fraction
    if idle > IDLE_NOTE_FRACTION:
        high = mix.weight_bytes_per_s / mix.busy_fraction * idle / node
        out.append(
            f"replicas idle {idle:.1%} of the window (measured from arrival and completion "
            f"times): the weight term is scaled by the busy share; unscaled it reads "
            f"{100 * high:.1f} pt high"
        )
    if geometry.is_moe and mix.distinct_experts_decode_only is not None:
        untouched = 1.0 - mix.distinct_experts_decode_only / geometry.experts
        if regime.expert_load is None and untouched > MOE_UNTOUCHED_FRACTION:
            out.append(
                f"routing taken as uniform with {untouched:.0%} of experts untouched per "
                "decode-only step: if the engine's routing is skewed MBU reads high; give a "
                "measured expert load (engine.expert_load_file)"
            )
    if mix.batch_busy < SMALL_BATCH:
        out.append(
            f"small batch (B = {mix.batch_busy:.1f} < {SMALL_BATCH:.0f}): outside the ±2 pt "
            "validated range; in validation MBU stayed within 1.5 pt of its truth here and the "
            "decode-only figure read up to 2 pt low (less with fewer experts)"
        )
    return out
