"""Hostile model files: hand-built GGUF and safetensors headers that lie about their counts,
sizes and offsets. Each is refused in one line naming what is wrong (never a traceback, never
gigabytes of memory), and a multi-GB sparse GGUF is read from its header alone."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.gguf import geometry_from_gguf
from tokenwatt.geometry.safetensors import read_safetensors_header

U32, I32, F32T, STR, ARR = 4, 5, 6, 8, 9  # GGUF metadata value types
F32, Q8_0 = 0, 8  # ggml type ids


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, vtype: int, value: object) -> bytes:
    out = _s(key) + struct.pack("<I", vtype)
    if vtype == STR:
        return out + _s(str(value))
    if vtype == ARR:
        etype, items = value  # type: ignore[misc]
        body = b"".join(_s(i) for i in items) if etype == STR else b""
        if etype != STR:
            body = struct.pack(f"<{len(items)}i", *items)
        return out + struct.pack("<IQ", etype, len(items)) + body
    return out + struct.pack("<I" if vtype == U32 else "<i", value)


def gguf_bytes(
    meta: list[tuple[str, int, object]],
    tensors: list[tuple[str, list[int], int, int]],
    *,
    data_bytes: int | None = None,
    counts: tuple[int, int] | None = None,
) -> tuple[bytes, int]:
    """(header bytes, total file size): a GGUF v3 header by hand, data section sized to hold
    every tensor unless ``data_bytes`` says otherwise; ``counts`` overrides the header's."""
    n_t, n_kv = counts or (len(tensors), len(meta))
    head = b"GGUF" + struct.pack("<IQQ", 3, n_t, n_kv)
    head += b"".join(_kv(*m) for m in meta)
    for name, dims, ttype, offset in tensors:
        head += _s(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ttype, offset)
    start = -(-len(head) // 32) * 32
    need = max((o + _nbytes(d, t) for _, d, t, o in tensors), default=0)
    return head, start + (need if data_bytes is None else data_bytes)


def _nbytes(dims: list[int], ttype: int) -> int:
    n = 1
    for d in dims:
        n *= d
    return n * 4 if ttype == F32 else n // 32 * 34


def write(path: Path, head: bytes, size: int) -> Path:
    path.write_bytes(head)
    with path.open("r+b") as f:
        f.truncate(max(size, len(head)))  # sparse: no data written
    return path


H, VOCAB = 64, 256


def good_meta(**over: object) -> list[tuple[str, int, object]]:
    meta: dict[str, tuple[int, object]] = {
        "general.architecture": (STR, "llama"),
        "llama.block_count": (U32, 1),
        "llama.embedding_length": (U32, H),
        "llama.attention.head_count": (U32, 4),
        "llama.attention.head_count_kv": (U32, 2),
    }
    for key, value in over.items():
        meta[f"llama.{key}"] = (U32, value)
    return [(k, t, v) for k, (t, v) in meta.items()]


def good_tensors() -> list[tuple[str, list[int], int, int]]:
    embd = VOCAB * H // 32 * 34  # Q8_0
    return [
        ("token_embd.weight", [H, VOCAB], Q8_0, 0),
        ("blk.0.attn_q.weight", [H, H], F32, -(-embd // 32) * 32),
    ]


def test_hand_built_gguf_reads(tmp_path: Path) -> None:
    g = geometry_from_gguf(write(tmp_path / "ok.gguf", *gguf_bytes(good_meta(), good_tensors())))
    assert g.layers == 1
    assert g.stored_weight_bytes == VOCAB * H // 32 * 34 + H * H * 4


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        (good_meta(block_count=2**31), r"llama.block_count = 2147483648 is outside 1..10,000"),
        (good_meta(**{"attention.head_count": 0}), r"attention.head_count = 0 is outside"),
        (good_meta(expert_count=8, expert_used_count=0), r"expert_used_count = 0 is outside 1..8"),
        (good_meta(expert_count=8, expert_used_count=9), r"expert_used_count = 9 is outside"),
    ],
)
def test_implausible_metadata_is_one_line(tmp_path: Path, meta: list, match: str) -> None:
    path = write(tmp_path / "m.gguf", *gguf_bytes(meta, good_tensors()))
    with pytest.raises(GeometryError, match=match) as err:
        geometry_from_gguf(path)
    assert "\n" not in str(err.value)


def _tensor_case(kind: str) -> tuple[list[tuple[str, list[int], int, int]], int | None, str]:
    t = good_tensors()
    if kind == "past_end":
        return t, 100, r"tensor token_embd.weight \(Q8_0 × \[64, 256\] = 17408 bytes at offset 0\)"
    if kind == "zero_dim":
        return [t[0], ("blk.0.attn_q.weight", [H, 0], F32, t[1][3])], None, "a size is 0"
    if kind == "overlap":
        return [t[0], ("blk.0.attn_q.weight", [H, H], F32, 32)], None, "overlaps tensor"
    if kind == "misaligned":
        return [t[0], ("blk.0.attn_q.weight", [H, H], F32, t[1][3] + 4)], None, "not a multiple"
    if kind == "huge":
        return [t[0], ("blk.0.attn_q.weight", [2**40, 2**40], F32, 0)], 0, "above 2\\^44"
    if kind == "unknown_type":
        return [t[0], ("blk.0.attn_q.weight", [H, H], 99, t[1][3])], None, "ggml type 99"
    return [t[0], ("blk.0.attn_q.weight", [H] * 9, F32, 0)], 0, "9 dimensions"


@pytest.mark.parametrize(
    "kind", ["past_end", "zero_dim", "overlap", "misaligned", "huge", "unknown_type", "dims"]
)
def test_tensor_table_lies_are_one_line_naming_the_tensor(tmp_path: Path, kind: str) -> None:
    tensors, data_bytes, match = _tensor_case(kind)
    head, size = gguf_bytes(good_meta(), tensors, data_bytes=data_bytes)
    with pytest.raises(GeometryError, match=match) as err:
        geometry_from_gguf(write(tmp_path / f"{kind}.gguf", head, size))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("counts", "match"),
    [((2**40, 5), "claims 1099511627776 tensors"), ((2, 2**31), "2147483648 metadata entries")],
)
def test_claimed_counts_are_bounded(tmp_path: Path, counts: tuple[int, int], match: str) -> None:
    head, size = gguf_bytes(good_meta(), good_tensors(), counts=counts)
    with pytest.raises(GeometryError, match=match):
        geometry_from_gguf(write(tmp_path / "c.gguf", head, size))


