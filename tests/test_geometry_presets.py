"""The bundled configs against exact reference integers and published figures.

Exact integers: /work/shared/reference/geometry-quirks.md §0 (an independent counter's output,
same conventions). Published: model cards / READMEs (Meta, Mistral, Qwen, DeepSeek, OpenAI).
Byte figures are recomputed here by hand from the layer shapes.
"""

from __future__ import annotations

import math

import pytest

from tokenwatt.geometry import bytes_per_param, list_presets, load_geometry

# preset: (total, active incl. embed+head, active excl. input embedding, total excl. embed & head)
EXACT = {
    "llama-3.1-8b": (8_030_261_248, 8_030_261_248, 7_504_924_672, 6_979_588_096),
    "llama-3.1-70b": (70_553_706_496, 70_553_706_496, 69_503_033_344, 68_452_360_192),
    "mixtral-8x7b-v0.1": (46_702_792_704, 12_879_925_248, 12_748_853_248, 46_440_648_704),
    "qwen3-8b": (8_190_735_360, 8_190_735_360, 7_568_405_504, 6_946_075_648),
    "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704, 3_041_867_776, 29_909_792_768),
    "qwen3-30b-a3b-fp8": (30_532_122_624, 3_353_032_704, 3_041_867_776, 29_909_792_768),
    "deepseek-v3": (671_026_419_200, 37_552_297_472, 36_625_618_432, 669_173_061_120),
    "gpt-oss-20b": (20_914_757_184, 4_187_440_704, 3_608_307_264, 19_756_490_304),
}

# preset: (published total, published active or None, relative tolerance)
PUBLISHED = {
    "llama-3.1-8b": (8.03e9, None, 0.001),
    "mixtral-8x7b-v0.1": (46.7e9, 12.9e9, 0.002),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, 0.02),
    "deepseek-v3": (671.0e9, None, 0.001),
    "gpt-oss-20b": (20.91e9, None, 0.001),
}


def test_every_bundled_preset_is_checked() -> None:
    assert sorted(EXACT) == list_presets()


@pytest.mark.parametrize("preset", sorted(EXACT))
def test_parameter_counts_match_reference_integers(preset: str) -> None:
    g = load_geometry(preset)
    total, active, active_no_embed, body = EXACT[preset]
    assert g.total_params == total
    assert g.active_params == active
    assert not g.tied_embeddings
    assert g.active_params - g.embedding_params == active_no_embed
    assert g.total_params - g.embedding_params - g.lm_head_params == body


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_published_totals(preset: str) -> None:
    g = load_geometry(preset)
    total, active, tol = PUBLISHED[preset]
    assert g.total_params == pytest.approx(total, rel=tol)
    if active is not None:
        assert g.active_params == pytest.approx(active, rel=tol)


def test_deepseek_v3_mtp_reported_apart() -> None:
    g = load_geometry("deepseek-v3")
    assert g.mtp_params == 11_610_068_224  # README_WEIGHTS: "11.5B unique"
    # main model + MTP ≈ HF's "685B" (it also counts the MTP's own embed/head copies: 684.49B)
    with_copies = g.total_params + g.mtp_params + g.embedding_params + g.lm_head_params
    assert with_copies == pytest.approx(684.49e9, rel=1e-4)
    assert g.layers == 61
    assert g.moe_layers == 58  # first_k_dense_replace = 3
    assert (g.experts, g.experts_per_token, g.shared_experts) == (256, 8, 1)
    assert g.expert_params == 3 * 7168 * 2048


