"""Stored bytes of a weight matrix or KV element, by format, scale overhead included.

A quantized format stores ``bits`` per weight plus one scale (and maybe a zero point) per
tile of the matrix. Tiles run over (output rows × input columns): fp8 block quantization
uses 128×128 tiles with an FP32 scale each; MXFP4 uses 1×32 tiles with an E8M0 byte each
(4.25 bits/weight); group-wise int formats use 1×group tiles with an FP16 scale (plus a
packed zero point where the format stores one). Bytes are computed per matrix with
ceilings, so partial tiles at the edges count as whole ones, as they do on disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenwatt.errors import GeometryError

__all__ = [
    "KV_DTYPES",
    "WEIGHT_DTYPES",
    "WeightFormat",
    "bytes_per_param",
    "canonical_dtype",
    "kv_bytes_per_element",
    "weight_format",
]

# canonical name ← spellings seen in configs, engines and flags
_ALIASES: dict[str, str] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "torch.float32": "fp32",
    "fp8": "fp8",
    "fp8-e4m3": "fp8",
    "fp8-e5m2": "fp8",
    "e4m3": "fp8",
    "float8-e4m3fn": "fp8",
    "float8-e4m3": "fp8",
    "float8-e5m2": "fp8",
    "float8": "fp8",
    "int8": "int8",
    "w8a8": "int8",
    "w8a16": "int8",
    "int4": "int4",
    "w4a16": "int4",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
}

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32", "fp8", "int8", "int4", "mxfp4", "nvfp4")
KV_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32", "fp8", "int8")
_KV_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "int8": 1}


def canonical_dtype(name: str, *, what: str = "dtype") -> str:
    """``bfloat16``, ``BF16``, ``float8_e4m3fn`` … → one canonical lowercase name."""
    key = str(name).strip().lower().replace("_", "-")
    if key in _ALIASES:
        return _ALIASES[key]
    known = ", ".join(WEIGHT_DTYPES)
    raise GeometryError(f"unknown {what} {name!r}; use one of: {known}")


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """How one weight matrix is stored.

    ``tile_rows``/``tile_cols`` give the region one scale covers (0 = the whole dimension,
    so 0×0 is one scale per tensor, 1×0 one per output row); ``scale_bytes`` is the size of
    that scale plus any zero point. ``scale_bytes == 0`` means no scales (plain float).
    """

    name: str
    bits: float
    tile_rows: int = 0
    tile_cols: int = 0
    scale_bytes: float = 0.0

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Bytes of a ``rows`` (out) × ``cols`` (in) matrix in this format, scales included."""
        data = math.ceil(rows * cols * self.bits / 8)
        if self.scale_bytes == 0:
            return data
        tr = self.tile_rows or rows
        tc = self.tile_cols or cols
        tiles = math.ceil(rows / tr) * math.ceil(cols / tc)
        return data + math.ceil(tiles * self.scale_bytes)

    def vector_bytes(self, n: int) -> int:
        """Bytes of a 1-D parameter (bias, norm) kept at this format's element size."""
        return math.ceil(n * self.bits / 8)

    @property
    def bytes_per_param(self) -> float:
        """Average bytes per weight of a large matrix (tiles fully occupied)."""
        per = self.bits / 8
        if self.scale_bytes and self.tile_rows and self.tile_cols:
            per += self.scale_bytes / (self.tile_rows * self.tile_cols)
        return per


def weight_format(
    dtype: str,
    *,
    group_size: int | None = None,
    block: tuple[int, int] | None = None,
    zero_point: bool = False,
) -> WeightFormat:
    """The storage rule for ``dtype``; defaults are the common checkpoint layouts.

    fp8: 1 byte + one FP32 scale per ``block`` (default 128×128; ``block=(0, 0)`` is one scale
    per tensor). int8/int4: ``bits``/8 bytes + one FP16 scale per ``group_size`` (default 128)
    input weights of each output row, plus a packed ``bits``-bit zero point when
    ``zero_point`` (GPTQ/AWQ store one). mxfp4: 4 bits + one E8M0 byte per 32 (4.25 bits).
    nvfp4: 4 bits + one FP8 byte per 16 (4.5 bits; the per-tensor FP32 scale is ignored).
    """
    name = canonical_dtype(dtype, what="weight dtype")
    if name in ("bf16", "fp16"):
        return WeightFormat(name, 16)
    if name == "fp32":
        return WeightFormat(name, 32)
    if name == "fp8":
        rows, cols = block if block is not None else (128, 128)
        return WeightFormat(name, 8, rows, cols, 4.0)
    if name in ("int8", "int4"):
        bits = 8 if name == "int8" else 4
        g = 128 if group_size is None else group_size
        scale = 2.0 + (bits / 8 if zero_point else 0.0)
        # group_size <= 0 (GPTQ's -1) means one scale per output row
        return WeightFormat(name, bits, 1, g if g > 0 else 0, scale)
    if name == "mxfp4":
        return WeightFormat(name, 4, 1, 32, 1.0)
    return WeightFormat("nvfp4", 4, 1, 16, 1.0)


def bytes_per_param(dtype: str) -> float:
    """Average stored bytes per weight of ``dtype`` in its default layout, scales included.

    bf16/fp16 2, fp32 4, fp8 1 + 4/128² (block scales), int8 1 + 2/128, int4 0.5 + 2/128,
    mxfp4 0.53125 (4.25 bits), nvfp4 0.5625 (4.5 bits).
    """
    return weight_format(dtype).bytes_per_param


def kv_bytes_per_element(dtype: str) -> int:
    """Bytes per cached K or V element (per-tensor KV scales are negligible and ignored)."""
    name = canonical_dtype(dtype, what="kv dtype")
    if name not in _KV_BYTES:
        raise GeometryError(
            f"kv dtype {dtype!r} is not supported; use one of: {', '.join(KV_DTYPES)}"
        )
    return _KV_BYTES[name]
