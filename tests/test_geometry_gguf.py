"""GGUF geometry: files written here with the gguf package (zero-filled tensors of real ggml
types), byte counts checked against hand calculations from the ggml block sizes:
Q4_K 256 elements / 144 bytes, Q6_K 256 / 210, Q8_0 32 / 34, F16 2 bytes, F32 4 bytes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from tokenwatt.errors import GeometryError  # noqa: E402
from tokenwatt.geometry import load_geometry  # noqa: E402
from tokenwatt.geometry.gguf import geometry_from_gguf  # noqa: E402

Q = gguf.GGMLQuantizationType
BLOCK_BYTES = {Q.Q4_K: (256, 144), Q.Q6_K: (256, 210), Q.Q8_0: (32, 34)}


def _add(w: gguf.GGUFWriter, name: str, shape: tuple[int, ...], qtype: Q) -> None:
    """A zero tensor of numpy ``shape`` (last axis = ggml row) stored as ``qtype``."""
    if qtype == Q.F32:
        w.add_tensor(name, np.zeros(shape, dtype=np.float32))
    elif qtype == Q.F16:
        w.add_tensor(name, np.zeros(shape, dtype=np.float16))
    else:
        per, nbytes = BLOCK_BYTES[qtype]
        byte_shape = (*shape[:-1], shape[-1] // per * nbytes)
        w.add_tensor(name, np.zeros(byte_shape, dtype=np.uint8), raw_dtype=qtype)


def _write(
    path: Path, arch: str, meta: dict[str, int], tensors: list[tuple[str, tuple[int, ...], Q]]
) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        w.add_uint32(f"{arch}.{key}", value)
    for name, shape, qtype in tensors:
        _add(w, name, shape, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


H, FF, VOCAB = 256, 512, 1024  # hidden, MLP width, vocabulary; 4 heads of 64, 2 KV heads


def _dense(tmp_path: Path, tied: bool = False, sliding: int | None = None) -> Path:
    meta = {
        "block_count": 2,
        "embedding_length": H,
        "attention.head_count": 4,
        "attention.head_count_kv": 2,
        "context_length": 4096,
    }
    if sliding:
        meta["attention.sliding_window"] = sliding
    t: list[tuple[str, tuple[int, ...], Q]] = [
        ("token_embd.weight", (VOCAB, H), Q.Q8_0),
        ("output_norm.weight", (H,), Q.F32),
    ]
    if not tied:
        t.append(("output.weight", (VOCAB, H), Q.Q6_K))
    for i in range(2):
        t += [
            (f"blk.{i}.attn_norm.weight", (H,), Q.F32),
            (f"blk.{i}.attn_q.weight", (H, H), Q.Q4_K),
            (f"blk.{i}.attn_k.weight", (128, H), Q.Q4_K),
            (f"blk.{i}.attn_v.weight", (128, H), Q.Q6_K),
            (f"blk.{i}.attn_output.weight", (H, H), Q.F16),
            (f"blk.{i}.ffn_norm.weight", (H,), Q.F32),
            (f"blk.{i}.ffn_gate.weight", (FF, H), Q.Q4_K),
            (f"blk.{i}.ffn_up.weight", (FF, H), Q.Q4_K),
            (f"blk.{i}.ffn_down.weight", (H, FF), Q.Q6_K),
        ]
    return _write(
        tmp_path / ("tied.gguf" if tied else "dense.gguf"),
        "llama" if not sliding else "gemma3",
        meta,
        t,
    )


# hand calculation, one layer: norms 2 × 256 × 4 = 2048; q 65536/256×144 = 36864;
# k 32768/256×144 = 18432; v 32768/256×210 = 26880; o 65536 × 2 = 131072;
# gate, up 131072/256×144 = 73728 each; down 131072/256×210 = 107520
LAYER_BYTES = 2048 + 36864 + 18432 + 26880 + 131072 + 73728 + 73728 + 107520
LAYER_PARAMS = 2 * 256 + 65536 + 32768 + 32768 + 65536 + 3 * 131072
EMBD_BYTES = 262144 // 32 * 34  # Q8_0: 278528
HEAD_BYTES = 262144 // 256 * 210  # Q6_K: 215040


def test_dense_bytes_and_params_match_hand_count(tmp_path: Path) -> None:
    g = geometry_from_gguf(_dense(tmp_path))
    assert g.total_params == 2 * LAYER_PARAMS + 262144 + 256 + 262144
    assert g.stored_weight_bytes == 2 * LAYER_BYTES + EMBD_BYTES + 1024 + HEAD_BYTES
    # a decode step reads all but the embedding table: layers, final norm, Q6_K head
    assert g.dense_weight_bytes == 2 * LAYER_BYTES + 1024 + HEAD_BYTES
    assert g.weight_bytes_per_step(8) == g.dense_weight_bytes
    assert not g.tied_embeddings and g.lm_head_params == 262144
    assert g.active_params == g.total_params and not g.is_moe
    # f16 KV (llama-server's default): 2 layers × (K + V) × 2 heads × 64 × 2 bytes
    assert g.kv_bytes_per_token_full_context == 2 * 2 * 2 * 64 * 2
    assert g.kv_dtype == "f16"


def test_tied_head_is_read_at_the_embeddings_stored_type(tmp_path: Path) -> None:
    g = geometry_from_gguf(_dense(tmp_path, tied=True))
    assert g.tied_embeddings
    assert g.dense_weight_bytes == 2 * LAYER_BYTES + 1024 + EMBD_BYTES  # Q8_0, not 2 B/param
    assert g.total_params == 2 * LAYER_PARAMS + 262144 + 256


def test_quantized_kv_cache_type_counts_blocks(tmp_path: Path) -> None:
    g = load_geometry(_dense(tmp_path), kv_dtype="q8_0")
    # per layer K row 128 elements = 4 Q8_0 blocks of 34 bytes; same for V
    assert g.kv_bytes_per_token_full_context == 2 * 2 * 4 * 34
    with pytest.raises(GeometryError, match=r"llama\.cpp cache type"):
        load_geometry(_dense(tmp_path), kv_dtype="fp8")


def test_sliding_window_layers_follow_the_architecture_period(tmp_path: Path) -> None:
    g = geometry_from_gguf(_dense(tmp_path, sliding=64))
    # gemma3: every 6th layer global; with 2 layers both are sliding
    assert [(k.kind, k.layers, k.window) for k in g.kv_groups] == [("sliding", 2, 64)]
    assert g.kv_bytes_read(1000) == 2 * 2 * 64 * 2 * 2 * 64


def test_moe_experts_counted_per_expert(tmp_path: Path) -> None:
    meta = {
        "block_count": 2,
        "embedding_length": H,
        "attention.head_count": 4,
        "attention.head_count_kv": 2,
        "expert_count": 4,
        "expert_used_count": 2,
    }
    t: list[tuple[str, tuple[int, ...], Q]] = [
        ("token_embd.weight", (VOCAB, H), Q.Q8_0),
        ("output_norm.weight", (H,), Q.F32),
        ("output.weight", (VOCAB, H), Q.Q6_K),
    ]
    for i in range(2):
        t += [
            (f"blk.{i}.attn_norm.weight", (H,), Q.F32),
            (f"blk.{i}.attn_q.weight", (H, H), Q.Q4_K),
            (f"blk.{i}.attn_k.weight", (128, H), Q.Q4_K),
            (f"blk.{i}.attn_v.weight", (128, H), Q.Q6_K),
            (f"blk.{i}.attn_output.weight", (H, H), Q.F16),
            (f"blk.{i}.ffn_norm.weight", (H,), Q.F32),
            (f"blk.{i}.ffn_gate_inp.weight", (4, H), Q.F32),
            (f"blk.{i}.ffn_gate_exps.weight", (4, 128, H), Q.Q4_K),
            (f"blk.{i}.ffn_up_exps.weight", (4, 128, H), Q.Q4_K),
            (f"blk.{i}.ffn_down_exps.weight", (4, H, 128), Q.Q8_0),
        ]
    g = geometry_from_gguf(_write(tmp_path / "moe.gguf", "qwen3moe", meta, t))
    # one expert of one layer: gate, up 32768/256×144 = 18432 each; down 32768/32×34 = 34816
    assert g.expert_bytes == 18432 + 18432 + 34816
    assert g.expert_params == 3 * 32768
    assert (g.moe_layers, g.experts, g.experts_per_token) == (2, 4, 2)
    attn = 2048 + 36864 + 18432 + 26880 + 131072 + 4 * H * 4  # norms, q k v o, router
    assert g.dense_weight_bytes == 2 * attn + 1024 + HEAD_BYTES
    assert (
        g.total_params
        == 2 * (512 + 65536 + 65536 + 65536 + 1024 + 4 * 3 * 32768) + 2 * 262144 + 256
    )
    assert g.active_params == g.total_params - 2 * 2 * 3 * 32768  # 2 of 4 experts idle per layer
    # W(1) = dense + 2 layers × E[distinct | B=1] (= k = 2) × one expert
    assert g.weight_bytes_per_step(1) == pytest.approx(
        g.dense_weight_bytes + 2 * 2 * g.expert_bytes
    )


def test_not_a_gguf_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(GeometryError, match="not a readable GGUF"):
        load_geometry(bad)
    with pytest.raises(GeometryError, match="no such GGUF"):
        load_geometry(tmp_path / "absent.gguf")


def test_cli_geometry_reads_a_gguf(tmp_path: Path) -> None:
    path = _dense(tmp_path, tied=True)
    env = {**os.environ}
    out = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "geometry", str(path), "--json"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f'"dense_weight_bytes": {2 * LAYER_BYTES + 1024 + EMBD_BYTES}' in out.stdout


GEMMA = Path(
    os.environ.get("TOKENWATT_GGUF", "~/.cache/tokenwatt-ci/models/gemma-3-270m-q4_k_m.gguf")
).expanduser()
# The file .ci/setup-realengine installs, pinned by its SHA-256 there, and the gguf package's
# own counts for it: 236 tensors, sum of n_elements and of n_bytes over ``GGUFReader.tensors``
# (the reader takes tens of seconds on this file, so the default suite compares with these
# and ``test_gemma3_270m_file_against_the_gguf_reader`` re-reads them live in the slow run).
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_READER_ELEMENTS = 268_098_176  # also the published "270M" count
GEMMA_READER_BYTES = 246_587_904
needs_gemma = pytest.mark.skipif(
    not GEMMA.is_file(), reason="Gemma 3 270M GGUF not installed (.ci/setup-realengine)"
)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


@needs_gemma
def test_gemma3_270m_file() -> None:
    if _sha256(GEMMA) != GEMMA_SHA256:
        pytest.skip(f"{GEMMA} is not the pinned file; the slow test reads it with GGUFReader")
    g = geometry_from_gguf(GEMMA)
    assert g.total_params == GEMMA_READER_ELEMENTS
    assert g.stored_weight_bytes == GEMMA_READER_BYTES
    assert g.tied_embeddings


@pytest.mark.slow
@pytest.mark.virtual
@needs_gemma
def test_gemma3_270m_file_against_the_gguf_reader() -> None:
    g = geometry_from_gguf(GEMMA)
    reader = gguf.GGUFReader(GEMMA)
    # independent truth: the gguf package's own per-tensor element and byte counts
    assert g.total_params == sum(int(t.n_elements) for t in reader.tensors)
    assert g.stored_weight_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    assert g.tied_embeddings
    assert g.total_params == pytest.approx(268e6, rel=0.01)  # "270M": 268,098,176 published
