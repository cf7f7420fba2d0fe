"""Exact geometry from a GGUF file: the header and tensor table, never the weights.

Why: llama.cpp quantizes tensor by tensor (Q4_K_M keeps some tensors in Q6_K, the tied
embedding often in Q8_0), so a dtype class ("int4") guesses the bytes a decode step reads.
The GGUF says for every tensor its shape and ggml type, and each ggml type has a fixed block
(elements per block, bytes per block), so the stored bytes of each tensor are exact:
``elements / block_elements × block_bytes``. The parameter count is the file's element total.

The KV cache is not in the file: its shape comes from the ``{arch}.attention.*`` metadata
and its type from what the user runs the server with (``--cache-type-k/-v``, default f16).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType, LlamaFileType

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.model import KVGroup, KVKind, ModelGeometry

__all__ = [
    "GGML_BLOCKS",
    "GgufTensor",
    "geometry_from_gguf",
    "ggml_type_bytes",
    "read_gguf_table",
]

# ggml type name → (elements per block, bytes per block); the same table as ggml's
# type_traits (and gguf.GGML_QUANT_SIZES), kept here so the
# counts are stated in this project, not only inherited.
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
# llama.cpp's --cache-type-k/-v choices
_KV_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "IQ4_NL", "Q5_0", "Q5_1")
_KV_ALIASES = {"FP16": "F16", "FLOAT16": "F16", "FP32": "F32", "FLOAT32": "F32", "BFLOAT16": "BF16"}
# architectures whose sliding-window layers follow a fixed period when the file states none:
# every n-th layer (1-based) is global, as in llama.cpp's llama-model.cpp
_SWA_PERIOD = {"gemma3": 6, "gemma2": 2, "cohere2": 4, "gemma3n": 5}
_EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_[a-z_]*_exps\.")
_LAYER = re.compile(r"^blk\.(\d+)\.")


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
    """One row of the tensor table: name, shape (ggml order: row length first), ggml type."""

    name: str
    shape: tuple[int, ...]
    type_name: str

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return ggml_type_bytes(self.type_name, self.elements, self.shape[0] if self.shape else 1)


def _field_value(field: Any) -> Any:
    types = list(field.types)
    if not types:
        return None
    if types[0] == GGUFValueType.ARRAY:
        if len(types) > 1 and types[1] == GGUFValueType.STRING:
            return None  # vocabularies: large and not needed
        return [field.parts[i].tolist()[0] for i in field.data]
    part = field.parts[field.data[0]]
    if types[0] == GGUFValueType.STRING:
        return bytes(part).decode("utf-8", errors="replace")
    return part.tolist()[0]


def read_gguf_table(path: Path) -> tuple[dict[str, Any], list[GgufTensor]]:
    """The metadata (no string arrays) and tensor table of ``path``; weights stay on disk."""
    try:
        reader = GGUFReader(path, "r")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise GeometryError(f"{path} is not a readable GGUF file ({exc})") from None
    meta = {name: _field_value(f) for name, f in reader.fields.items()}
    tensors = [
        GgufTensor(t.name, tuple(int(d) for d in t.shape), t.tensor_type.name)
        for t in reader.tensors
    ]
    return meta, tensors


class _Meta:
    def __init__(self, meta: Mapping[str, Any], path: Path) -> None:
        self.meta = meta
        self.path = path
        arch = meta.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise GeometryError(f"{path}: GGUF has no general.architecture")
        self.arch = arch

    def int_(self, key: str, default: int | None = None) -> int:
        value = self.meta.get(f"{self.arch}.{key}", default)
        if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): take the first
            value = value[0] if value else default
        if not isinstance(value, int) or isinstance(value, bool):
            raise GeometryError(
                f"{self.path}: GGUF has no integer {self.arch}.{key}; set it with --set"
            )
        return value


def kv_type_name(kv_dtype: str | None) -> str:
    """llama.cpp's KV type for a user's ``kv_dtype`` (default F16, the server's default)."""
    if kv_dtype is None:
        return "F16"
    key = kv_dtype.strip().upper().replace("-", "_")
    key = _KV_ALIASES.get(key, key)
    if key not in _KV_TYPES:
        raise GeometryError(
            f"kv dtype {kv_dtype!r} is not a llama.cpp cache type; use one of "
            + ", ".join(t.lower() for t in _KV_TYPES)
        )
    return key


def _layer_kinds(m: _Meta, layers: int, notes: list[str]) -> list[tuple[KVKind, int | None]]:
    window = m.meta.get(f"{m.arch}.attention.sliding_window")
    if not isinstance(window, int) or window <= 0:
        return [("full", None)] * layers
    pattern = m.meta.get(f"{m.arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == layers:
        return [("sliding", window) if p else ("full", None) for p in pattern]
    period = pattern if isinstance(pattern, int) and pattern > 0 else _SWA_PERIOD.get(m.arch)
    if period is None:
        notes.append(
            f"GGUF gives a sliding window ({window}) but no layer pattern for {m.arch}: "
            "every layer counted as full attention"
        )
        return [("full", None)] * layers
    return [("full", None) if (i + 1) % period == 0 else ("sliding", window) for i in range(layers)]


def _kv_groups(m: _Meta, layers: int, kv_type: str, notes: list[str]) -> tuple[KVGroup, ...]:
    heads = m.int_("attention.head_count")
    kv_heads = m.int_("attention.head_count_kv", heads)
    emb = m.int_("embedding_length")
    k_len = m.int_("attention.key_length", emb // heads)
    v_len = m.int_("attention.value_length", k_len)
    # one K row and one V row per layer per token, each quantized in blocks along the row
    per_layer = ggml_type_bytes(kv_type, kv_heads * k_len, kv_heads * k_len) + ggml_type_bytes(
        kv_type, kv_heads * v_len, kv_heads * v_len
    )
    kinds = _layer_kinds(m, layers, notes)
    counts: dict[tuple[KVKind, int | None], int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return tuple(KVGroup(k, n, n * per_layer, w) for (k, w), n in counts.items())


def _file_type(meta: Mapping[str, Any]) -> str:
    ft = meta.get("general.file_type")
    if isinstance(ft, int):
        try:
            return LlamaFileType(ft).name.removeprefix("MOSTLY_").lower()
        except ValueError:
            pass
    return "gguf"


def geometry_from_gguf(
    source: str | os.PathLike[str], *, kv_dtype: str | None = None, name: str | None = None
) -> ModelGeometry:
    """Geometry of the model in a ``.gguf`` file, every weight byte counted from its tensor type.

    W(B) counts every tensor a decode step reads: all but the token embedding (a lookup of B
    rows) and the routed experts (counted per expert hit); the LM head is ``output.weight`` at
    its stored type, or the token embedding itself when the file ties them.
    """
    path = Path(source).expanduser()
    if not path.is_file():
        raise GeometryError(f"no such GGUF file: {path}")
    meta, tensors = read_gguf_table(path)
    m = _Meta(meta, path)
    notes: list[str] = [f"exact tensor bytes from the GGUF tensor table ({len(tensors)} tensors)"]
    layers = m.int_("block_count")
    by_name = {t.name: t for t in tensors}
    embd = by_name.get("token_embd.weight")
    if embd is None:
        raise GeometryError(f"{path}: GGUF has no token_embd.weight tensor")
    head = by_name.get("output.weight")
    tied = head is None
    experts = m.int_("expert_count", 0)
    top_k = m.int_("expert_used_count", 0) if experts else 0

    total = sum(t.elements for t in tensors)
    stored = sum(t.nbytes for t in tensors)
    exp_elems: dict[int, int] = {}
    exp_bytes: dict[int, int] = {}
    for t in tensors:
        if experts and (hit := _EXPERT_TENSOR.match(t.name)):
            i = int(hit.group(1))
            exp_elems[i] = exp_elems.get(i, 0) + t.elements
            exp_bytes[i] = exp_bytes.get(i, 0) + t.nbytes
    routed_elems = sum(exp_elems.values())
    routed_bytes = sum(exp_bytes.values())
    moe_layers = len(exp_elems)
    head_tensor = embd if head is None else head
    dense = stored - embd.nbytes - routed_bytes + (embd.nbytes if tied else 0)
    active = total - (routed_elems // experts * (experts - top_k) if moe_layers else 0)
    kv_type = kv_type_name(kv_dtype)
    groups = _kv_groups(m, layers, kv_type, notes)
    if tied:
        notes.append(f"LM head tied to token_embd.weight ({embd.type_name}), read every step")
    return ModelGeometry(
        name=name or path.stem,
        model_type=m.arch,
        total_params=total,
        active_params=active,
        mtp_params=0,
        embedding_params=embd.elements,
        lm_head_params=head_tensor.elements,
        tied_embeddings=tied,
        layers=layers,
        moe_layers=moe_layers,
        experts=experts if moe_layers else 0,
        experts_per_token=top_k if moe_layers else 0,
        shared_experts=m.int_("expert_shared_count", 0) if moe_layers else 0,
        expert_params=(routed_elems // moe_layers // experts) if moe_layers else 0,
        weight_dtype=_file_type(meta),
        kv_dtype=kv_type.lower(),
        dense_weight_bytes=dense,
        expert_bytes=round(routed_bytes / moe_layers / experts) if moe_layers else 0,
        kv_bytes_per_token_full_context=sum(
            g.bytes_per_token for g in groups if g.kind in ("full", "mla")
        ),
        kv_groups=groups,
        stored_weight_bytes=stored,
        source=str(path),
        notes=tuple(notes),
    )
