"""A GGUF file's header and tensor table, read by this project: bounded, header only.

Why not the ``gguf`` package's reader: it maps the whole file and builds a numpy view of every
tensor and every vocabulary string (10.5 CPU-seconds and 730 MB for a 253 MB Gemma 3 270M),
and it trusts every count it reads (a 300-byte file claiming 2^31 entries grew to 4.2 GB). The
geometry needs the metadata scalars and, per tensor, its name, shape, type and offset. This
reader walks the header once through a buffered file, skips what it does not keep (vocabulary
strings, long arrays) without holding it, bounds every count by ``geometry.bounds`` and by the
bytes the file actually has, and checks that every tensor's stored bytes (ggml type × shape)
lie inside the file without overlapping another's. Every refusal is one ``GeometryError`` line
naming the field or the tensor.

Layout (ggml's gguf.md, versions 2 and 3, little-endian): magic ``GGUF``, u32 version, u64
tensor count, u64 metadata count; each metadata entry a string key, u32 value type, value;
each tensor a string name, u32 dimension count, u64 dimensions, u32 ggml type, u64 offset
(relative to the data section, which starts at the header's end rounded up to
``general.alignment``, default 32). A string is a u64 length and UTF-8 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gguf import GGMLQuantizationType

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.bounds import (
    MAX_DIMS,
    MAX_LAYERS,
    MAX_TENSOR_ELEMENTS,
    MAX_TENSORS,
    MAX_VOCAB,
    shown,
)

__all__ = ["GGML_BLOCKS", "GgufTensor", "ggml_type_bytes", "read_gguf_header"]

# ggml type name → (elements per block, bytes per block); the same table as ggml's
# type_traits (and gguf.GGML_QUANT_SIZES), kept here so the counts are stated in this project,
# not only inherited.
GGML_BLOCKS: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "F64": (1, 8),
    "I8": (1, 1),
    "I16": (1, 2),
    "I32": (1, 4),
    "I64": (1, 8),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q8_0": (32, 34),
    "Q8_1": (32, 40),
    "Q2_K": (256, 84),
    "Q3_K": (256, 110),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
    "Q8_K": (256, 292),
    "IQ2_XXS": (256, 66),
    "IQ2_XS": (256, 74),
    "IQ3_XXS": (256, 98),
    "IQ1_S": (256, 50),
    "IQ4_NL": (32, 18),
    "IQ3_S": (256, 110),
    "IQ2_S": (256, 82),
    "IQ4_XS": (256, 136),
    "IQ1_M": (256, 56),
    "TQ1_0": (256, 54),
    "TQ2_0": (256, 66),
    "MXFP4": (32, 17),
}

_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
_MAX_METADATA = 2**16  # metadata entries (real files: a few dozen)
_MAX_KEY_BYTES = 2**10  # a metadata key or tensor name (ggml's own limit on names: 64)
_MAX_KEPT_STRING = 2**16  # longer strings (chat templates) are skipped, not kept
_MAX_STRING_ITEMS = 4 * MAX_VOCAB  # a string array: vocabulary, merges (largest real: ~10^6)
_STRING, _ARRAY = 8, 9
# metadata scalar type → struct format (little-endian)
_SCALARS: dict[int, str] = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
    12: "<d",
}  # fmt: skip


def ggml_type_bytes(type_name: str, elements: int, row: int) -> int:
    """Stored bytes of ``elements`` values of ggml type ``type_name`` in rows of ``row``."""
    key = type_name.upper()
    if key not in GGML_BLOCKS:
        raise GeometryError(f"GGUF tensor type {type_name} has no known block size")
    per_block, block_bytes = GGML_BLOCKS[key]
    if row % per_block:
        raise GeometryError(
            f"GGUF: a row of {row} elements is not a whole number of {key} blocks ({per_block})"
        )
    return elements // per_block * block_bytes


@dataclass(frozen=True, slots=True)
class GgufTensor:
    """One row of the tensor table: name, shape (ggml order: row length first), ggml type,
    and the offset of its bytes in the data section."""

    name: str
    shape: tuple[int, ...]
    type_name: str
    offset: int = 0

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return ggml_type_bytes(self.type_name, self.elements, self.shape[0] if self.shape else 1)


class _Cursor:
    """Sequential reads of a file's header; never past its end, never more than asked."""

    def __init__(self, f: IO[bytes], path: Path, size: int) -> None:
        self.f, self.path, self.size, self.pos = f, path, size, 0

    def fail(self, what: str) -> GeometryError:
        return GeometryError(f"{self.path}: GGUF {what}")

    def take(self, n: int, what: str) -> bytes:
        if n > self.size - self.pos:
            raise self.fail(f"ends inside its header ({what} at byte {self.pos} needs {n} bytes)")
        data = self.f.read(n)
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise self.fail(f"ends inside its header ({what} at byte {self.pos} needs {n} bytes)")
        self.f.seek(n, 1)
        self.pos += n

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, keep: int) -> str | None:
        """A GGUF string; None (skipped) when longer than ``keep`` bytes."""
        n = self.scalar("<Q", what)
        if n > keep:
            self.skip(n, what)
            return None
        return self.take(n, what).decode("utf-8", errors="replace")


