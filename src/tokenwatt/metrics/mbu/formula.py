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

import dataclasses
import math
from collections.abc import Iterable

from tokenwatt.batch_steps import batch_and_steps
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.mbu.mixed_steps import StepRegime, estimate_mixed_steps
from tokenwatt.metrics.mbu.routing_band import (
    ROUTING_SKEW_NOTE_PT,
    routing_band,
    routing_skew_note,
    with_band,
)
from tokenwatt.metrics.mbu.spec_mbu import StepBasis, geometry_fields, speculative_mbu, step_flags
from tokenwatt.result import Mbu, MbuFlags, MbuInputs, MbuMixedSteps
from tokenwatt.spec.hardware import gpu_sharing_note

__all__ = [
    "LOW_LOAD_BATCH",
    "MOE_UNTOUCHED_FRACTION",
    "RATED_BANDWIDTH_LIMIT",
    "SMALL_BATCH",
    "StepRegime",
    "apply_regime",
    "check_rated_bandwidth",
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
# The one threshold of rated bandwidth: no figure above it is printed. An engine cannot draw
# bytes faster than its HBM's rating, and the estimator's error is two-sided (±2 pt), so a
# reading above 100 % cannot be told from a wrong input by any margin, while real engines peak
# well below it: above it the figure is either explained by routing (``check_rated_bandwidth``:
# an MoE band whose lower end is below it) or refused, never printed as "100.9 %".
RATED_BANDWIDTH_LIMIT = 1.0


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
    steps: StepBasis | None = None,
    routing_detail: bool = True,
) -> Mbu:
    """MBU = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth per GPU), with s = 1/τ, B = T·τ/R.

    ``bandwidth_bytes_per_s`` is the rated bandwidth of ONE GPU. ``kv_bytes_per_output_token``
    and ``mean_context_per_token`` come from :func:`kv_read_per_output_token` over the same
    counted requests as T and τ. When T or τ is not a positive number (nothing decoded, or
    every request produced one token) the MBU figures are None and ``flags.no_decode`` is set.
    With ``regime`` (the load the client measured and the engine's limits) the headline counts
    the bytes of mixed prefill/decode steps and idle time (:func:`apply_regime`). With
    ``steps`` (speculative decoding) s and B come from the client's steps and W counts k + 1
    routed positions per sequence through the same bytes per step and expert load, plus the
    drafter's bytes (``metrics.mbu.spec_mbu``: routing band and flags included, no busy share).
    ``routing_detail=False`` (an interval block: its figures only) leaves out the routing band
    and the measured load's comparison with uniform routing."""
    if replicas < 1 or gpus < 1:
        raise ValueError(f"replicas and gpus must be >= 1, got R={replicas}, N_GPU={gpus}")
    if not _positive(bandwidth_bytes_per_s):
        raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s}")
    if steps is not None:  # speculative decoding: steps, not tokens (metrics.mbu.spec_mbu)
        spec = _speculative(
            geometry, steps, regime, routing_detail,
            output_tokens_per_s=output_tokens_per_s, itl_token_weighted_s=itl_token_weighted_s,
            replicas=replicas, gpus=gpus, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
            mean_context_per_token=mean_context_per_token,
            kv_bytes_per_output_token=kv_bytes_per_output_token,
        )  # fmt: skip
        if spec is not None:
            return spec
    node_bw = gpus * bandwidth_bytes_per_s
    t = float(output_tokens_per_s)
    tau = float(itl_token_weighted_s)
    decoded = _positive(t) and _positive(tau)
    kv_per_s = t * kv_bytes_per_output_token if decoded else 0.0
    s, b, distinct, w, w_per_s, total, idle = _seed_terms(geometry, t, tau, replicas, kv_per_s)

    inputs = MbuInputs(
        output_tokens_per_s=t,
        itl_token_weighted_s=tau,
        replicas=replicas,
        gpus=gpus,
        bandwidth_bytes_per_s_per_gpu=float(bandwidth_bytes_per_s),
        steps_per_s_per_replica=s,
        batch_per_replica=b,
        expected_distinct_experts=distinct,
        weight_bytes_per_step=w,
        weight_bytes_per_s=w_per_s,
        mean_context_per_token=float(mean_context_per_token),
        kv_bytes_per_output_token=float(kv_bytes_per_output_token),
        kv_bytes_per_s=kv_per_s,
        bytes_per_s=total,
        headline_bytes_per_s=total,
        node_bandwidth_bytes_per_s=node_bw,
        estimated_idle_fraction=idle,
        **geometry_fields(geometry),
    )
    flags = _flags(geometry, decoded, distinct, b, multi_token_chunks)
    if w_per_s is None or total is None:
        return _sharing(Mbu(mbu=None, mbu_weights=None, mbu_kv=None, inputs=inputs,
                            flags=flags, notes=flags.notes()), gpus, replicas)  # fmt: skip
    result = Mbu(mbu=total / node_bw, mbu_weights=w_per_s / node_bw, mbu_kv=kv_per_s / node_bw,
                 inputs=inputs, flags=flags, notes=flags.notes())  # fmt: skip
    if regime is not None:
        result = apply_regime(result, geometry, regime, routing_detail=routing_detail)
    return _sharing(check_rated_bandwidth(result), gpus, replicas)


