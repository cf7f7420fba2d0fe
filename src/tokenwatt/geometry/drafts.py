"""Bytes a drafter reads per verify step: DeepSeek-style MTP layers, or a draft model.

Without speculation the MTP layers are never read (``ModelGeometry.mtp_params`` stays out of
W(B)). With MTP speculation of k tokens the engine runs its MTP layer k times per step
(vLLM reuses the one layer for every position), and each pass reads that layer's weights
and the shared LM head again. A draft model runs k autoregressive passes of its own.

Assumptions (named in the MBU flag ``speculative_bytes``): one MTP layer (every published
MTP checkpoint, DeepSeek-V3/R1 and GLM-4.5, has one); the layer's non-expert weights and
the LM head are stored at the main model's bytes per non-expert parameter; its routed
experts are read as a MoE layer's are (distinct experts of the batch's tokens, under the
same expert load as the model's layers); the MTP
layer's own KV cache (one layer of ``layers``) is left out.
"""

from __future__ import annotations

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad

__all__ = ["dense_bytes_per_param", "mtp_expert_bytes", "mtp_fixed_bytes", "mtp_pass_bytes"]


def dense_bytes_per_param(g: ModelGeometry) -> float:
    """Bytes per non-expert parameter as the geometry prices them (dense bytes ÷ dense params)."""
    dense_params = g.active_params - g.moe_layers * g.experts_per_token * g.expert_params
    return g.dense_weight_bytes / dense_params if dense_params > 0 else 0.0


def mtp_expert_bytes(g: ModelGeometry) -> float:
    """Bytes of one routed expert of the MTP layer (0 when the layer is dense or absent)."""
    return float(g.expert_bytes) if g.mtp_params and g.is_moe else 0.0


def mtp_fixed_bytes(g: ModelGeometry) -> float:
    """Bytes one MTP pass reads whatever the batch: its non-expert weights and the LM head."""
    if not g.mtp_params:
        return 0.0
    experts = g.experts * g.expert_params if g.is_moe else 0
    return (g.mtp_params - experts + g.lm_head_params) * dense_bytes_per_param(g)


def mtp_pass_bytes(g: ModelGeometry, batch: float, load: ExpertLoad | None = None) -> float:
    """Expected bytes of one MTP pass over ``batch`` sequences. Its experts are routed like a
    MoE layer of the model: under ``load`` (a measured or reference expert load, its layers'
    mean) or, without one, uniformly."""
    per_expert = mtp_expert_bytes(g)
    if not per_expert or batch <= 0:
        return mtp_fixed_bytes(g)
    routing = load if load is not None else ExpertLoad.uniform(g.experts, g.experts_per_token)
    return mtp_fixed_bytes(g) + routing.expected_distinct_fixed(batch) * per_expert
