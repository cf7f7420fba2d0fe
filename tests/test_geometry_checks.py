"""config.json consistency checks: every impossible config is one line naming the
field and the fix; a fuzz over mutated bundled configs finds no other exception."""

from __future__ import annotations

import copy
import importlib.resources
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwatt.errors import GeometryError
from tokenwatt.geometry import geometry_from_config, list_presets


def preset(name: str) -> dict[str, Any]:
    root = importlib.resources.files("tokenwatt.geometry") / "presets"
    for entry in root.iterdir():
        if entry.name.lower() == f"{name}.json":
            data: dict[str, Any] = json.loads(entry.read_text("utf-8"))
            return data
    raise AssertionError(name)


def error_of(cfg: dict[str, Any], **kw: Any) -> str:
    with pytest.raises(GeometryError) as info:
        geometry_from_config(cfg, name="t", **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def llama(**changes: Any) -> dict[str, Any]:
    cfg = preset("llama-3.1-8b")
    cfg.update(changes)
    return cfg


def test_more_kv_heads_than_heads_is_refused() -> None:
    # 256 KV heads over 32 query heads would claim 32× Llama-3.1-8B's real 128 KiB per token
    msg = error_of(llama(num_key_value_heads=256))
    assert "num_key_value_heads 256 does not divide num_attention_heads 32" in msg
    assert "--set config.num_key_value_heads=N" in msg


def test_kv_heads_that_do_not_divide_the_heads_are_refused() -> None:
    msg = error_of(llama(num_key_value_heads=5))
    assert "num_key_value_heads 5 does not divide" in msg


def test_kv_heads_that_divide_pass() -> None:
    for kv in (1, 2, 4, 8, 16, 32):
        g = geometry_from_config(llama(num_key_value_heads=kv), name="t")
        # 2 (K, V) × 32 layers × kv heads × 128 × 2 B
        assert g.kv_bytes_per_token_full_context == 2 * 32 * kv * 128 * 2


def test_zero_experts_with_top2_routing_is_refused() -> None:
    cfg = preset("mixtral-8x7b-v0.1")
    cfg["num_local_experts"] = 0
    msg = error_of(cfg)
    assert "num_experts_per_tok is 2 but num_local_experts is missing or 0" in msg
    assert "--set experts=N" in msg


def test_missing_expert_count_with_routing_is_refused() -> None:
    cfg = preset("mixtral-8x7b-v0.1")
    del cfg["num_local_experts"]
    assert "num_experts_per_tok is 2" in error_of(cfg)


def test_forcing_a_dense_count_is_allowed() -> None:
    cfg = preset("mixtral-8x7b-v0.1")
    del cfg["num_local_experts"]
    g = geometry_from_config(cfg, name="t", overrides={"experts": 0})
    assert not g.is_moe
    # dense: 32 layers × (attention 4096·(4096+1024+1024+4096) + 3·4096·14336 + 2·4096)
    # + 2 × 32000·4096 embeddings/head + 4096 final norm
    per_layer = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096
    assert g.total_params == 32 * per_layer + 2 * 32000 * 4096 + 4096


def test_more_experts_per_token_than_experts_is_refused() -> None:
    cfg = preset("mixtral-8x7b-v0.1")
    cfg["num_experts_per_tok"] = 9
    assert "9 experts per token but only 8 experts" in error_of(cfg)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("num_attention_heads", 2**63, "num_attention_heads 9223372036854775808 is beyond"),
        ("vocab_size", 10**40, "vocab_size 10000000000000000000000000000000000000000 is beyond"),
        ("hidden_size", -4096, "hidden_size must be ≥ 1, got -4096"),
        ("hidden_size", 0, "hidden_size must be ≥ 1, got 0"),
        ("num_hidden_layers", 0, "num_hidden_layers must be ≥ 1"),
        ("intermediate_size", 14336.5, "intermediate_size must be an integer, got 14336.5"),
        ("vocab_size", "128256", "vocab_size must be an integer, got '128256'"),
        ("num_attention_heads", True, "num_attention_heads must be an integer, got True"),
        ("num_key_value_heads", False, "num_key_value_heads must be an integer, got False"),
        ("hidden_size", float("nan"), "hidden_size must be an integer"),
        ("hidden_size", float("inf"), "hidden_size must be an integer"),
        ("head_dim", 2**20, "head_dim 1048576 is beyond"),
        ("sliding_window", 2**50, "sliding_window 1125899906842624 is beyond"),
        ("tie_word_embeddings", "no", "tie_word_embeddings must be true or false"),
    ],
)
def test_out_of_bounds_and_mistyped_sizes(key: str, value: Any, fragment: str) -> None:
    msg = error_of(llama(**{key: value}))
    assert fragment in msg
    assert key in msg


