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

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.result import Mbu, MbuFlags, MbuInputs

__all__ = [
    "LOW_LOAD_BATCH",
    "MOE_UNTOUCHED_FRACTION",
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
) -> Mbu:
    """MBU = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth per GPU), with s = 1/τ, B = T·τ/R.

    ``bandwidth_bytes_per_s`` is the rated bandwidth of ONE GPU. ``kv_bytes_per_output_token``
    and ``mean_context_per_token`` come from :func:`kv_read_per_output_token` over the same
    counted requests as T and τ. When T or τ is not a positive number (nothing decoded, or
    every request produced one token) the MBU figures are None and ``flags.no_decode`` is set.
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

    inputs = MbuInputs(
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
        kv_bytes_per_token=float(geometry.kv_bytes_per_token_full_context),
        kv_bytes_per_output_token=float(kv_bytes_per_output_token),
        kv_bytes_per_s=kv_per_s,
        bytes_per_s=total,
        node_bandwidth_bytes_per_s=node_bw,
        estimated_idle_fraction=idle,
    )
    flags = _flags(geometry, decoded, distinct, b, multi_token_chunks)
    if w_per_s is None or total is None:
        return Mbu(mbu=None, mbu_weights=None, mbu_kv=None, inputs=inputs, flags=flags,
                   notes=flags.notes())  # fmt: skip
    return Mbu(
        mbu=total / node_bw,
        mbu_weights=w_per_s / node_bw,
        mbu_kv=kv_per_s / node_bw,
        inputs=inputs,
        flags=flags,
        notes=flags.notes(),
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