def test_moe_layouts() -> None:
    q = load_geometry("qwen3-30b-a3b")
    assert (q.layers, q.moe_layers, q.experts, q.experts_per_token) == (48, 48, 128, 8)
    assert q.shared_experts == 0
    assert q.expert_params == 4_718_592 == 3 * 2048 * 768  # moe_intermediate_size, not 6144
    m = load_geometry("mixtral-8x7b")
    assert (m.moe_layers, m.experts, m.experts_per_token) == (32, 8, 2)
    assert m.expert_params == 3 * 4096 * 14336
    o = load_geometry("gpt-oss-20b")
    assert (o.moe_layers, o.experts, o.experts_per_token) == (24, 32, 4)
    # SwiGLU weights plus gate_up (2I) and down (h) biases
    assert o.expert_params == 3 * 2880 * 2880 + 2 * 2880 + 2880
    for dense in ("llama-3.1-8b", "qwen3-8b"):
        d = load_geometry(dense)
        assert (d.moe_layers, d.experts, d.expert_params, d.expert_bytes) == (0, 0, 0, 0)
        assert not d.is_moe


# preset: (elements per token over full/MLA layers, groups as (kind, layers, window))
KV = {
    "llama-3.1-8b": (2 * 32 * 8 * 128, [("full", 32, None)]),
    "llama-3.1-70b": (2 * 80 * 8 * 128, [("full", 80, None)]),
    "mixtral-8x7b-v0.1": (2 * 32 * 8 * 128, [("full", 32, None)]),
    "qwen3-8b": (2 * 36 * 8 * 128, [("full", 36, None)]),
    "qwen3-30b-a3b": (2 * 48 * 4 * 128, [("full", 48, None)]),  # head_dim 128, not 2048/32
    "deepseek-v3": (61 * (512 + 64), [("mla", 61, None)]),
    "gpt-oss-20b": (2 * 12 * 8 * 64, [("full", 12, None), ("sliding", 12, 128)]),
}


@pytest.mark.parametrize("preset", sorted(KV))
def test_kv_bytes_per_token_bf16(preset: str) -> None:
    g = load_geometry(preset)
    elements, groups = KV[preset]
    assert g.kv_dtype == "bf16"
    assert g.kv_bytes_per_token_full_context == 2 * elements
    assert [(k.kind, k.layers, k.window) for k in g.kv_groups] == groups


def test_seed_figures() -> None:
    assert load_geometry("qwen3-30b-a3b").kv_bytes_per_token_full_context == 96 * 1024
    assert load_geometry("deepseek-v3").kv_bytes_per_token_full_context == 70_272
    assert load_geometry("llama-3.1-8b").kv_bytes_per_token_full_context == 128 * 1024


def test_kv_dtype_fp8_halves_the_cache() -> None:
    assert (
        load_geometry("qwen3-30b-a3b", kv_dtype="fp8").kv_bytes_per_token_full_context == 48 * 1024
    )
    assert (
        load_geometry("deepseek-v3", kv_dtype="fp8_e4m3").kv_bytes_per_token_full_context
        == 61 * 576
    )


def test_bf16_bytes_are_two_per_param_outside_experts_and_embedding() -> None:
    for preset in ("llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b-v0.1", "qwen3-8b"):
        g = load_geometry(preset)
        routed = g.moe_layers * g.experts * g.expert_params
        assert g.dense_weight_bytes == 2 * (g.total_params - routed - g.embedding_params)
        assert g.expert_bytes == 2 * g.expert_params
        assert g.stored_weight_bytes == 2 * g.total_params


def test_qwen3_fp8_bytes_by_hand() -> None:
    """FP8 block quant: 1 byte per linear weight + one FP32 scale per 128×128 tile."""

    def fp8(rows: int, cols: int) -> int:
        return rows * cols + 4 * math.ceil(rows / 128) * math.ceil(cols / 128)

    h, heads, kv, hd, inter, experts, vocab = 2048, 32, 4, 128, 768, 128, 151_936
    attn = fp8(heads * hd, h) + 2 * fp8(kv * hd, h) + fp8(h, heads * hd)
    plain = 2 * (2 * hd + 2 * h + experts * h)  # q/k norms, 2 RMSNorms, router: bf16
    dense = 48 * (attn + plain) + 2 * h + 2 * vocab * h  # final norm, LM head at 2 B/param
    expert = 2 * fp8(inter, h) + fp8(h, inter)

    g = load_geometry("qwen3-30b-a3b-fp8")
    b = load_geometry("qwen3-30b-a3b")
    assert g.weight_dtype == "fp8"
    assert g.dense_weight_bytes == dense
    assert g.expert_bytes == expert == 4_718_592 + 1152
    # about half of BF16 plus scales; the LM head and norms stay 16-bit
    assert g.expert_bytes == b.expert_bytes // 2 + 1152
    assert 0.5 < g.dense_weight_bytes / b.dense_weight_bytes < 0.65


