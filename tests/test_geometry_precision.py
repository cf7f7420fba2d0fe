"""Weight precision: quantization_config schemes, dtype fallbacks and --weights, by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.errors import GeometryError
from tokenwatt.geometry import geometry_from_config, load_geometry
from tokenwatt.geometry.dtypes import kv_bytes_per_element, weight_format
from tokenwatt.geometry.precision import ModuleMatcher

PRESETS = Path(__file__).resolve().parents[1] / "src" / "tokenwatt" / "geometry" / "presets"
LLAMA: dict[str, Any] = json.loads((PRESETS / "Llama-3.1-8B.json").read_text("utf-8"))
H, L, FF, V = 4096, 32, 14336, 128256
SHAPES = [(H, H), (1024, H), (1024, H), (H, H), (FF, H), (FF, H), (H, FF)]  # q k v o gate up down


def _dense_bytes(matrix_bytes: Any, plain: int = 2) -> int:
    """Llama-3.1-8B dense bytes when every layer linear takes ``matrix_bytes(rows, cols)``."""
    per_layer = sum(matrix_bytes(r, c) for r, c in SHAPES) + plain * 2 * H
    return L * per_layer + plain * H + 2 * V * H


def test_gptq_int4_group_scales_and_zero_points() -> None:
    cfg = LLAMA | {
        "torch_dtype": "float16",
        "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True},
    }
    g = geometry_from_config(cfg, name="x")
    assert g.weight_dtype == "int4"

    def int4(rows: int, cols: int) -> int:
        # 4-bit weights + per (row, 128-group): FP16 scale + packed 4-bit zero point
        return rows * cols // 2 + math.ceil(rows * (cols // 128) * 2.5)

    assert g.dense_weight_bytes == _dense_bytes(int4)
    assert g.total_params == 8_030_261_248  # precision never changes the count


def test_awq_reads_w_bit_and_q_group_size() -> None:
    qc = {"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": False}
    g = geometry_from_config(LLAMA | {"quantization_config": qc}, name="x")
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: r * c // 2 + r * (c // 64) * 2)


def test_compressed_tensors_fp8_channel_with_ignore() -> None:
    qc = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            }
        },
        "ignore": ["lm_head", "re:.*self_attn.*"],
    }
    g = geometry_from_config(LLAMA | {"quantization_config": qc}, name="x")
    assert g.weight_dtype == "fp8"

    def fmt(rows: int, cols: int) -> int:
        attention = (rows, cols) in SHAPES[:4]  # ignored: stays bf16
        return 2 * rows * cols if attention else rows * cols + 4 * rows

    assert g.dense_weight_bytes == _dense_bytes(fmt)


def test_compressed_tensors_w4a16_group() -> None:
    qc = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "g": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                            "symmetric": True},
            }
        },
    }  # fmt: skip
    g = geometry_from_config(LLAMA | {"quantization_config": qc}, name="x")
    assert g.weight_dtype == "int4"
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: r * c // 2 + r * (c // 128) * 2)


def test_compressed_tensors_nvfp4() -> None:
    qc = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
    }
    g = geometry_from_config(LLAMA | {"quantization_config": qc}, name="x")
    assert g.weight_dtype == "nvfp4"
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: r * c // 2 + r * c // 16)


def test_fp8_without_block_size_is_per_tensor() -> None:
    g = geometry_from_config(LLAMA | {"quantization_config": {"quant_method": "fp8"}}, name="x")
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: r * c + 4)
    assert any("per tensor" in n for n in g.notes)


def test_modelopt_hf_quant_config_in_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA), "utf-8")
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"},
                    "quantization": {"quant_algo": "FP8", "exclude_modules": ["lm_head"]}}),
        "utf-8",
    )  # fmt: skip
    g = load_geometry(tmp_path)
    assert g.weight_dtype == "fp8"
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: r * c + 4)


def test_unsupported_method_is_overridable() -> None:
    cfg = LLAMA | {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}
    with pytest.raises(GeometryError, match="--set weight_dtype=DTYPE"):
        geometry_from_config(cfg, name="x")
    g = geometry_from_config(cfg, name="x", weight_dtype="int4")
    assert g.weight_dtype == "int4"


def test_weights_override_applies_to_every_linear_but_not_head_or_norms() -> None:
    g = geometry_from_config(LLAMA, name="x", weight_dtype="int8")
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: r * c + r * (c // 128) * 2)
    fp32 = geometry_from_config(LLAMA, name="x", weight_dtype="fp32")
    # every weight at 4 bytes, but the LM head is always counted at 2 per step
    assert fp32.dense_weight_bytes == _dense_bytes(lambda r, c: 4 * r * c, plain=4)
    assert fp32.stored_weight_bytes == 4 * fp32.total_params


def test_fp32_config_is_counted_at_two_bytes_with_a_note() -> None:
    g = geometry_from_config(LLAMA | {"torch_dtype": "float32"}, name="x")
    assert g.weight_dtype == "bf16"
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: 2 * r * c)
    assert any("float32" in n for n in g.notes)


def test_mxfp4_override_on_dense_model_quantizes_linears() -> None:
    g = geometry_from_config(LLAMA, name="x", weight_dtype="mxfp4")
    assert g.dense_weight_bytes == _dense_bytes(lambda r, c: r * c // 2 + r * c // 32)


def test_gpt_oss_bf16_override_dequantizes_experts() -> None:
    g = load_geometry("gpt-oss-20b", weight_dtype="bf16")
    assert g.expert_bytes == 2 * g.expert_params
    assert g.stored_weight_bytes == 2 * g.total_params


def test_deepseek_bf16_override() -> None:
    g = load_geometry("deepseek-v3", weight_dtype="bf16")
    routed = g.moe_layers * g.experts * g.expert_params
    assert g.dense_weight_bytes == 2 * (g.total_params - routed - g.embedding_params)
    assert any("counted as bf16" in n for n in g.notes)


def test_same_dtype_override_keeps_checkpoint_details() -> None:
    a = load_geometry("qwen3-30b-a3b-fp8", weight_dtype="fp8")
    b = load_geometry("qwen3-30b-a3b-fp8")
    assert a == b


def test_weight_format_edges() -> None:
    fp8 = weight_format("fp8")
    assert fp8.matrix_bytes(576, 7168) == 576 * 7168 + 4 * 5 * 56  # partial 128-row tile
    per_row = weight_format("int4", group_size=-1)
    assert per_row.matrix_bytes(10, 1000) == 5000 + 10 * 2
    assert kv_bytes_per_element("FP8_E5M2") == 1
    with pytest.raises(GeometryError, match="kv dtype 'int4' is not supported"):
        kv_bytes_per_element("int4")


def test_module_matcher() -> None:
    m = ModuleMatcher(["lm_head", "model.layers.*.self_attn", "re:.*mlp\\.gate$",
                       "model.layers.3.mlp.gate"])  # fmt: skip
    assert m.matches("lm_head")
    assert m.matches("model.layers.7.self_attn.q_proj")
    assert m.matches("model.layers.7.mlp.gate")
    assert not m.matches("model.layers.7.mlp.gate_proj")
    assert not m.matches("model.layers.7.mlp.experts.up_proj")
    assert not ModuleMatcher(None)
