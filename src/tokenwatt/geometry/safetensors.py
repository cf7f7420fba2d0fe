"""Exact weight bytes from safetensors headers: 8-byte length + JSON per file, never the data.

Why: a quantized checkpoint's bytes depend on details config.json only implies (which
modules stay unquantized, scale tensors and their dtypes, AWQ/GPTQ packing, NVFP4's two
scale levels). Each safetensors header lists every tensor's dtype, shape and byte range,
so the stored bytes are exact. config.json remains the source of structure (layers,
experts, KV heads); the headers only replace the byte counts, by tensor name:

* routed experts: ``….experts.…`` (per-expert tensors or fused ones), per layer
* embedding: ``embed_tokens`` / ``wte`` / ``word_embeddings``; LM head: ``lm_head``
* layers numbered ≥ the config's layer count (DeepSeek's MTP) are not read per step
* vision/audio towers and projectors are not part of the text decoder: left out
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.bounds import MAX_DIMS, MAX_TENSOR_ELEMENTS, MAX_TENSORS, shown
from tokenwatt.geometry.model import ModelGeometry

__all__ = [
    "HEADER_DISAGREEMENT",
    "HeaderBytes",
    "apply_safetensors_headers",
    "count_header_bytes",
    "read_safetensors_header",
    "safetensors_files",
]

# header counts and config.json arithmetic further apart than this get a note
HEADER_DISAGREEMENT = 0.005
# the format allows 100 MB; real headers are kilobytes to a few MB (3,000 tensors: ~0.5 MB)
# and parsing 100 MB of JSON into Python objects costs gigabytes
_MAX_HEADER_BYTES = 16 * 1024 * 1024
_EXPERT = re.compile(r"\.experts\.")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EMBED = re.compile(r"(embed_tokens|\bwte|word_embeddings|tok_embeddings)\.")
_HEAD = re.compile(r"(^|\.)lm_head\.")
_NOT_TEXT = re.compile(r"(vision|visual|image|audio|multi_modal_projector|mm_projector)")


# safetensors dtype → bits per element (the format's own list; F4/F6 are packed sub-byte floats)
_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4,
    "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
    "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}  # fmt: skip


def _parse_header(path: Path, text: bytes) -> dict[str, Any]:
    def refuse(name: str) -> Any:  # NaN, Infinity: Python's json reads them, JSON has none
        raise GeometryError(f"{path}: safetensors header holds {name}, not a JSON number")

    try:
        header = json.loads(text, parse_constant=refuse)
    except RecursionError:
        raise GeometryError(f"{path}: safetensors header nests too deep to be one") from None
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError is a ValueError
        raise GeometryError(f"{path}: safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise GeometryError(f"{path}: safetensors header is not a JSON object")
    if len(header) > MAX_TENSORS:
        raise GeometryError(f"{path}: safetensors header lists more than {MAX_TENSORS} tensors")
    return header


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_tensor(path: Path, name: str, info: object, data_bytes: int) -> dict[str, Any]:
    """One tensor's entry: known dtype, a bounded shape, offsets inside the file that hold
    exactly dtype × shape bytes; anything else is one line naming the tensor."""
    where = f"{path}: tensor {shown(name)}"
    if not isinstance(info, dict):
        raise GeometryError(f"{where} is not a JSON object")
    offsets, dtype, shape = info.get("data_offsets"), info.get("dtype"), info.get("shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_int, offsets))):
        raise GeometryError(f"{where} has no valid data_offsets (two integers)")
    start, end = offsets
    if not 0 <= start <= end <= data_bytes:
        raise GeometryError(
            f"{where}: data_offsets [{start}, {end}] lie outside the file's {data_bytes} data "
            "bytes (a truncated or hostile file)"
        )
    if dtype not in _DTYPE_BITS:
        raise GeometryError(f"{where} has dtype {dtype!r}, not a safetensors dtype")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(map(_is_int, shape))):
        raise GeometryError(f"{where} has no valid shape (a list of at most {MAX_DIMS} integers)")
    elements = 1
    for d in shape:
        if not 0 <= d <= MAX_TENSOR_ELEMENTS:
            raise GeometryError(f"{where} has shape {shape}: a size outside 0..2^44")
        elements *= d
    if elements * _DTYPE_BITS[dtype] != 8 * (end - start):
        raise GeometryError(
            f"{where}: {dtype} × {shape} is {elements * _DTYPE_BITS[dtype] / 8:g} bytes, its "
            f"data_offsets hold {end - start}"
        )
    return info


def read_safetensors_header(path: Path) -> dict[str, dict[str, Any]]:
    """Tensor name → {dtype, shape, data_offsets} from one file's header (no tensor data).

    Every entry is checked: offsets inside the file, agreeing with dtype × shape, no two
    tensors sharing bytes; the header itself is bounded (``_MAX_HEADER_BYTES``, ``MAX_TENSORS``).
    """
    try:
        file_bytes = path.stat().st_size
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise GeometryError(f"{path} is too short to be a safetensors file")
            (size,) = struct.unpack("<Q", raw)
            if size > min(_MAX_HEADER_BYTES, file_bytes - 8):
                raise GeometryError(
                    f"{path}: safetensors header claims {size} bytes; the file has "
                    f"{file_bytes - 8} after its length and the bound is {_MAX_HEADER_BYTES}"
                )
            text = f.read(size)
    except OSError as exc:
        raise GeometryError(f"cannot read {path}: {exc.strerror or exc}") from None
    header = _parse_header(path, text)
    data_bytes = file_bytes - 8 - size
    out = {
        name: _check_tensor(path, name, info, data_bytes)
        for name, info in header.items()
        if name != "__metadata__"
    }
    last_end, last_name = 0, ""
    for name, info in sorted(out.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        start, end = info["data_offsets"]
        if start < last_end:
            raise GeometryError(f"{path}: tensor {shown(name)} overlaps tensor {shown(last_name)}")
        if end > start:
            last_end, last_name = end, name
    return out


def safetensors_files(folder: Path) -> list[Path]:
    """The shards of a checkpoint folder: those the index names, else every *.safetensors."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text("utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise GeometryError(f"{index} has no readable weight_map") from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise GeometryError(f"{index} names {missing[0]}, which is not in {folder}")
        return [folder / n for n in names]
    return sorted(folder.glob("*.safetensors"))