def _speculative(
    geometry: ModelGeometry,
    steps: StepBasis,
    regime: StepRegime | None,
    routing_detail: bool,
    *,
    output_tokens_per_s: float,
    itl_token_weighted_s: float,
    replicas: int,
    gpus: int,
    bandwidth_bytes_per_s: float,
    mean_context_per_token: float,
    kv_bytes_per_output_token: float,
) -> Mbu | None:
    """MBU from the client's steps under speculative decoding (``metrics.mbu.spec_mbu``), held to
    the rated bandwidth and the node's sharing like the plain path; None where the steps give
    no figure (the plain path then answers)."""
    spec = speculative_mbu(
        geometry, steps=steps.steps, drafter=steps.drafter,
        output_tokens_per_s=output_tokens_per_s, itl_token_weighted_s=itl_token_weighted_s,
        replicas=replicas, gpus=gpus, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        mean_context_per_token=mean_context_per_token,
        kv_bytes_per_output_token=kv_bytes_per_output_token,
        draft_kv_bytes_per_output_token=steps.draft_kv_bytes_per_output_token,
        regime=steps.regime or regime, routing_detail=routing_detail,
    )  # fmt: skip
    if spec is None:
        return None
    flagged = _geometry_flags(spec, geometry, steps.regime or regime)
    return _sharing(check_rated_bandwidth(flagged), gpus, replicas)


def _sharing(m: Mbu, gpus: int, replicas: int) -> Mbu:
    """Replicas sharing GPUs (MPS, fractional GPUs) are stated in every MBU's notes."""
    note = gpu_sharing_note(gpus, replicas)
    return m if note is None else m.model_copy(update={"notes": [*m.notes, note]})


_Terms = tuple[
    float | None, float | None, float | None, float | None, float | None, float | None,
    float | None,
]  # fmt: skip


def _seed_terms(
    geometry: ModelGeometry, t: float, tau: float, replicas: int, kv_per_s: float
) -> _Terms:
    """The seed's s = 1/τ, B = T·τ/R, E[distinct experts], W(B), R·s·W(B), the numerator and
    the idle estimate e^(−B); all None when nothing was decoded."""
    if not (_positive(t) and _positive(tau)):
        return None, None, None, None, None, None, None
    b, s = batch_and_steps(t, tau, replicas)
    distinct = geometry.expected_unique_experts(b) if geometry.is_moe else None
    w = geometry.weight_bytes_per_step(b)
    w_per_s = replicas * s * w
    return s, b, distinct, w, w_per_s, w_per_s + kv_per_s, math.exp(-b)


def _geometry_flags(spec: Mbu, geometry: ModelGeometry, regime: StepRegime | None) -> Mbu:
    """A speculative MBU with the geometry's own flags under its own (the uniform-routing
    bound only where no expert load was measured)."""
    i = spec.inputs
    base = _flags(geometry, True, i.expected_distinct_experts, i.batch_per_replica, False)
    if regime is not None and regime.expert_load is not None:
        base = base.model_copy(update={"moe_uniform_routing_upper_bound": False})
    return step_flags(spec, base)


