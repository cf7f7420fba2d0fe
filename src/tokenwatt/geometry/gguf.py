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
from pathlib import Path
from typing import Any

from gguf import LlamaFileType

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.bounds import MAX_EXPERTS, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SHARED
from tokenwatt.geometry.gguf_header import (
    GGML_BLOCKS,
    GgufTensor,
    ggml_type_bytes,
    read_gguf_header,
)
from tokenwatt.geometry.model import KVGroup, KVKind, ModelGeometry

__all__ = [
    "GGML_BLOCKS",
    "GgufTensor",
    "geometry_from_gguf",
    "ggml_type_bytes",
    "read_gguf_table",
]

# llama.cpp's --cache-type-k/-v choices
_KV_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "IQ4_NL", "Q5_0", "Q5_1")
_KV_ALIASES = {"FP16": "F16", "FLOAT16": "F16", "FP32": "F32", "FLOAT32": "F32", "BFLOAT16": "BF16"}
# architectures whose sliding-window layers follow a fixed period when the file states none:
# every n-th layer (1-based) is global, as in llama.cpp's llama-model.cpp
_SWA_PERIOD = {"gemma3": 6, "gemma2": 2, "cohere2": 4, "gemma3n": 5}
_EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_[a-z_]*_exps\.")
_LAYER = re.compile(r"^blk\.(\d+)\.")


def read_gguf_table(path: Path) -> tuple[dict[str, Any], list[GgufTensor]]:
    """The metadata (no string arrays) and tensor table of ``path``; weights stay on disk
    (``geometry.gguf_header``: header only, bounded)."""
    return read_gguf_header(path)


class _Meta:
    def __init__(self, meta: Mapping[str, Any], path: Path) -> None:
        self.meta = meta
        self.path = path
        arch = meta.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise GeometryError(f"{path}: GGUF has no general.architecture")
        self.arch = arch

    def int_(self, key: str, default: int | None = None, *, minimum: int = 1, maximum: int) -> int:
        """``{arch}.{key}`` as an integer within the physical bounds config.json has too."""
        value = self.meta.get(f"{self.arch}.{key}", default)
        if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): take the first
            value = value[0] if value else default
        if not isinstance(value, int) or isinstance(value, bool):
            raise GeometryError(
                f"{self.path}: GGUF has no integer {self.arch}.{key}; set it with --set"
            )
        if not minimum <= value <= maximum:
            raise GeometryError(
                f"{self.path}: GGUF {self.arch}.{key} = {value} is outside {minimum}..{maximum:,}"
                " (a corrupted or hostile file)"
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
    heads = m.int_("attention.head_count", maximum=MAX_HEADS)
    kv_heads = m.int_("attention.head_count_kv", heads, maximum=MAX_HEADS)
    emb = m.int_("embedding_length", maximum=MAX_HIDDEN)
    k_len = m.int_("attention.key_length", emb // heads, maximum=MAX_HEADS)
    v_len = m.int_("attention.value_length", k_len, maximum=MAX_HEADS)
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
    layers = m.int_("block_count", maximum=MAX_LAYERS)
    by_name = {t.name: t for t in tensors}
    embd = by_name.get("token_embd.weight")
    if embd is None:
        raise GeometryError(f"{path}: GGUF has no token_embd.weight tensor")
    head = by_name.get("output.weight")
    tied = head is None
    experts = m.int_("expert_count", 0, minimum=0, maximum=MAX_EXPERTS)
    top_k = m.int_("expert_used_count", 0, maximum=experts) if experts else 0

    shared = m.int_("expert_shared_count", 0, minimum=0, maximum=MAX_SHARED) if experts else 0
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
        shared_experts=shared if moe_layers else 0,
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
