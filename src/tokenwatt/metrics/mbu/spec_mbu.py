"""MBU under speculative decoding: the plain path's bytes per step, k + 1 positions a sequence.

With speculation one engine step emits α tokens per sequence (the acceptance length), so the
seed's s = 1/τ and B = T·τ/R count tokens, not steps and sequences, and are off by about α.
From the client's steps (``metrics.steps``: one chunk per verify step) instead:

    τ_c  = ITL per chunk (one step)        s = 1/τ_c per replica
    D    = T × decode steps ÷ tokens        decode steps (one per sequence) per second, node
    B    = D·τ_c / R                        sequences per step per replica
    W_t  = W̄(B·(k + 1) routed positions)   the target verifies k + 1 positions per sequence;
                                             J ~ Poisson(m) prompts of L uncached tokens ride
                                             along (m = λ_rep·τ_c, chunked prefill's mixed
                                             steps). W̄ is ``metrics.mbu.mixed_steps.step_weights``,
                                             the plain path's bytes per step, over the same
                                             expert load (measured, or uniform)
    W_d  = k × drafter pass bytes            mtp: MTP layer + LM head + its distinct experts
                                             (same expert load); draft, eagle,
                                             eagle3: the draft model's (head's) W(B);
                                             ngram: 0
    KV/s = D × KV bytes per output token    the cache is read once per step per sequence
           (+ k × D × draft KV per token for a draft model)
    MBU  = (R·s·(W_t + W_d) + KV/s) ÷ (N_GPU × rated bandwidth)

The decode-only figure is the same with J = 0. Routing is treated as on the plain path
(``metrics.mbu.routing_band``): a measured expert load gives the headline and a note of how far
uniform routing would move it; without one the headline is the uniform upper bound and the
band's lower end is the same evaluation at the fewest experts any routing reads. Unlike the
plain path the batch is taken at its mean B (one point, no batch law); like it, the weight
term is scaled by the decode-busy share (1 − idle − prompts alone: s = 1/τ_c is a rate while
a sequence decodes, and no step runs while none does). The drafter's assumption is named in
``inputs.speculation.assumption`` (``geometry.drafts``). Speculation detected but not
declared leaves the drafter's bytes out (flag ``drafter_bytes_unknown``: MBU reads low); k is
then taken as the largest chunk − 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tokenwatt.batch_steps import batch_and_steps
from tokenwatt.geometry.drafts import mtp_pass_bytes
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.metrics.mbu.mixed_steps import StepRegime, step_weights
from tokenwatt.metrics.mbu.routing_band import (
    ROUTING_SKEW_NOTE_PT,
    RoutingBand,
    reference_load,
    routing_skew_note,
    with_band,
)
from tokenwatt.result import Mbu, MbuFlags, MbuInputs, MbuSpeculation, StepSummary
from tokenwatt.spec.engine import DEFAULT_CHUNK_BUDGET_TOKENS, DRAFT_MODEL_METHODS

__all__ = ["Drafter", "StepBasis", "speculative_mbu"]

_ASSUMPTIONS = {
    "mtp": "k passes of one MTP layer: its non-expert weights and the LM head at the model's "
    "bytes per dense parameter, its distinct experts under the model's expert load (uniform "
    "unless measured); its KV left out",
    "draft": "k passes of the draft model: its W(B) and each sequence's draft KV read",
    "eagle": "k passes of the EAGLE head as its declared config prices it (its layer and the "
    "LM head it reads): its W(B) and each sequence's KV read of its layer",
    "eagle3": "k passes of the EAGLE-3 head as its declared config prices it (its layer and "
    "its LM head): its W(B) and each sequence's KV read of its layer",
    "ngram": "n-gram (prompt lookup) drafting reads no weights",
    "unknown": "drafter not declared: its bytes left out (MBU reads low)",
}


@dataclass(frozen=True, slots=True)
class Drafter:
    """What proposes the draft tokens, as declared (``engine.drafter``) or detected."""

    method: Literal["draft", "eagle", "eagle3", "mtp", "ngram", "unknown"]
    num_tokens: int  # k
    draft: ModelGeometry | None = None  # method draft: the draft model's geometry
    source: Literal["declared", "detected"] = "declared"


@dataclass(frozen=True, slots=True)
class StepBasis:
    """What ``compute_mbu`` needs to count steps instead of tokens (its ``steps`` hook)."""

    steps: StepSummary
    drafter: Drafter
    draft_kv_bytes_per_output_token: float = 0.0
    regime: StepRegime | None = None  # request rate and prompt lengths: mixed steps


def geometry_fields(geometry: ModelGeometry) -> dict[str, Any]:
    """The ``MbuInputs`` fields read from the geometry alone, one definition for every MBU."""
    return {
        "experts": geometry.experts if geometry.is_moe else 0,
        "moe_layers": geometry.moe_layers if geometry.is_moe else 0,
        "dense_weight_bytes": float(geometry.dense_weight_bytes),
        "expert_bytes": float(geometry.expert_bytes),
        "kv_bytes_per_token_full_context": float(geometry.kv_bytes_per_token_full_context),
    }


def step_flags(spec: Mbu, base: MbuFlags) -> Mbu:
    """``spec``'s flags laid over ``base`` (the geometry's own): the flags' notes rewritten
    once, the figure's own notes (routing) kept after them."""
    flags = base.model_copy(update=spec.flags.model_dump(exclude_defaults=True))
    own = [n for n in spec.notes if n not in spec.flags.notes()]
    return spec.model_copy(update={"flags": flags, "notes": [*flags.notes(), *own]})


