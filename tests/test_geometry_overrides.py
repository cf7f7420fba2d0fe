"""User overrides: inputs recompute, outputs replace, everything validated in one line."""

from __future__ import annotations

import pytest

from tokenwatt.errors import GeometryError
from tokenwatt.geometry import KVGroup, load_geometry


def test_input_overrides_recompute_everything() -> None:
    base = load_geometry("qwen3-30b-a3b")
    g = load_geometry("qwen3-30b-a3b", overrides={"layers": "24"})
    per_layer = (base.total_params - 2 * base.embedding_params - 2048) // 48
    assert g.layers == g.moe_layers == 24
    assert g.total_params == 24 * per_layer + 2 * base.embedding_params + 2048
    assert g.kv_bytes_per_token_full_context == base.kv_bytes_per_token_full_context // 2

    k4 = load_geometry("qwen3-30b-a3b", overrides={"experts_per_token": 4})
    assert base.active_params - k4.active_params == 48 * 4 * base.expert_params
    assert k4.expected_unique_experts(1) == pytest.approx(4)


def test_shared_experts_and_tying_overrides() -> None:
    base = load_geometry("qwen3-30b-a3b")
    s = load_geometry("qwen3-30b-a3b", overrides={"shared_experts": 1})
    assert s.shared_experts == 1
    assert s.active_params - base.active_params == 48 * base.expert_params
    assert s.dense_weight_bytes - base.dense_weight_bytes == 48 * base.expert_bytes
    t = load_geometry("qwen3-30b-a3b", overrides={"tied_embeddings": "true"})
    assert t.tied_embeddings
    assert base.total_params - t.total_params == base.lm_head_params


def test_experts_override_turns_a_dense_config_into_moe() -> None:
    g = load_geometry("llama-3.1-8b", overrides={"experts": 8, "experts_per_token": 2})
    assert (g.moe_layers, g.experts, g.expert_params) == (32, 8, 3 * 4096 * 14336)
    # Mixtral's layout exactly (it shares Llama-3-8B's layer shapes), with Llama's vocabulary
    mixtral = load_geometry("mixtral-8x7b")
    assert g.total_params == mixtral.total_params + 2 * (128256 - 32000) * 4096
    assert g.active_params == mixtral.active_params + 2 * (128256 - 32000) * 4096


def test_output_overrides_replace_values_as_given() -> None:
    g = load_geometry(
        "llama-3.1-8b",
        overrides={"total_params": "8.1e9", "dense_weight_bytes": 1_000, "name": "mine"},
    )
    assert g.total_params == 8_100_000_000
    assert g.dense_weight_bytes == 1_000
    assert g.name == "mine"
    assert g.weight_bytes_per_step(1) == 1_000
    assert any("set by hand" in n and "total_params" in n for n in g.notes)


def test_dtype_overrides_via_mapping() -> None:
    g = load_geometry("llama-3.1-8b", overrides={"kv_dtype": "fp8", "weight_dtype": "fp8"})
    assert (g.kv_dtype, g.weight_dtype) == ("fp8", "fp8")
    assert g.kv_bytes_per_token_full_context == 64 * 1024


def test_kv_bytes_override_keeps_groups_consistent() -> None:
    g = load_geometry("gpt-oss-20b", overrides={"kv_bytes_per_token": 1000})
    assert [(k.kind, k.layers, k.bytes_per_token, k.window) for k in g.kv_groups] == [
        ("full", 12, 1000, None),
        ("sliding", 12, 24576, 128),
    ]
    assert g.kv_bytes_read(10) == 10 * 1000 + 10 * 24576
    mla = load_geometry("deepseek-v3", overrides={"kv_bytes_per_token": 61 * 656})
    assert mla.kv_groups == (KVGroup("mla", 61, 61 * 656),)


def test_kv_groups_override_from_json_text() -> None:
    text = (
        '[{"kind": "full", "layers": 4, "bytes_per_token": 100},'
        ' {"kind": "sliding", "layers": 4, "bytes_per_token": 50, "window": 8}]'
    )
    g = load_geometry("llama-3.1-8b", overrides={"kv_groups": text})
    assert g.kv_bytes_per_token_full_context == 100
    assert g.kv_bytes_read(20) == 20 * 100 + 8 * 50
    with pytest.raises(GeometryError, match="disagrees"):
        load_geometry("llama-3.1-8b", overrides={"kv_groups": text, "kv_bytes_per_token": 5})


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"layers": 0}, "layers=0: must be a whole number ≥ 1"),
        ({"layers": "many"}, "must be a whole number"),
        ({"total_params": -5}, "≥ 1"),
        ({"experts": 1.5}, "must be a whole number"),
        ({"expert_bytes": True}, "must be a whole number"),
        ({"tied_embeddings": "perhaps"}, "must be true or false"),
        ({"kv_dtype": "int4"}, "kv dtype 'int4' is not supported"),
        ({"weight_dtype": "fp6"}, "unknown weight dtype"),
        ({"nonsense": 1}, "unknown override 'nonsense'"),
        ({"notes": "x"}, "unknown override 'notes'"),
        ({"name": " "}, "must not be empty"),
        ({"config.": 1}, "needs a key name"),
        ({"kv_groups": "[{}]"}, "kind must be one of"),
        ({"kv_groups": '[{"kind": "sliding", "layers": 2, "bytes_per_token": 1}]'}, "window"),
        ({"kv_groups": "7"}, "must be a list"),
        ({"moe_layers": 99}, "moe_layers \\(99\\) exceeds layers"),
        ({"experts_per_token": 200}, "200 experts per token but only 128"),
        ({"active_params": 10**13}, "active_params .* exceeds total_params"),
    ],
)
def test_bad_overrides(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(GeometryError, match=match) as info:
        load_geometry("qwen3-30b-a3b", overrides=overrides)
    assert "\n" not in str(info.value)


def test_config_key_override_parses_json_values() -> None:
    g = load_geometry("qwen3-30b-a3b", overrides={"config.mlp_only_layers": "[0, 1]"})
    assert g.moe_layers == 46
    # the two dense layers use intermediate_size (6144), the key Qwen3-MoE otherwise ignores
    base = load_geometry("qwen3-30b-a3b")
    dense_mlp, moe_block = 3 * 2048 * 6144, 128 * 2048 + 128 * base.expert_params
    assert g.total_params - base.total_params == 2 * (dense_mlp - moe_block)
