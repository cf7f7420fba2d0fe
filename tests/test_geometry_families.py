"""Architectures without a bundled config: synthetic config.json dicts built from published
dimensions, checked against geometry-quirks.md §0 integers, hand counts and model cards."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tokenwatt.geometry import geometry_from_config

# ---------------------------------------------------------------- configs (public dimensions)


def llama4(experts: int, step: int, **extra: Any) -> dict[str, Any]:
    """Llama-4 Scout (16 experts) / Maverick (128, MoE every 2nd layer), text part nested."""
    text = {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_local_experts": experts,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": step,
        "vocab_size": 202048,
        "attention_chunk_size": 8192,
        "no_rope_layers": [],
        "use_qk_norm": True,
        "torch_dtype": "bfloat16",
        **extra,
    }
    return {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": {"hidden_size": 1408, "num_hidden_layers": 34},
    }


DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "topk_method": "greedy",
    "vocab_size": 102400,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

DEEPSEEK_V2 = {
    **DEEPSEEK_V2_LITE,
    "hidden_size": 5120,
    "num_hidden_layers": 60,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "n_routed_experts": 160,
    "topk_method": "group_limited_greedy",
}

KIMI_K2 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_nextn_predict_layers": 0,
    "topk_method": "noaux_tc",
    "vocab_size": 163840,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}

QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_window_layers": 28,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

QWEN25_05B = {
    **QWEN25_7B,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_window_layers": 21,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
}

LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}

MISTRAL_7B_V03 = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32768,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

QWEN15_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "decoder_sparse_step": 1,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


# ---------------------------------------------------------------- §0 integers


def test_deepseek_v2_lite_q_lora_null() -> None:
    g = geometry_from_config(DEEPSEEK_V2_LITE, name="DeepSeek-V2-Lite")
    assert g.total_params == 15_706_484_224
    assert g.active_params == 2_661_150_208
    assert g.active_params - g.embedding_params == 2_451_435_008  # README: 2.4B
    assert g.total_params - 2 * g.embedding_params == 15_287_053_824
    assert (g.moe_layers, g.experts, g.experts_per_token, g.shared_experts) == (26, 64, 6, 2)
    assert g.kv_bytes_per_token_full_context == 27 * 576 * 2
    assert g.mtp_params == 0


def test_deepseek_v2() -> None:
    g = geometry_from_config(DEEPSEEK_V2, name="DeepSeek-V2")
    assert g.total_params == 235_741_434_880  # README: 236B
    assert g.active_params == 21_375_800_320  # README: 21B (excl. input embedding 20.85B)
    assert g.active_params - g.embedding_params == 20_851_512_320


def test_llama4_scout_text_only() -> None:
    g = geometry_from_config(llama4(16, 1), name="Llama-4-Scout")
    assert g.total_params == 107_769_861_120
    assert g.active_params == 17_172_894_720
    assert g.active_params - g.embedding_params == 16_138_408_960
    assert g.total_params - 2 * g.embedding_params == 105_700_889_600
    assert (g.moe_layers, g.experts, g.experts_per_token, g.shared_experts) == (48, 16, 1, 1)
    assert g.expert_params == 3 * 5120 * 8192


def test_llama4_maverick_interleaved() -> None:
    g = geometry_from_config(llama4(128, 2), name="Llama-4-Maverick")
    assert g.total_params == 400_711_848_960
    assert g.active_params == 17_184_691_200
    assert g.active_params - g.embedding_params == 16_150_205_440
    assert g.total_params - 2 * g.embedding_params == 398_642_877_440
    assert (g.layers, g.moe_layers, g.experts) == (48, 24, 128)


def test_llama4_explicit_moe_layers_agree_with_step() -> None:
    explicit = llama4(128, 2, moe_layers=list(range(1, 48, 2)))
    a = geometry_from_config(explicit, name="a")
    b = geometry_from_config(llama4(128, 2), name="b")
    assert a.total_params == b.total_params


def test_llama4_chunked_kv_groups() -> None:
    g = geometry_from_config(llama4(16, 1), name="Llama-4-Scout")
    per_layer = 2 * 8 * 128 * 2
    assert [(k.kind, k.layers, k.window) for k in g.kv_groups] == [
        ("full", 12, None),
        ("chunked", 36, 8192),
    ]
    assert g.kv_bytes_per_token_full_context == 12 * per_layer == 48 * 1024
    # ≤ 8192 tokens: every layer grows (192 KiB per token); beyond, only the global ones
    assert g.kv_bytes_read(8191) == 8191 * 48 * per_layer
    assert g.kv_bytes_read(8192) == 8192 * 12 * per_layer  # a new chunk starts: nothing local
    assert g.kv_bytes_read(10_000) == 10_000 * 12 * per_layer + (10_000 - 8192) * 36 * per_layer


def test_llama4_layer_types_override_no_rope_layers() -> None:
    types = ["chunked_attention", "chunked_attention", "chunked_attention", "full_attention"] * 12
    g = geometry_from_config(llama4(16, 1, layer_types=types), name="x")
    assert [(k.kind, k.layers) for k in g.kv_groups] == [("full", 12), ("chunked", 36)]


def test_mistral_7b_v03() -> None:
    g = geometry_from_config(MISTRAL_7B_V03, name="Mistral-7B-v0.3")
    assert g.total_params == 7_248_023_552
    assert g.total_params - 2 * g.embedding_params == 6_979_588_096
    assert [(k.kind, k.layers) for k in g.kv_groups] == [("full", 32)]


def test_mistral_v01_sliding_window_every_layer() -> None:
    g = geometry_from_config({**MISTRAL_7B_V03, "sliding_window": 4096}, name="Mistral-7B-v0.1")
    assert [(k.kind, k.layers, k.window) for k in g.kv_groups] == [("sliding", 32, 4096)]
    assert g.kv_bytes_per_token_full_context == 0  # no layer grows with the whole context
    assert g.kv_bytes_read(10_000) == 4096 * 2 * 32 * 8 * 128 * 2


# ---------------------------------------------------------------- hand counts / cards


def test_qwen25_hardcoded_qkv_biases() -> None:
    g = geometry_from_config(QWEN25_7B, name="Qwen2.5-7B")
    h, heads, kv, hd, inter, layers, vocab = 3584, 28, 4, 128, 18944, 28, 152064
    attn = 2 * h * heads * hd + 2 * h * kv * hd + heads * hd + 2 * kv * hd  # q,k,v biases
    per_layer = attn + 3 * h * inter + 2 * h
    assert g.total_params == layers * per_layer + h + 2 * vocab * h == 7_615_616_512
    assert g.total_params - 2 * g.embedding_params == pytest.approx(6.53e9, rel=1e-3)  # card
    # sliding_window 131072 with use_sliding_window false means no sliding window
    assert [(k.kind, k.layers) for k in g.kv_groups] == [("full", 28)]
    assert g.kv_bytes_per_token_full_context == 2 * 28 * 4 * 128 * 2


def test_qwen25_sliding_window_when_enabled() -> None:
    cfg = {**QWEN25_7B, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    g = geometry_from_config(cfg, name="x")
    assert [(k.kind, k.layers, k.window) for k in g.kv_groups] == [
        ("full", 20, None),
        ("sliding", 8, 4096),
    ]


def test_tied_embeddings_counted_once() -> None:
    g = geometry_from_config(QWEN25_05B, name="Qwen2.5-0.5B")
    assert g.tied_embeddings
    assert g.total_params == 494_032_768  # card: 0.49B
    assert g.total_params - g.embedding_params == 357_898_112  # card: 0.36B non-embedding
    assert g.lm_head_params == g.embedding_params == 151936 * 896
    # the head is read every step even though it shares storage with the embedding
    assert g.dense_weight_bytes == 2 * (g.total_params - g.embedding_params) + 2 * g.lm_head_params
    assert g.stored_weight_bytes == 2 * g.total_params
    assert g.active_params == g.total_params

    llama = geometry_from_config(LLAMA32_1B, name="Llama-3.2-1B")
    assert llama.total_params == pytest.approx(1.236e9, rel=1e-3)  # HF: 1.24B
    untied = geometry_from_config({**LLAMA32_1B, "tie_word_embeddings": False}, name="x")
    assert untied.total_params - llama.total_params == 128256 * 2048


def test_qwen2_moe_shared_expert_and_gate() -> None:
    g = geometry_from_config(QWEN15_MOE, name="Qwen1.5-MoE-A2.7B")
    assert g.total_params == pytest.approx(14.3e9, rel=2e-3)  # card: 14.3B
    assert g.active_params == pytest.approx(2.7e9, rel=0.01)  # card: 2.7B
    assert (g.experts, g.experts_per_token, g.shared_experts) == (60, 4, 1)
    h = 2048
    shared = 3 * h * 5632 + h  # shared expert + its 1×h gate, in the dense part
    routed = 60 * 3 * h * 1408
    attn = 4 * h * h + 3 * h
    assert g.total_params == 24 * (attn + 2 * h + 60 * h + shared + routed) + h + 2 * 151936 * h


def test_kimi_k2_by_hand() -> None:
    g = geometry_from_config(KIMI_K2, name="Kimi-K2")
    h, heads, vocab = 7168, 64, 163840
    attn = h * 1536 + 1536 + 1536 * heads * 192 + h * 576 + 512 + 512 * heads * 256
    attn += heads * 128 * h
    expert = 3 * h * 2048
    dense = attn + 2 * h + 3 * h * 18432
    moe_total = attn + 2 * h + 384 * h + 384 + 385 * expert
    moe_active = attn + 2 * h + 384 * h + 384 + 9 * expert
    assert g.total_params == dense + 60 * moe_total + h + 2 * vocab * h
    assert g.active_params == dense + 60 * moe_active + h + 2 * vocab * h
    assert g.total_params == pytest.approx(1.0e12, rel=0.03)  # Moonshot: "1T total"
    assert g.active_params == pytest.approx(32e9, rel=0.03)  # "32B activated"
    assert g.model_type == "kimi_k2"
    assert g.weight_dtype == "fp8"
    assert g.kv_bytes_per_token_full_context == 61 * 576 * 2  # 64 KV heads are irrelevant under MLA
    assert [(k.kind, k.layers) for k in g.kv_groups] == [("mla", 61)]


def test_deepseek_mtp_layers_counted_apart() -> None:
    with_mtp = geometry_from_config({**KIMI_K2, "num_nextn_predict_layers": 1}, name="x")
    without = geometry_from_config(KIMI_K2, name="y")
    assert with_mtp.total_params == without.total_params
    assert with_mtp.active_params == without.active_params
    h = 7168
    # one MTP layer: enorm + hnorm + eh_proj (2h×h) + a MoE decoder layer + shared_head.norm
    attn = h * 1536 + 1536 + 1536 * 64 * 192 + h * 576 + 512 + 512 * 64 * 256 + 64 * 128 * h
    layer = attn + 2 * h + 384 * h + 384 + 385 * 3 * h * 2048
    assert with_mtp.mtp_params == 3 * h + 2 * h * h + layer


# ---------------------------------------------------------------- config variants


def test_nested_text_config_equals_flat() -> None:
    nested = llama4(16, 1)
    flat = {**nested["text_config"], "tie_word_embeddings": False}
    a = geometry_from_config(nested, name="a")
    b = geometry_from_config(flat, name="b")
    assert a.total_params == b.total_params
    assert a.kv_groups == b.kv_groups


def test_transformers_v5_renames() -> None:
    """v5 writes ``dtype`` (not torch_dtype) and folds rope keys into rope_parameters."""
    v4 = {**QWEN25_7B, "torch_dtype": "float16", "rope_theta": 1e6}
    v5 = {k: v for k, v in v4.items() if k not in ("torch_dtype", "rope_theta")}
    v5.update(dtype="float16", rope_parameters={"rope_theta": 1e6, "rope_type": "default"})
    a = geometry_from_config(v4, name="a")
    b = geometry_from_config(v5, name="b")
    assert a.weight_dtype == b.weight_dtype == "fp16"
    assert a.to_dict() | {"name": "b", "source": ""} == b.to_dict() | {"source": ""}


def test_model_type_from_architectures_when_missing() -> None:
    cfg = {k: v for k, v in QWEN25_7B.items() if k != "model_type"}
    g = geometry_from_config(cfg, name="x")
    assert g.model_type == "qwen2"
    assert g.total_params == 7_615_616_512


def test_missing_optional_keys_use_class_defaults() -> None:
    cfg = copy.deepcopy(MISTRAL_7B_V03)
    del cfg["num_key_value_heads"], cfg["tie_word_embeddings"], cfg["torch_dtype"]
    g = geometry_from_config(cfg, name="x")
    assert g.kv_bytes_per_token_full_context == 2 * 32 * 32 * 128 * 2  # MHA fallback
    assert not g.tied_embeddings  # MistralConfig default
    assert g.weight_dtype == "bf16"
    assert any("torch_dtype" in n for n in g.notes)
    assert any("tie_word_embeddings" in n for n in g.notes)


def test_unknown_model_type_is_counted_llama_style_with_a_note() -> None:
    cfg = {**MISTRAL_7B_V03, "model_type": "brand_new"}
    g = geometry_from_config(cfg, name="x")
    assert g.total_params == 7_248_023_552
    assert any("brand_new" in n for n in g.notes)
    del cfg["tie_word_embeddings"]
    tied = geometry_from_config(cfg, name="x")
    assert tied.tied_embeddings  # PretrainedConfig's default
    assert tied.total_params == 7_248_023_552 - 32768 * 4096


def test_sliding_window_patterns() -> None:
    base = {**MISTRAL_7B_V03, "num_hidden_layers": 12, "sliding_window": 1024}
    g3 = geometry_from_config({**base, "sliding_window_pattern": 6}, name="gemma3-like")
    assert [(k.kind, k.layers, k.window) for k in g3.kv_groups] == [
        ("full", 2, None),  # layers 5 and 11
        ("sliding", 10, 1024),
    ]
    g2 = geometry_from_config({**base, "model_type": "gemma2"}, name="gemma2-like")
    assert [(k.kind, k.layers) for k in g2.kv_groups] == [("full", 6), ("sliding", 6)]