@dataclass(frozen=True, slots=True)
class _Basis:
    """The steps' figures every routing shares: s, B, prompts per step, the KV terms."""

    b: float  # sequences per verify step per replica
    s: float  # verify steps per second per replica (1/τ_c)
    d_rate: float  # decode steps (one per sequence) per second, node
    m: float  # prompts riding along a verify step
    prompt: float  # uncached tokens per prompt
    free: float  # the step's token budget left after the verify positions
    kv_per_s: float
    draft_kv_per_s: float
    node: float  # N_GPU × rated bandwidth
    busy: float = 1.0  # decode-busy share of the window (neither idle nor prompts alone)


@dataclass(frozen=True, slots=True)
class _Bytes:
    """One routing's bytes per verify step: the target's (with and without the prompts riding
    along), the drafter's, and the target's distinct experts per MoE layer."""

    target: float
    target_decode_only: float
    drafter: float
    distinct: float | None

    def figures(self, basis: _Basis, replicas: int) -> tuple[float, float, float]:
        """(headline bytes/s, decode-only bytes/s, weight bytes/s of the headline)."""
        rate = replicas * basis.s * basis.busy  # steps run only while a sequence decodes
        kv = basis.kv_per_s + basis.draft_kv_per_s
        w = rate * (self.target + self.drafter)
        return w + kv, rate * (self.target_decode_only + self.drafter) + kv, w


def _basis(
    steps: StepSummary, drafter: Drafter, *, t: float, replicas: int, node: float,
    kv_bytes_per_output_token: float, draft_kv_bytes_per_output_token: float,
    regime: StepRegime | None,
) -> _Basis | None:  # fmt: skip
    tau_c, steps_n, tokens = steps.itl_chunk_s, steps.decode_steps, steps.tokens
    if tau_c is None or not tau_c > 0 or not steps_n or not tokens or not t > 0:
        return None
    k = drafter.num_tokens
    d_rate = t * steps_n / tokens
    b, s = batch_and_steps(d_rate, tau_c, replicas)
    m, prompt, budget, busy = 0.0, 0.0, float(DEFAULT_CHUNK_BUDGET_TOKENS), 1.0
    if regime is not None:
        busy = decode_busy_share(regime)
        m = regime.request_rate_rps / replicas * tau_c
        prompt = max(0.0, regime.mean_prompt_tokens - regime.mean_cached_prompt_tokens)
        budget = float(regime.chunk_budget_tokens)
    reads_model = drafter.method in DRAFT_MODEL_METHODS
    draft_kv = k * d_rate * draft_kv_bytes_per_output_token if reads_model else 0.0
    return _Basis(
        b, s, d_rate, m, prompt, max(1.0, budget - b * (k + 1)),
        d_rate * kv_bytes_per_output_token, draft_kv, node, busy,
    )  # fmt: skip


def decode_busy_share(regime: StepRegime) -> float:
    """The window's share with a sequence decoding: 1 − idle − prompts running alone (the
    plain path's busy share, ``metrics.mbu.mixed_steps``); s = 1/τ_c counts steps only then."""
    not_decoding = max(regime.idle_fraction or 0.0, 0.0) + (regime.prefill_only_fraction or 0.0)
    return 1.0 - min(not_decoding, 0.99)


def _bytes(
    geometry: ModelGeometry, drafter: Drafter, basis: _Basis, load: ExpertLoad | None
) -> _Bytes:
    """Bytes per verify step under ``load`` (None: uniform routing): the target through the
    plain path's own ``step_weights`` at B·(k + 1) routed positions, the drafter through
    ``geometry.drafts`` under the same routing."""
    routing = None
    if geometry.is_moe:
        routing = load or ExpertLoad.uniform(geometry.experts, geometry.experts_per_token)
    positions = np.array([basis.b * (drafter.num_tokens + 1)])
    sw = step_weights(geometry, routing, positions, m=basis.m, prompt=basis.prompt, free=basis.free)
    return _Bytes(
        float(sw.w_avg[0]), float(sw.w_dec[0]), _drafter_weight_bytes(geometry, drafter,
        basis.b, routing), float(sw.d_avg[0]) if geometry.is_moe else None,
    )  # fmt: skip


