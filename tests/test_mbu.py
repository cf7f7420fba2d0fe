"""MBU against hand calculations: dense, MoE, MLA and sliding-window geometries.

Geometries are written out by hand (not parsed) so that every byte count below can be checked
on paper; the expected values are computed in the test from the seed's formula with literal
numbers, independently of the code path under test.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenwatt.geometry.model import KVGroup, ModelGeometry
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token

H100_BW = 3.35e12  # B/s per GPU, rated


def _geom(**kw: object) -> ModelGeometry:
    base: dict[str, object] = {
        "name": "hand",
        "model_type": "hand",
        "total_params": 0,
        "active_params": 0,
        "mtp_params": 0,
        "embedding_params": 0,
        "lm_head_params": 0,
        "tied_embeddings": False,
        "layers": 32,
        "moe_layers": 0,
        "experts": 0,
        "experts_per_token": 0,
        "shared_experts": 0,
        "expert_params": 0,
        "weight_dtype": "bf16",
        "kv_dtype": "bf16",
        "dense_weight_bytes": 16_000_000_000,
        "expert_bytes": 0,
        "kv_bytes_per_token_full_context": 131_072,
        "kv_groups": (KVGroup("full", 32, 131_072),),
    }
    base.update(kw)
    return ModelGeometry(**base)  # type: ignore[arg-type]


# Llama-3-8B-like: 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes = 131,072 B/token.
DENSE = _geom()
# Qwen3-30B-A3B-like: 48 MoE layers, 128 experts, top-8, 3 × 2048 × 768 params × 2 B per expert.
EXPERT_BYTES = 3 * 2048 * 768 * 2
MOE = _geom(
    layers=48,
    moe_layers=48,
    experts=128,
    experts_per_token=8,
    dense_weight_bytes=2_000_000_000,
    expert_bytes=EXPERT_BYTES,
    kv_bytes_per_token_full_context=98_304,
    kv_groups=(KVGroup("full", 48, 98_304),),
)
# DeepSeek-V3-like MLA: 61 layers × (512 + 64) latent elements × 2 bytes.
MLA_BPT = 61 * 576 * 2
MLA = _geom(
    layers=61,
    kv_bytes_per_token_full_context=MLA_BPT,
    kv_groups=(KVGroup("mla", 61, MLA_BPT),),
)
# Half the layers full attention, half a 128-token sliding window, 16,384 B/token per group.
SWA = _geom(
    layers=48,
    kv_bytes_per_token_full_context=32_768,
    kv_groups=(KVGroup("full", 24, 16_384), KVGroup("sliding", 24, 16_384, window=128)),
)


def test_context_per_token_single_request() -> None:
    # L = 1000, n = 200: Σ_{i<200} (1000 + i) = 200·1000 + 200·199/2 = 219,900 → 1099.5 per token.
    ctx, kvb = kv_read_per_output_token(DENSE, [(1000, 200)])
    assert ctx == pytest.approx(1099.5)
    assert kvb == pytest.approx(1099.5 * 131_072)


def test_context_per_token_is_token_weighted_over_requests() -> None:
    # (100, 10): 1000 + 45 = 1045;  (0, 1): 0;  (50, 4): 200 + 6 = 206;  n = 0 is skipped.
    ctx, _ = kv_read_per_output_token(DENSE, [(100, 10), (0, 1), (50, 4), (70, 0)])
    assert ctx == pytest.approx((1045 + 0 + 206) / 15)


def test_no_tokens_gives_zero() -> None:
    assert kv_read_per_output_token(DENSE, []) == (0.0, 0.0)


def test_dense_hand_calculation() -> None:
    # T = 2000 tok/s, τ = 25 ms, R = 1, one H100: s = 40 steps/s, B = 50.
    ctx, kvb = kv_read_per_output_token(DENSE, [(1000, 200)] * 7)
    r = compute_mbu(
        DENSE,
        output_tokens_per_s=2000.0,
        itl_token_weighted_s=0.025,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=ctx,
        kv_bytes_per_output_token=kvb,
    )
    weights = 40 * 16e9  # 6.4e11 B/s
    kv = 2000 * 1099.5 * 131_072  # 2.882e11 B/s
    assert r.inputs.steps_per_s_per_replica == pytest.approx(40.0)
    assert r.inputs.batch_per_replica == pytest.approx(50.0)
    assert r.inputs.weight_bytes_per_step == pytest.approx(16e9)
    assert r.inputs.weight_bytes_per_s == pytest.approx(weights)
    assert r.inputs.kv_bytes_per_s == pytest.approx(kv)
    assert r.mbu == pytest.approx((weights + kv) / H100_BW)
    assert r.mbu == pytest.approx(0.27708, abs=1e-5)
    assert r.mbu_weights == pytest.approx(weights / H100_BW)
    assert r.mbu_kv == pytest.approx(kv / H100_BW)
    assert r.inputs.expected_distinct_experts is None
    assert not r.flags.low_load_busy_bias
    assert not r.flags.moe_uniform_routing_upper_bound


def test_moe_hand_calculation_with_replicas() -> None:
    # T = 3200 tok/s over R = 2 replicas on 4 GPUs, τ = 20 ms: s = 50, B = 3200·0.02/2 = 32.
    r = compute_mbu(
        MOE,
        output_tokens_per_s=3200.0,
        itl_token_weighted_s=0.02,
        replicas=2,
        gpus=4,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=1500.0,
        kv_bytes_per_output_token=1500.0 * 98_304,
    )
    distinct = 128 * (1 - (120 / 128) ** 32)  # ≈ 111.77 of 128
    assert distinct == pytest.approx(111.77, abs=0.01)
    w = 2e9 + 48 * distinct * EXPERT_BYTES
    weights = 2 * 50 * w
    kv = 3200 * 1500 * 98_304
    assert r.inputs.batch_per_replica == pytest.approx(32.0)
    assert r.inputs.expected_distinct_experts == pytest.approx(distinct)
    assert r.inputs.weight_bytes_per_step == pytest.approx(w)
    assert r.inputs.node_bandwidth_bytes_per_s == pytest.approx(4 * H100_BW)
    assert r.mbu == pytest.approx((weights + kv) / (4 * H100_BW))
    assert r.mbu_weights is not None and r.mbu_kv is not None
    assert r.mbu_weights + r.mbu_kv == pytest.approx(r.mbu)
    # 16 of 128 experts untouched on average: the uniform-routing upper bound is flagged.
    assert r.flags.moe_uniform_routing_upper_bound


def test_moe_batch_one_reads_top_k_experts() -> None:
    # B = 1: exactly k = 8 experts per layer under uniform routing.
    r = compute_mbu(
        MOE,
        output_tokens_per_s=50.0,
        itl_token_weighted_s=0.02,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=0.0,
        kv_bytes_per_output_token=0.0,
    )
    assert r.inputs.expected_distinct_experts == pytest.approx(8.0)
    assert r.inputs.weight_bytes_per_s == pytest.approx(50 * (2e9 + 48 * 8 * EXPERT_BYTES))
    assert r.flags.moe_uniform_routing_upper_bound
    assert r.flags.low_load_busy_bias


def test_moe_large_batch_touches_every_expert_and_clears_flag() -> None:
    r = compute_mbu(
        MOE,
        output_tokens_per_s=25_600.0,
        itl_token_weighted_s=0.02,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=0.0,
        kv_bytes_per_output_token=0.0,
    )
    assert r.inputs.batch_per_replica == pytest.approx(512.0)
    assert r.inputs.expected_distinct_experts == pytest.approx(128.0, rel=1e-10)
    assert not r.flags.moe_uniform_routing_upper_bound


def test_mla_hand_calculation() -> None:
    # MLA caches 61 × 576 × 2 = 70,272 B per token; L = 2000, n = 500:
    # context = 500·2000 + 500·499/2 = 1,124,750 → 2249.5 per token.
    assert MLA_BPT == 70_272
    ctx, kvb = kv_read_per_output_token(MLA, [(2000, 500)])
    assert ctx == pytest.approx(2249.5)
    assert kvb == pytest.approx(2249.5 * 70_272)
    r = compute_mbu(
        MLA,
        output_tokens_per_s=1000.0,
        itl_token_weighted_s=0.05,
        replicas=1,
        gpus=8,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=ctx,
        kv_bytes_per_output_token=kvb,
    )
    assert r.mbu == pytest.approx((20 * 16e9 + 1000 * 2249.5 * 70_272) / (8 * H100_BW))


def test_sliding_window_hand_calculation() -> None:
    # L = 100, n = 100. Full layers read 100..199: Σ = 14,950.
    # Window 128: tokens i = 0..27 read 100..127 (Σ = 3,178); i = 28..99 read 128 each (9,216).
    ctx, kvb = kv_read_per_output_token(SWA, [(100, 100)])
    assert ctx == pytest.approx(149.5)  # the seed's n·L + n(n−1)/2, full-attention context
    assert kvb == pytest.approx((16_384 * 14_950 + 16_384 * (3_178 + 9_216)) / 100)
    # The window makes the exact figure smaller than context × bytes-per-token.
    assert kvb < ctx * 32_768
    r = compute_mbu(
        SWA,
        output_tokens_per_s=4000.0,
        itl_token_weighted_s=0.02,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=ctx,
        kv_bytes_per_output_token=kvb,
    )
    assert r.inputs.kv_bytes_per_s == pytest.approx(4000 * kvb)


@given(
    reqs=st.lists(
        st.tuples(st.integers(0, 5000), st.integers(0, 2000)), min_size=1, max_size=20
    ).filter(lambda rs: any(n > 0 for _, n in rs))
)
def test_full_attention_kv_equals_context_times_bytes(reqs: list[tuple[int, int]]) -> None:
    ctx, kvb = kv_read_per_output_token(DENSE, reqs)
    assert kvb == pytest.approx(ctx * 131_072, rel=1e-12)


def test_flags_and_undefined_cases() -> None:
    common = {
        "replicas": 1,
        "gpus": 1,
        "bandwidth_bytes_per_s": H100_BW,
        "mean_context_per_token": 0.0,
        "kv_bytes_per_output_token": 0.0,
    }
    r = compute_mbu(
        DENSE,
        output_tokens_per_s=100.0,
        itl_token_weighted_s=0.01,
        multi_token_chunks=True,
        **common,  # type: ignore[arg-type]
    )
    assert r.flags.multi_token_chunks
    assert r.flags.low_load_busy_bias  # B = 1
    assert r.inputs.estimated_idle_fraction == pytest.approx(math.exp(-1.0))
    d = r.model_dump()
    assert set(d) >= {"mbu", "mbu_weights", "mbu_kv", "inputs", "flags", "notes"}
    assert any("several tokens per chunk" in n for n in d["notes"])

    for tau in (0.0, float("nan")):
        none = compute_mbu(DENSE, output_tokens_per_s=100.0, itl_token_weighted_s=tau, **common)  # type: ignore[arg-type]
        assert none.mbu is None and none.flags.no_decode
        assert none.model_dump()["mbu"] is None
    with pytest.raises(ValueError, match="bandwidth"):
        compute_mbu(
            DENSE,
            output_tokens_per_s=1.0,
            itl_token_weighted_s=1.0,
            replicas=1,
            gpus=1,
            bandwidth_bytes_per_s=0.0,
            mean_context_per_token=0.0,
            kv_bytes_per_output_token=0.0,
        )


def test_parsed_qwen3_moe_preset_batch_one() -> None:
    # The bundled Qwen3-30B-A3B config: 48 MoE layers, 128 experts, top-8, expert = 3 × 2048 ×
    # 768 params × 2 B; at B = 1 exactly 8 experts per layer are read.
    from tokenwatt.geometry import load_geometry

    g = load_geometry("qwen3-30b-a3b")
    assert (g.moe_layers, g.experts, g.experts_per_token) == (48, 128, 8)
    assert g.expert_bytes == 3 * 2048 * 768 * 2
    assert g.kv_bytes_per_token_full_context == 2 * 48 * 4 * 128 * 2  # 96 KiB
    r = compute_mbu(
        g,
        output_tokens_per_s=40.0,
        itl_token_weighted_s=0.025,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=600.0,
        kv_bytes_per_output_token=600.0 * 98_304,
    )
    w = g.dense_weight_bytes + 48 * 8 * 3 * 2048 * 768 * 2
    assert r.mbu == pytest.approx((40 * w + 40 * 600 * 98_304) / H100_BW)


def test_parsed_gpt_oss_sliding_window_reads_less_than_full_context() -> None:
    from tokenwatt.geometry import load_geometry

    g = load_geometry("gpt-oss-20b")
    # 12 full-attention layers and 12 with a 128-token window, 24,576 B/token per group.
    ctx, kvb = kv_read_per_output_token(g, [(1000, 10)])
    full = 24_576 * (10 * 1000 + 45)
    assert kvb == pytest.approx((full + 24_576 * 128 * 10) / 10)
    assert ctx == pytest.approx(1004.5)