def _value(c: _Cursor, vtype: int, key: str) -> Any:
    if vtype in _SCALARS:
        return c.scalar(_SCALARS[vtype], key)
    if vtype == _STRING:
        return c.string(key, _MAX_KEPT_STRING)
    if vtype != _ARRAY:
        raise c.fail(f"metadata {key} has unknown value type {vtype}")
    etype, count = c.scalar("<I", key), c.scalar("<Q", key)
    if etype == _STRING:
        if count > _MAX_STRING_ITEMS:
            raise c.fail(f"metadata {key} claims {count} strings (more than {_MAX_STRING_ITEMS})")
        for _ in range(count):  # vocabularies: walked, never kept
            c.skip(c.scalar("<Q", key), key)
        return None
    if etype not in _SCALARS:
        raise c.fail(f"metadata {key} is an array of type {etype} (nested arrays: not GGUF)")
    fmt = _SCALARS[etype]
    width = struct.calcsize(fmt)
    if count > MAX_LAYERS:  # per-layer arrays are kept; token scores and the like skipped
        c.skip(count * width, key)
        return None
    return list(struct.unpack(f"<{count}{fmt[1]}", c.take(count * width, key)))


def _tensor(c: _Cursor, index: int) -> GgufTensor:
    raw_name = c.string(f"tensor {index}'s name", _MAX_KEY_BYTES)
    if raw_name is None:
        raise c.fail(f"tensor {index}'s name is longer than {_MAX_KEY_BYTES} bytes")
    name = shown(raw_name)  # for the refusals below
    n_dims = c.scalar("<I", name)
    if not 1 <= n_dims <= MAX_DIMS:
        raise c.fail(f"tensor {name} has {n_dims} dimensions (1 to {MAX_DIMS})")
    shape = struct.unpack(f"<{n_dims}Q", c.take(8 * n_dims, name))
    elements = 1
    for d in shape:
        elements *= d
    if 0 in shape or elements > MAX_TENSOR_ELEMENTS:
        raise c.fail(f"tensor {name} has shape {list(shape)}: a size is 0 or above 2^44 elements")
    type_id = c.scalar("<I", name)
    try:
        type_name = GGMLQuantizationType(type_id).name
    except ValueError:
        type_name = f"type {type_id}"
    if type_name not in GGML_BLOCKS:
        raise c.fail(f"tensor {name} has ggml {type_name}, whose block size is not known here")
    return GgufTensor(raw_name, tuple(shape), type_name, c.scalar("<Q", name))


def _check_placement(c: _Cursor, tensors: list[GgufTensor], data_start: int, align: int) -> None:
    """Every tensor's ggml type × shape bytes lie inside the file, aligned, none overlapping."""
    data_bytes = c.size - data_start
    end_of: tuple[int, str] = (0, "")
    for t in sorted(tensors, key=lambda t: t.offset):
        name = shown(t.name)
        if t.offset % align:
            raise c.fail(f"tensor {name} starts at offset {t.offset}, not a multiple of {align}")
        end = t.offset + t.nbytes
        if end > data_bytes:
            raise c.fail(
                f"tensor {name} ({t.type_name} × {list(t.shape)} = {t.nbytes} bytes at offset "
                f"{t.offset}) lies past the end of the file ({data_bytes} data bytes)"
            )
        if t.offset < end_of[0]:
            raise c.fail(f"tensor {shown(t.name)} overlaps tensor {shown(end_of[1])}")
        end_of = (end, t.name)


def read_gguf_header(path: Path) -> tuple[dict[str, Any], list[GgufTensor]]:
    """The metadata (no string arrays, no arrays longer than ``MAX_LAYERS``) and tensor table.

    Reads only the header; the cost is bounded by the header's own size and the bounds above,
    whatever the file's size."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            c = _Cursor(f, path, size)
            if f.read(4) != _MAGIC:
                raise GeometryError(f"{path} is not a readable GGUF file (no GGUF magic)")
            c.pos = 4
            version = c.scalar("<I", "version")
            if version not in _VERSIONS:
                raise c.fail(f"version {version} is not 2 or 3 (or the file is big-endian)")
            n_tensors, n_meta = c.scalar("<Q", "tensor count"), c.scalar("<Q", "metadata count")
            if n_tensors > MAX_TENSORS or n_meta > _MAX_METADATA:
                raise c.fail(
                    f"claims {n_tensors} tensors and {n_meta} metadata entries (bounds: "
                    f"{MAX_TENSORS} and {_MAX_METADATA})"
                )
            meta: dict[str, Any] = {}
            for i in range(n_meta):
                key = c.string(f"metadata key {i}", _MAX_KEY_BYTES)
                if key is None:
                    raise c.fail(f"metadata key {i} is longer than {_MAX_KEY_BYTES} bytes")
                meta[key] = _value(c, c.scalar("<I", key), shown(key))
            tensors = [_tensor(c, i) for i in range(n_tensors)]
            header_end = c.pos
            seen: set[str] = set()
            for t in tensors:
                if t.name in seen:
                    raise c.fail(f"names tensor {shown(t.name)} twice")
                seen.add(t.name)
    except OSError as exc:
        raise GeometryError(f"cannot read {path}: {exc.strerror or exc}") from None
    align = meta.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or isinstance(align, bool) or not 1 <= align <= 2**16:
        raise c.fail(f"general.alignment {align!r} is not an integer in 1..65536")
    _check_placement(c, tensors, -(-header_end // align) * align, align)
    return meta, tensors