def check_rated_bandwidth(result: Mbu) -> Mbu:
    """An MBU above ``RATED_BANDWIDTH_LIMIT`` is never printed as a figure.

    The engine cannot draw bytes faster than the HBM's rated bandwidth. On an MoE model whose
    routing was not measured the headline assumes uniform routing, the most bytes any routing
    reads; when the band's lower end (the fewest experts any routing reads) is within the
    rating, the excess is evidence that the routing is skewed, not that an input is wrong: the
    figure is kept as the band [lower, rating] (``_skew_explains``). Otherwise an input is
    wrong: the node has more GPUs than the spec says, another accelerator, more replicas, or
    weights more compressed than config.json states. The figure is withdrawn (the inputs
    stay, so the arithmetic can be redone), ``above_rated_bandwidth`` is raised and the first
    note names the likely inputs.
    """
    if result.mbu is None or result.mbu <= RATED_BANDWIDTH_LIMIT:
        return result
    low = result.mbu_lower_bound
    if result.flags.routing_unmeasured and low is not None and low <= RATED_BANDWIDTH_LIMIT:
        return _skew_explains(result)
    i = result.inputs
    per_gpu_tb_s = i.bandwidth_bytes_per_s_per_gpu / 1e12
    gpus_needed = math.ceil(result.mbu * i.gpus)
    note = (
        f"MBU refused: the derived traffic is {result.mbu:.2f}× the rated bandwidth of "
        f"{i.gpus} GPU(s) × {per_gpu_tb_s:.2f} TB/s, which is impossible, so an input is wrong. "
        f"Check hardware.gpus (the traffic needs at least {gpus_needed} such GPUs), "
        "hardware.accelerator, hardware.replicas, and the weight dtype (quantized weights "
        "read fewer bytes than config.json says)"
    )
    if i.experts and low is not None:
        note += (
            f"; even if every token picked the same experts (the fewest any routing reads) it "
            f"would need {100 * low:.0f} % of the rating"
        )
    flags = result.flags.model_copy(update={"above_rated_bandwidth": True})
    return result.model_copy(
        update={
            "mbu": None,
            "mbu_weights": None,
            "mbu_kv": None,
            "mbu_decode_only": None,
            "mbu_lower_bound": None,
            "mbu_decode_only_lower_bound": None,
            "flags": flags,
            "notes": [note, *result.notes],
        }
    )


def _skew_explains(result: Mbu) -> Mbu:
    """Uniform routing would read more than the rating allows, the fewest experts would not:
    the truth lies in [lower, rating], so the headline (the band's upper end) is the rating
    and the note says why; the decode-only figure is capped the same way."""
    assert result.mbu is not None
    cap = RATED_BANDWIDTH_LIMIT
    kv = result.mbu_kv or 0.0
    dec = result.mbu_decode_only
    note = (
        f"uniform routing would read {100 * result.mbu:.1f} % of the rated bandwidth, which is "
        "impossible, so the routing is skewed (tokens share experts), not an input wrong: MBU "
        f"is stated as its band [{100 * (result.mbu_lower_bound or 0.0):.1f}, "
        f"{100 * cap:.0f}] %, the rating its upper end; a measured expert load "
        "(engine.expert_load_file) gives the figure"
    )
    return result.model_copy(
        update={
            "mbu": cap,
            "mbu_weights": max(cap - kv, 0.0),
            "mbu_decode_only": None if dec is None else min(dec, cap),
            "notes": [note, *result.notes],
        }
    )


def _flags(
    geometry: ModelGeometry,
    decoded: bool,
    distinct: float | None,
    b: float | None,
    multi_token_chunks: bool,
) -> MbuFlags:
    untouched = (
        1.0 - distinct / geometry.experts if distinct is not None and geometry.experts else 0.0
    )
    return MbuFlags(
        multi_token_chunks=bool(multi_token_chunks),
        moe_uniform_routing_upper_bound=geometry.is_moe
        and decoded
        and untouched > MOE_UNTOUCHED_FRACTION,
        low_load_busy_bias=b is not None and b < LOW_LOAD_BATCH,
        no_decode=not decoded,
    )


def apply_regime(
    result: Mbu, geometry: ModelGeometry, regime: StepRegime, *, routing_detail: bool = True
) -> Mbu:
    """Headline = all bytes the decode steps read per elapsed second (mixed steps, busy share,
    measured routing: ``metrics.mbu.mixed_steps``); the decode-only figure beside it; flags whose
    notes say which way the measured regime moves the figure and by how much."""
    i = result.inputs
    assert i.steps_per_s_per_replica is not None and i.batch_per_replica is not None
    assert i.kv_bytes_per_output_token is not None and i.kv_bytes_per_s is not None
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
    if regime.expert_load is not None and geometry.is_moe and routing_detail:
        uniform = estimate_mixed_steps(
            geometry,
            batch_per_replica=i.batch_per_replica,
            steps_per_s=i.steps_per_s_per_replica,
            replicas=i.replicas,
            regime=dataclasses.replace(regime, expert_load=None),
            kv_bytes_per_output_token=i.kv_bytes_per_output_token,
        )
        skew = (uniform.weight_bytes_per_s - mix.weight_bytes_per_s) / node
        notes.append(routing_skew_note(mix.routing, skew))
    flags = result.flags.model_copy(
        update={
            "mixed_steps": mix.mixed_step_fraction > MIXED_STEP_NOTE_FRACTION and mbu - dec > 0.001,
            "idle": 1.0 - mix.busy_fraction > IDLE_NOTE_FRACTION,
            "low_load_busy_bias": False,  # measured and corrected: see the idle flag
            "moe_uniform_routing_upper_bound": result.flags.moe_uniform_routing_upper_bound
            and regime.expert_load is None,
            "over_slot_limit": mix.over_slot_limit,
            "small_batch": mix.batch_busy < SMALL_BATCH,
            "routing_skew": abs(skew) > ROUTING_SKEW_NOTE_PT / 100,
            "prefill_only": (regime.prefill_only_fraction or 0.0) > IDLE_NOTE_FRACTION,
        }
    )
    inputs = i.model_copy(
        update={
            "mixed_steps": mix,
            "headline_bytes_per_s": mix.weight_bytes_per_s + i.kv_bytes_per_s,
        }
    )
    update: dict[str, object] = {"flags": flags, "inputs": inputs, "notes": notes + flags.notes()}
    if mix.over_slot_limit:
        update.update(mbu=None, mbu_weights=None, mbu_kv=None)
    else:
        update.update(mbu=mbu, mbu_weights=mix.weight_bytes_per_s / node, mbu_decode_only=dec)
    result = result.model_copy(update=update)
    return _with_routing_band(result, geometry, regime, mix) if routing_detail else result