def speculative_mbu(
    geometry: ModelGeometry,
    *,
    steps: StepSummary,
    drafter: Drafter,
    output_tokens_per_s: float,
    itl_token_weighted_s: float,
    replicas: int,
    gpus: int,
    bandwidth_bytes_per_s: float,
    mean_context_per_token: float,
    kv_bytes_per_output_token: float,
    draft_kv_bytes_per_output_token: float = 0.0,
    regime: StepRegime | None = None,
    routing_detail: bool = True,
) -> Mbu | None:
    """The module doc's MBU; None when the steps give no step time (no decode step). Routing
    as the plain path has it: a measured expert load (``regime.expert_load``) in the headline
    with its skew note, or, unmeasured, the uniform headline with the reference-skew band."""
    t = float(output_tokens_per_s)
    node = gpus * bandwidth_bytes_per_s
    basis = _basis(
        steps, drafter, t=t, replicas=replicas, node=node,
        kv_bytes_per_output_token=kv_bytes_per_output_token,
        draft_kv_bytes_per_output_token=draft_kv_bytes_per_output_token, regime=regime,
    )  # fmt: skip
    if basis is None:
        return None
    measured = regime.expert_load if regime is not None and geometry.is_moe else None
    head = _bytes(geometry, drafter, basis, measured)
    total, decode_only, w_per_s = head.figures(basis, replicas)
    spec = MbuSpeculation(
        source=drafter.source,
        method=drafter.method,
        num_tokens=drafter.num_tokens,
        acceptance_length=steps.acceptance_length or 1.0,
        itl_chunk_s=1.0 / basis.s,
        decode_steps_per_s=basis.d_rate,
        target_weight_bytes_per_step=head.target,
        draft_weight_bytes_per_step=head.drafter,
        draft_kv_bytes_per_s=basis.draft_kv_per_s,
        prompts_per_step=basis.m,
        routing="uniform" if measured is None else measured.source,
        assumption=_ASSUMPTIONS[drafter.method],
    )
    inputs = MbuInputs(
        output_tokens_per_s=t,
        itl_token_weighted_s=float(itl_token_weighted_s),
        replicas=replicas,
        gpus=gpus,
        bandwidth_bytes_per_s_per_gpu=float(bandwidth_bytes_per_s),
        steps_per_s_per_replica=basis.s,
        batch_per_replica=basis.b,
        expected_distinct_experts=head.distinct,
        weight_bytes_per_step=head.target + head.drafter,
        weight_bytes_per_s=w_per_s,
        mean_context_per_token=float(mean_context_per_token),
        kv_bytes_per_output_token=float(kv_bytes_per_output_token),
        kv_bytes_per_s=basis.kv_per_s + basis.draft_kv_per_s,
        bytes_per_s=total,
        headline_bytes_per_s=total,
        node_bandwidth_bytes_per_s=node,
        estimated_idle_fraction=math.exp(-basis.b),
        speculation=spec,
        **geometry_fields(geometry),
    )
    flags = MbuFlags(speculative_steps=True, drafter_bytes_unknown=drafter.method == "unknown")
    result = Mbu(
        mbu=total / node,
        mbu_weights=w_per_s / node,
        mbu_kv=inputs.kv_bytes_per_s / node if inputs.kv_bytes_per_s is not None else None,
        mbu_decode_only=decode_only / node,
        inputs=inputs,
        flags=flags,
        notes=flags.notes(),
    )
    if not routing_detail:  # an interval block: the figures only (``compute_mbu``)
        return result
    return _routing(result, geometry, drafter, basis, head, measured, regime)


def _routing(  # noqa: PLR0917 - one private call site, every argument a figure
    result: Mbu,
    geometry: ModelGeometry,
    drafter: Drafter,
    basis: _Basis,
    head: _Bytes,
    measured: ExpertLoad | None,
    regime: StepRegime | None,
) -> Mbu:
    """The plain path's routing figures for a speculative MBU: a measured load's skew against
    uniform (note, ``routing_skew``), or the band down to the fewest experts (lower bounds,
    note, ``routing_unmeasured``)."""
    if not geometry.is_moe:
        return result
    replicas = result.inputs.replicas
    if measured is not None:
        uniform = _bytes(geometry, drafter, basis, None).figures(basis, replicas)[0]
        skew = (uniform - head.figures(basis, replicas)[0]) / basis.node
        flags = result.flags.model_copy(
            update={"routing_skew": abs(skew) > ROUTING_SKEW_NOTE_PT / 100}
        )
        notes = [*result.notes, routing_skew_note(measured.source, skew)]
        return result.model_copy(update={"flags": flags, "notes": notes})
    zipf = reference_load(geometry, None if regime is None else regime.routing_zipf)
    low, low_dec, _ = _bytes(geometry, drafter, basis, zipf).figures(basis, replicas)
    assert result.mbu is not None and result.mbu_decode_only is not None
    band = RoutingBand(
        zipf.source, result.mbu, low / basis.node, result.mbu_decode_only, low_dec / basis.node
    )
    return with_band(result, band)


def _drafter_weight_bytes(
    geometry: ModelGeometry, drafter: Drafter, batch: float, load: ExpertLoad | None
) -> float:
    k = drafter.num_tokens
    if drafter.method == "mtp":
        return k * mtp_pass_bytes(geometry, batch, load)
    if drafter.method in DRAFT_MODEL_METHODS and drafter.draft is not None:
        return k * drafter.draft.weight_bytes_per_step(batch)
    return 0.0