@dataclass(frozen=True, slots=True)
class HeaderBytes:
    """Stored bytes by role, summed over every shard's header."""

    total: int = 0  # text decoder, MTP included
    embedding: int = 0
    lm_head: int = 0
    experts: int = 0  # routed experts, all layers
    mtp: int = 0  # layers past the config's count
    left_out: int = 0  # vision/audio towers and projectors
    tensors: int = 0


def _nbytes(info: dict[str, Any]) -> int:
    start, end = info["data_offsets"]
    return int(end) - int(start)


def count_header_bytes(headers: Iterable[dict[str, dict[str, Any]]], layers: int) -> HeaderBytes:
    """Sort every tensor's bytes into the roles above (``layers``: the config's count)."""
    c = dict.fromkeys(("total", "embedding", "lm_head", "experts", "mtp", "left_out", "n"), 0)
    for header in headers:
        for name, info in header.items():
            n = _nbytes(info)
            c["n"] += 1
            if _NOT_TEXT.search(name):
                c["left_out"] += n
                continue
            c["total"] += n
            layer = _LAYER.search(name)
            if layer is not None and int(layer.group(1)) >= layers:
                c["mtp"] += n
            elif _EXPERT.search(name):
                c["experts"] += n
            elif _HEAD.search(name):
                c["lm_head"] += n
            elif _EMBED.search(name):
                c["embedding"] += n
    return HeaderBytes(
        c["total"], c["embedding"], c["lm_head"], c["experts"], c["mtp"], c["left_out"], c["n"]
    )


def apply_safetensors_headers(geom: ModelGeometry, folder: Path) -> ModelGeometry:
    """``geom`` with its byte counts replaced by the headers' of ``folder``, if it has any.

    W(B) then reads: every text-decoder tensor but the embedding, the routed experts and
    MTP layers, plus the LM head as stored (the embedding itself when tied).
    """
    files = safetensors_files(folder)
    if not files:
        return geom
    hb = count_header_bytes((read_safetensors_header(p) for p in files), geom.layers)
    head = hb.lm_head if hb.lm_head else (hb.embedding if geom.tied_embeddings else 0)
    dense = hb.total - hb.mtp - hb.embedding - hb.experts - hb.lm_head + head
    per_expert = geom.moe_layers * geom.experts
    expert_bytes = round(hb.experts / per_expert) if per_expert and hb.experts else 0
    stored = hb.total - hb.mtp
    notes = [f"weight bytes from {len(files)} safetensors header(s), {hb.tensors} tensors"]
    if hb.left_out:
        notes.append(f"{hb.left_out / 1e9:.3f} GB of vision/audio tensors left out")
    arith = geom.stored_weight_bytes
    if arith and abs(stored - arith) > HEADER_DISAGREEMENT * arith:
        notes.append(
            f"safetensors headers hold {stored / 1e9:.3f} GB of decoder weights, config.json "
            f"arithmetic {arith / 1e9:.3f} GB ({(stored - arith) / arith:+.1%}): the headers "
            "are used; check quantization_config or the model type's rules"
        )
    return replace(
        geom,
        dense_weight_bytes=dense,
        expert_bytes=expert_bytes if geom.is_moe else 0,
        stored_weight_bytes=stored,
        notes=(*geom.notes, *notes),
    )
