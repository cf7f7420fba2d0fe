"""MBU under speculative decoding: s and B from steps, the drafter's bytes from the geometry.

With speculation one engine step emits α tokens per sequence (the acceptance length), so the
seed's s = 1/τ and B = T·τ/R count tokens, not steps and sequences, and are off by about α.
From the client's steps (``metrics.steps``: one chunk per verify step) instead:

    τ_c  = ITL per chunk (one step)        s = 1/τ_c per replica
    D    = T × decode steps ÷ tokens        decode steps (one per sequence) per second, node
    B    = D·τ_c / R                        sequences per step per replica
    W_t  = W(B·(k + 1) + J·L)                the target verifies k + 1 positions per sequence;
                                             J ~ Poisson(m) prompts of L uncached tokens ride
                                             along (m = λ_rep·τ_c, chunked prefill's mixed
                                             steps; MoE only: they hit more experts)
    W_d  = k × drafter pass bytes            mtp: MTP layer + LM head + its distinct experts
                                             draft: the draft model's W(B); ngram: 0
    KV/s = D × KV bytes per output token    the cache is read once per step per sequence
           (+ k × D × draft KV per token for a draft model)
    MBU  = (R·s·(W_t + W_d) + KV/s) ÷ (N_GPU × rated bandwidth)

The drafter's assumption is named in ``inputs.speculation.assumption`` (``geometry.drafts``).
Speculation detected but not declared leaves the drafter's bytes out (flag
``drafter_bytes_unknown``: MBU reads low); k is then taken as the largest chunk − 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from tokenwatt.batch_steps import batch_and_steps
from tokenwatt.geometry.drafts import mtp_pass_bytes
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.mixed_steps import StepRegime
from tokenwatt.result import Mbu, MbuFlags, MbuInputs, MbuSpeculation, StepSummary

__all__ = ["Drafter", "StepBasis", "speculative_mbu"]

_ASSUMPTIONS = {
    "mtp": "k passes of one MTP layer: its non-expert weights and the LM head at the model's "
    "bytes per dense parameter, its distinct experts under uniform routing; its KV left out",
    "draft": "k passes of the draft model: its W(B) and each sequence's draft KV read",
    "ngram": "n-gram (prompt lookup) drafting reads no weights",
    "unknown": "drafter not declared: its bytes left out (MBU reads low)",
}


@dataclass(frozen=True, slots=True)
class Drafter:
    """What proposes the draft tokens, as declared (``sim.speculative``) or detected."""

    method: Literal["draft", "mtp", "ngram", "unknown"]
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
        "kv_bytes_per_token": float(geometry.kv_bytes_per_token_full_context),
    }


def step_flags(spec: Mbu, base: MbuFlags) -> Mbu:
    """``spec``'s flags laid over ``base`` (the geometry's own), notes rewritten once."""
    flags = base.model_copy(update=spec.flags.model_dump(exclude_defaults=True))
    return spec.model_copy(update={"flags": flags, "notes": flags.notes()})


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
) -> Mbu | None:
    """The module doc's MBU; None when the steps give no step time (no decode step)."""
    tau_c, steps_n, tokens = steps.itl_chunk_s, steps.decode_steps, steps.tokens
    t = float(output_tokens_per_s)
    if tau_c is None or not tau_c > 0 or not steps_n or not tokens or not t > 0:
        return None
    k = drafter.num_tokens
    d_rate = t * steps_n / tokens
    b, s = batch_and_steps(d_rate, tau_c, replicas)
    m, prompt = 0.0, 0.0
    if regime is not None:
        m = regime.request_rate_rps / replicas * tau_c
        prompt = max(0.0, regime.mean_prompt_tokens - regime.mean_cached_prompt_tokens)
    distinct = _distinct_experts(geometry, b * (k + 1), m, prompt)
    w_t = geometry.dense_weight_bytes + geometry.moe_layers * distinct * geometry.expert_bytes
    w_d = _drafter_weight_bytes(geometry, drafter, b)
    kv_per_s = d_rate * kv_bytes_per_output_token
    draft_kv = k * d_rate * draft_kv_bytes_per_output_token if drafter.method == "draft" else 0.0
    w_per_s = replicas * s * (w_t + w_d)
    total = w_per_s + kv_per_s + draft_kv
    node = gpus * bandwidth_bytes_per_s
    spec = MbuSpeculation(
        source=drafter.source,
        method=drafter.method,
        num_tokens=k,
        acceptance_length=steps.acceptance_length or 1.0,
        itl_chunk_s=tau_c,
        decode_steps_per_s=d_rate,
        target_weight_bytes_per_step=w_t,
        draft_weight_bytes_per_step=w_d,
        draft_kv_bytes_per_s=draft_kv,
        prompts_per_step=m,
        assumption=_ASSUMPTIONS[drafter.method],
    )
    inputs = MbuInputs(
        output_tokens_per_s=t,
        itl_token_weighted_s=float(itl_token_weighted_s),
        replicas=replicas,
        gpus=gpus,
        bandwidth_bytes_per_s_per_gpu=float(bandwidth_bytes_per_s),
        steps_per_s_per_replica=s,
        batch_per_replica=b,
        expected_distinct_experts=distinct if geometry.is_moe else None,
        weight_bytes_per_step=w_t + w_d,
        weight_bytes_per_s=w_per_s,
        mean_context_per_token=float(mean_context_per_token),
        kv_bytes_per_output_token=float(kv_bytes_per_output_token),
        kv_bytes_per_s=kv_per_s + draft_kv,
        bytes_per_s=total,
        node_bandwidth_bytes_per_s=node,
        estimated_idle_fraction=math.exp(-b),
        speculation=spec,
        **geometry_fields(geometry),
    )
    flags = MbuFlags(speculative_steps=True, drafter_bytes_unknown=drafter.method == "unknown")
    return Mbu(
        mbu=total / node,
        mbu_weights=w_per_s / node,
        mbu_kv=(kv_per_s + draft_kv) / node,
        inputs=inputs,
        flags=flags,
        notes=flags.notes(),
    )


def _distinct_experts(g: ModelGeometry, tokens: float, prompts: float, prompt_len: float) -> float:
    """E·(1 − (1 − q)^X) averaged over X = tokens + J·L, J ~ Poisson(prompts), q = k/E:
    E[(1 − q)^(J·L)] = exp(prompts·((1 − q)^L − 1))."""
    if not g.is_moe:
        return 0.0
    miss = 1.0 - g.experts_per_token / g.experts
    z: float = miss**prompt_len
    hit: float = 1.0 - miss**tokens * math.exp(prompts * (z - 1.0))
    return g.experts * hit


def _drafter_weight_bytes(geometry: ModelGeometry, drafter: Drafter, batch: float) -> float:
    k = drafter.num_tokens
    if drafter.method == "mtp":
        return k * mtp_pass_bytes(geometry, batch)
    if drafter.method == "draft" and drafter.draft is not None:
        return k * drafter.draft.weight_bytes_per_step(batch)
    return 0.0