def test_a_string_longer_than_the_file_ends_inside_the_header(tmp_path: Path) -> None:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**60) + b"x" * 200
    with pytest.raises(GeometryError, match="ends inside its header"):
        geometry_from_gguf(write(tmp_path / "s.gguf", head, len(head)))


_SPARSE_CHILD = """
import sys
from tokenwatt.geometry.gguf import geometry_from_gguf
g = geometry_from_gguf(sys.argv[1])
# VmHWM, not ru_maxrss: ru_maxrss keeps the forking parent's (pytest's) high-water mark
hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]
print(g.stored_weight_bytes, int(hwm[0].split()[1]) // 1024)
"""


def test_multi_gb_sparse_gguf_reads_its_header_only(tmp_path: Path) -> None:
    """An 8.6 GB file (sparse: its data never written) with a 200,000-string vocabulary: read
    in a child process, whose peak memory stays that of the interpreter and numpy (~40 MB),
    nowhere near the file's size."""
    vocab = [f"tok{i}" for i in range(200_000)]
    meta = [*good_meta(), ("tokenizer.ggml.tokens", ARR, (STR, vocab))]
    big = 2**31  # F32 elements: 8 GiB
    embd_end = -(-(VOCAB * H // 32 * 34) // 32) * 32
    tensors = [good_tensors()[0], ("blk.0.attn_q.weight", [H, big // H], F32, embd_end)]
    path = write(tmp_path / "big.gguf", *gguf_bytes(meta, tensors))
    assert path.stat().st_size > 8 * 2**30
    assert path.stat().st_blocks * 512 < 64 * 2**20  # really sparse
    out = subprocess.run(
        [sys.executable, "-c", _SPARSE_CHILD, str(path)], capture_output=True, text=True, check=True
    )
    stored, peak_mb = map(int, out.stdout.split())
    assert stored == VOCAB * H // 32 * 34 + big * 4
    assert peak_mb < 200, peak_mb


# ---- safetensors ---------------------------------------------------------------------------


def st_file(path: Path, header: object, *, raw: bytes | None = None, data: int = 0) -> Path:
    body = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body)
    with path.open("r+b") as f:
        f.truncate(8 + len(body) + data)
    return path


@pytest.mark.parametrize(
    ("entry", "data", "match"),
    [
        ({"dtype": "F32", "shape": [4], "data_offsets": [0, 1e400]}, 16, "holds Infinity"),
        ({"dtype": "F32", "shape": [4], "data_offsets": ["0", "16"]}, 16, "no valid data_offsets"),
        ({"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}, 16, r"\[-16, 0\] lie outside"),
        ({"dtype": "F32", "shape": [4], "data_offsets": [0, 10**15]}, 16, "lie outside the file"),
        ({"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}, 16, "F32 × \\[4\\] is 16 bytes"),
        ({"dtype": "Q9", "shape": [4], "data_offsets": [0, 16]}, 16, "not a safetensors dtype"),
        ({"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}, 16, "a size outside"),
        ({"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}, 16, "no valid shape"),
    ],
)
def test_safetensors_entry_lies_name_the_tensor(
    tmp_path: Path, entry: dict[str, object], data: int, match: str
) -> None:
    raw = json.dumps({"w": entry}).replace("1e+400", "Infinity").encode()
    with pytest.raises(GeometryError, match=match) as err:
        read_safetensors_header(st_file(tmp_path / "x.safetensors", None, raw=raw, data=data))
    assert "\n" not in str(err.value)
    assert "tensor w" in str(err.value) or "Infinity" in match


def test_safetensors_deep_nesting_and_overlap(tmp_path: Path) -> None:
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    raw = b'{"__metadata__": ' + deep + b"}"
    with pytest.raises(GeometryError, match="nests too deep"):
        read_safetensors_header(st_file(tmp_path / "d.safetensors", None, raw=raw))
    two = {
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    }
    with pytest.raises(GeometryError, match="tensor b overlaps tensor a"):
        read_safetensors_header(st_file(tmp_path / "o.safetensors", two, data=24))


def test_safetensors_header_longer_than_the_file(tmp_path: Path) -> None:
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", 50 * 2**20) + b"{}")
    with pytest.raises(GeometryError, match="claims 52428800 bytes; the file has 2"):
        read_safetensors_header(path)


# ---- fuzz: any header bytes → geometry or one line, in bounded memory -----------------------

_GOOD_HEAD, _GOOD_SIZE = gguf_bytes(good_meta(), good_tensors())
_FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _one_line_or_ok(fn: object, path: Path) -> None:
    tracemalloc.start()
    try:
        fn(path)  # type: ignore[operator]
    except GeometryError as exc:
        assert "\n" not in str(exc) and str(exc)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak


@_FUZZ
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_GOOD_HEAD) - 1), st.integers(0, 255)), max_size=8),
    cut=st.integers(0, len(_GOOD_HEAD)),
    big=st.sampled_from([None, 2**31, 2**63, 2**64 - 1]),
    at=st.integers(0, len(_GOOD_HEAD) - 8),
)
def test_fuzzed_gguf_headers(
    tmp_path: Path, edits: list[tuple[int, int]], cut: int, big: int | None, at: int
) -> None:
    head = bytearray(_GOOD_HEAD)
    for pos, value in edits:
        head[pos] = value
    if big is not None:
        head[at : at + 8] = struct.pack("<Q", big)
    path = write(tmp_path / "f.gguf", bytes(head[: max(cut, 24)]), _GOOD_SIZE)
    _one_line_or_ok(geometry_from_gguf, path)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@_FUZZ
@given(
    entries=st.dictionaries(
        st.text(max_size=8),
        st.fixed_dictionaries(
            {"dtype": st.sampled_from(["F32", "BF16", "F4", "X"]) | _JSON, "shape": _JSON},
            optional={"data_offsets": st.lists(_JSON, max_size=3)},
        )
        | _JSON,
        max_size=4,
    ),
    data=st.integers(0, 4096),
)
def test_fuzzed_safetensors_headers(tmp_path: Path, entries: dict[str, object], data: int) -> None:
    path = st_file(tmp_path / "f.safetensors", entries, data=data)
    _one_line_or_ok(read_safetensors_header, path)
