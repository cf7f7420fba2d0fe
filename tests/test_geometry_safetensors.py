"""Weight bytes from safetensors headers the tests write (8-byte length + JSON, no tensor data),
checked against hand calculations of each tensor's stored bytes."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from tokenwatt.errors import GeometryError
from tokenwatt.geometry import load_geometry

SIZE = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "U8": 1}
H, FF, V = 64, 128, 256  # hidden, MLP, vocab; 4 heads of 16, 2 KV heads


def write_header(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file with its header and room for its tensors (a sparse file: the reader
    never looks past the header, but checks that every tensor lies inside the file)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = math.prod(shape) * SIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with path.open("r+b") as f:
        f.truncate(8 + len(raw) + offset)


def config(folder: Path, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "model_type": "llama",
        "hidden_size": H,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": FF,
        "vocab_size": V,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **extra,
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


LINEARS = {  # name: (out rows, in cols)
    "self_attn.q_proj": (H, H),
    "self_attn.k_proj": (32, H),
    "self_attn.v_proj": (32, H),
    "self_attn.o_proj": (H, H),
    "mlp.gate_proj": (FF, H),
    "mlp.up_proj": (FF, H),
    "mlp.down_proj": (H, FF),
}


def llama_tensors(
    linear_dtype: str = "BF16", scales: bool = False
) -> dict[str, tuple[str, list[int]]]:
    t: dict[str, tuple[str, list[int]]] = {
        "model.embed_tokens.weight": ("BF16", [V, H]),
        "model.norm.weight": ("BF16", [H]),
        "lm_head.weight": ("BF16", [V, H]),
    }
    for i in range(2):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ("BF16", [H])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [H])
        for name, (rows, cols) in LINEARS.items():
            t[p + name + ".weight"] = (linear_dtype, [rows, cols])
            if scales:  # one FP32 scale per 128×128 block: all of these fit in one block
                t[p + name + ".weight_scale_inv"] = ("F32", [1, 1])
    return t


# hand count, bf16: linears 4096 + 2048 + 2048 + 4096 + 3 × 8192 = 36864 params per layer
LAYER_BF16 = 36864 * 2 + 2 * H * 2  # 73984 bytes with the two norms
HEAD = V * H * 2  # 32768


def test_bf16_headers_match_config_arithmetic(tmp_path: Path) -> None:
    folder = config(tmp_path / "m")
    write_header(folder / "model.safetensors", llama_tensors())
    g = load_geometry(folder)
    assert g.dense_weight_bytes == 2 * LAYER_BF16 + H * 2 + HEAD  # 180864
    assert g.stored_weight_bytes == 2 * LAYER_BF16 + H * 2 + 2 * HEAD
    assert any("safetensors header" in n for n in g.notes)
    assert not any("config.json arithmetic" in n for n in g.notes)  # they agree


def test_fp8_with_block_scales(tmp_path: Path) -> None:
    folder = config(
        tmp_path / "fp8",
        quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]},
    )
    write_header(folder / "model.safetensors", llama_tensors("F8_E4M3", scales=True))
    g = load_geometry(folder)
    layer = 36864 + 7 * 4 + 2 * H * 2  # fp8 linears, 7 FP32 scales, bf16 norms: 37148
    assert g.dense_weight_bytes == 2 * layer + H * 2 + HEAD
    assert not any("config.json arithmetic" in n for n in g.notes)


def test_awq_packs_counted_as_stored(tmp_path: Path) -> None:
    folder = config(
        tmp_path / "awq",
        torch_dtype="float16",
        quantization_config={"quant_method": "awq", "bits": 4, "group_size": 64},
    )
    t = llama_tensors()
    for i in range(2):
        for name, (rows, cols) in LINEARS.items():
            p = f"model.layers.{i}.{name}."
            del t[p + "weight"]
            t[p + "qweight"] = ("I32", [cols, rows // 8])  # 8 int4 per int32
            t[p + "qzeros"] = ("I32", [cols // 64, rows // 8])
            t[p + "scales"] = ("F16", [cols // 64, rows])
    write_header(folder / "model.safetensors", t)
    g = load_geometry(folder)
    # per linear: in·out/2 + (in/64)·out/2 + (in/64)·out·2 bytes; Σ in·out = 36864 per layer
    # and Σ (in/64)·out = 64 + 32 + 32 + 64 + 128 + 128 + 128 = 576
    layer = 36864 // 2 + 576 // 2 + 576 * 2 + 2 * H * 2
    assert g.dense_weight_bytes == 2 * layer + H * 2 + HEAD


def test_moe_experts_and_shards_from_the_index(tmp_path: Path) -> None:
    folder = config(
        tmp_path / "moe",
        model_type="mixtral",
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    t = llama_tensors()
    for i in range(2):
        p = f"model.layers.{i}."
        for name in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            del t[p + name + ".weight"]
        t[p + "block_sparse_moe.gate.weight"] = ("BF16", [4, H])
        for e in range(4):
            q = p + f"block_sparse_moe.experts.{e}."
            t[q + "w1.weight"] = ("BF16", [FF, H])
            t[q + "w2.weight"] = ("BF16", [H, FF])
            t[q + "w3.weight"] = ("BF16", [FF, H])
    names = list(t)
    half = len(names) // 2
    shards = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for file, keys in shards.items():
        write_header(folder / file, {k: t[k] for k in keys})
    write_header(folder / "stray.safetensors", {"x.weight": ("BF16", [1000, 1000])})
    weight_map = {k: f for f, keys in shards.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    g = load_geometry(folder)
    assert g.expert_bytes == 3 * FF * H * 2  # one expert: 49152
    attn = (4096 + 2048 + 2048 + 4096) * 2 + 4 * H * 2 + 2 * H * 2  # + router, norms
    assert g.dense_weight_bytes == 2 * attn + H * 2 + HEAD  # the stray file is not in the index
    assert any("2 safetensors header(s)" in n for n in g.notes)


def test_mtp_and_vision_tensors_are_not_read_per_step(tmp_path: Path) -> None:
    folder = config(tmp_path / "mtp")
    t = llama_tensors()
    t["model.layers.2.mlp.gate_proj.weight"] = ("BF16", [FF, H])  # past num_hidden_layers
    t["vision_tower.patch_embed.weight"] = ("BF16", [H, 588])
    write_header(folder / "model.safetensors", t)
    g = load_geometry(folder)
    assert g.dense_weight_bytes == 2 * LAYER_BF16 + H * 2 + HEAD
    assert any("vision/audio tensors left out" in n for n in g.notes)


def test_disagreement_with_config_is_said(tmp_path: Path) -> None:
    folder = config(tmp_path / "odd")  # config says bf16, the file stores fp8 linears
    write_header(folder / "model.safetensors", llama_tensors("F8_E4M3"))
    g = load_geometry(folder)
    assert g.dense_weight_bytes == 2 * (36864 + 2 * H * 2) + H * 2 + HEAD
    note = next(n for n in g.notes if "config.json arithmetic" in n)
    assert "headers are used" in note


def test_weights_flag_keeps_config_arithmetic(tmp_path: Path) -> None:
    folder = config(tmp_path / "flag")
    write_header(folder / "model.safetensors", llama_tensors("F8_E4M3"))
    g = load_geometry(folder, weight_dtype="bf16")
    assert g.dense_weight_bytes == 2 * LAYER_BF16 + H * 2 + HEAD


def test_bad_header_is_one_line(tmp_path: Path) -> None:
    folder = config(tmp_path / "bad")
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(GeometryError, match="header is not JSON"):
        load_geometry(folder)
    (folder / "model.safetensors").write_bytes(b"abc")
    with pytest.raises(GeometryError, match="too short"):
        load_geometry(folder)