def _with_routing_band(
    result: Mbu, geometry: ModelGeometry, regime: StepRegime, mix: MbuMixedSteps
) -> Mbu:
    """Unmeasured MoE routing: the fewest-experts lower bound beside the uniform
    headline (``mix``, the headline's own estimate, is the band's upper end), its note, and
    ``routing_unmeasured`` when the band is wider than 1 pt (``metrics.mbu.routing_band``)."""
    i = result.inputs
    if result.mbu is None or i.steps_per_s_per_replica is None or i.batch_per_replica is None:
        return result
    band = routing_band(
        geometry,
        regime,
        batch_per_replica=i.batch_per_replica,
        steps_per_s=i.steps_per_s_per_replica,
        replicas=i.replicas,
        kv_bytes_per_output_token=i.kv_bytes_per_output_token or 0.0,
        kv_bytes_per_s=i.kv_bytes_per_s or 0.0,
        node_bandwidth_bytes_per_s=i.node_bandwidth_bytes_per_s,
        zipf_s=regime.routing_zipf,
        upper=mix,
    )
    return with_band(result, band)


def _regime_notes(  # noqa: PLR0917 - one private call site, every argument a figure
    geometry: ModelGeometry,
    regime: StepRegime,
    mix: MbuMixedSteps,
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
            f"MBU counts those bytes; the decode-only figure leaves them out and sits "
            f"{100 * (mbu - dec):.1f} pt below it (a different figure, not a correction: "
            "each is checked against its own truth)"
        )
    idle = 1.0 - mix.busy_fraction
    if idle > IDLE_NOTE_FRACTION:
        high = mix.weight_bytes_per_s / mix.busy_fraction * idle / node
        out.append(
            f"replicas idle {idle:.1%} of the window (measured from arrival and completion "
            f"times): the weight term is scaled by the busy share; unscaled it reads "
            f"{100 * high:.1f} pt high"
        )
    alone = regime.prefill_only_fraction or 0.0
    if alone > IDLE_NOTE_FRACTION:
        high = mix.weight_bytes_per_s / mix.busy_fraction * alone / node
        out.append(
            f"prompts ran with no decode in flight {alone:.1%} of the window (send to first "
            "token while nothing decoded; at concurrency 1 every prompt): neither that time nor "
            "those bytes are decode, so the weight term is scaled by the decode-busy share; "
            f"unscaled it reads {100 * high:.1f} pt high"
        )
    if mix.batch_busy < SMALL_BATCH:
        out.append(_small_batch_note(mix))
    return out


def _small_batch_note(mix: MbuMixedSteps) -> str:
    """What validation showed below SMALL_BATCH, for the way the steps were counted."""
    head = f"small batch (B = {mix.batch_busy:.1f} < {SMALL_BATCH:.0f}): "
    if mix.decode_step_s is not None:  # steps counted from the token gaps (metrics.mbu.step_gaps)
        return head + (
            "with the steps counted from the token gaps, MBU stayed within 0.6 pt of its "
            "truth here in validation (high, if off) and the decode-only figure within 0.1 pt"
        )
    return head + (
        "outside the ±2 pt validated range; without token times (steps from τ) MBU stayed "
        "within 1.5 pt of its truth here in validation and the decode-only figure read up to "
        "2 pt low (less with fewer experts)"
    )