def test_out_of_bounds_error_names_the_fix() -> None:
    msg = error_of(llama(vocab_size=10**40))
    assert "--set config.vocab_size=N" in msg
    assert len(msg) < 400


def test_huge_shared_expert_count_is_refused_before_any_loop() -> None:
    cfg = preset("deepseek-v3")
    cfg["n_shared_experts"] = 2**31
    assert "n_shared_experts" in error_of(cfg)


# --- fuzz: drop, alter or retype keys of the bundled configs ---------------------------

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 3, 7, 64, 128, 4096, 2**31, 2**63, 10**40]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-3, max_value=100), max_size=4),
    st.lists(st.text(max_size=20), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
    st.sampled_from(
        [
            "full_attention",
            "sliding_attention",
            "bfloat16",
            "fp8",
            "mxfp4",
            "noaux_tc",
            "mamba",
            "llama",
            "deepseek_v3",
        ]
    ),
)


def _paths(cfg: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every key path, one level into nested objects (text_config, quantization_config)."""
    out: list[tuple[str, ...]] = []
    for key, value in cfg.items():
        out.append((key,))
        if isinstance(value, dict):
            out.extend((key, sub) for sub in value)
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    cfg = copy.deepcopy(preset(draw(st.sampled_from(list_presets()))))
    if draw(st.booleans()):  # a multimodal wrapper: the language model under text_config
        cfg = {"model_type": "wrapper", "text_config": cfg}
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(cfg)
        op = draw(st.sampled_from(["drop", "set", "add"]))
        if op == "add" or not paths:
            key = draw(
                st.sampled_from(
                    [
                        "num_key_value_heads",
                        "num_experts",
                        "num_experts_per_tok",
                        "head_dim",
                        "layer_types",
                        "sliding_window",
                        "kv_lora_rank",
                        "moe_layers",
                        "text_config",
                        "quantization_config",
                        "n_shared_experts",
                        "num_nextn_predict_layers",
                        "attention_chunk_size",
                        "ssm_cfg",
                    ]
                )
            )
            cfg[key] = draw(_VALUES)
            continue
        path = draw(st.sampled_from(paths))
        parent = cfg if len(path) == 1 else cfg[path[0]]
        if op == "drop":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(_VALUES)
    return cfg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=mutated())
def test_mutated_configs_load_or_fail_in_one_line(cfg: dict[str, Any]) -> None:
    try:
        g = geometry_from_config(cfg, name="fuzz")
    except GeometryError as exc:
        msg = str(exc)
        assert msg.strip(), "empty error"
        assert "\n" not in msg, msg
        assert len(msg) < 1000, msg
        return
    # what loads is a geometry whose figures are plausible integers
    assert 0 < g.active_params <= g.total_params
    assert g.kv_bytes_per_token_full_context >= 0
    assert all(k.bytes_per_token > 0 and k.layers > 0 for k in g.kv_groups)
    json.dumps(g.to_dict())


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"shared_experts": 2_000_000_000}, "override shared_experts=2000000000 is out of range"),
        ({"experts": 10**9}, "override experts=1000000000 is out of range"),
        ({"experts_per_token": 10**9}, "override experts_per_token=1000000000 is out of range"),
    ],
)
def test_overrides_are_held_to_the_same_bounds(overrides: dict[str, Any], fragment: str) -> None:
    # a shared-expert count of 2e9 used to loop 2e9 times
    msg = error_of(preset("deepseek-v3"), overrides=overrides)
    assert fragment in msg