def test_qwen3_fp8_override_matches_the_fp8_checkpoint() -> None:
    """--weights fp8 on the BF16 config counts the same bytes as the real FP8 checkpoint."""
    ref = load_geometry("qwen3-30b-a3b-fp8")
    g = load_geometry("qwen3-30b-a3b", weight_dtype="fp8")
    assert (g.dense_weight_bytes, g.expert_bytes) == (ref.dense_weight_bytes, ref.expert_bytes)


def test_gpt_oss_checkpoint_size_matches_the_card() -> None:
    """MXFP4 experts (4.25 bits) + BF16 rest: the card's 12.8 GiB (ours 12.82 GiB)."""
    g = load_geometry("gpt-oss-20b")
    assert g.weight_dtype == "mxfp4"
    assert g.stored_weight_bytes / 2**30 == pytest.approx(12.82, abs=0.005)
    per_expert_weights = 3 * 2880 * 2880
    assert g.expert_bytes == per_expert_weights * 17 // 32 + 2 * (3 * 2880)
    # attention is in modules_to_not_convert: BF16 like every other non-expert weight
    non_expert = g.total_params - g.moe_layers * g.experts * g.expert_params
    assert g.dense_weight_bytes == 2 * (non_expert - g.embedding_params)


def test_deepseek_v3_fp8_dense_bytes_by_hand() -> None:
    def fp8(rows: int, cols: int) -> int:
        return rows * cols + 4 * math.ceil(rows / 128) * math.ceil(cols / 128)

    h, heads, vocab = 7168, 128, 129_280
    attn = (
        fp8(1536, h)
        + fp8(heads * 192, 1536)
        + fp8(576, h)
        + fp8(heads * 256, 512)
        + fp8(h, heads * 128)
        + 2 * (1536 + 512)
    )
    mlp = 2 * fp8(18432, h) + fp8(h, 18432)
    expert = 2 * fp8(2048, h) + fp8(h, 2048)
    norms = 2 * 2 * h
    router = 2 * (256 * h + 256)
    dense = 3 * (attn + norms + mlp) + 58 * (attn + norms + router + expert)
    dense += 2 * h + 2 * vocab * h
    g = load_geometry("deepseek-v3")
    assert g.expert_bytes == expert
    assert g.dense_weight_bytes == dense


def test_expected_unique_experts_qwen3() -> None:
    g = load_geometry("qwen3-30b-a3b")
    assert g.expected_unique_experts(1) == pytest.approx(8.0, abs=1e-12)
    assert g.expected_unique_experts(64) == pytest.approx(128 * (1 - (1 - 1 / 16) ** 64))
    assert 125.9 < g.expected_unique_experts(64) < 126.0  # nearly all 128 are touched
    w1 = g.weight_bytes_per_step(1)
    assert w1 == pytest.approx(g.dense_weight_bytes + 48 * 8 * g.expert_bytes)


def test_bytes_per_param_rules() -> None:
    assert bytes_per_param("bf16") == bytes_per_param("BFloat16") == 2
    assert bytes_per_param("fp16") == 2
    assert bytes_per_param("fp32") == 4
    assert bytes_per_param("fp8") == 1 + 4 / (128 * 128)
    assert bytes_per_param("int8") == 1 + 2 / 128
    assert bytes_per_param("int4") == 0.5 + 2 / 128
    assert bytes_per_param("mxfp4") * 8 == 4.25
    assert bytes_per_param("nvfp4") * 8 == 4.5
