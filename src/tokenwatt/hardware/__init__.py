"""Accelerator catalog: rated memory bandwidth, capacity, TDP and peak FLOP/s, with sources.

Figures are the vendors' rated numbers in SI units (1 TB/s = 10^12 B/s, 1 GB = 10^9 B;
GiB only where the vendor states GiB). Dense FLOP/s: sparsity figures halved.
"""

from __future__ import annotations

import csv
import importlib.resources
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any

from tokenwatt.errors import HardwareError

__all__ = [
    "Accelerator",
    "custom_accelerator",
    "get_accelerator",
    "list_accelerators",
    "variants_of",
]


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator's rated figures, per device."""

    name: str
    vendor: str
    display_name: str
    memory_bytes: float | None  # None: a custom accelerator whose memory was not given
    bandwidth_bytes_per_s: float
    tdp_w: float | None
    bf16_dense_flops: float | None
    fp8_dense_flops: float | None
    confidence: str
    source: str
    aliases: tuple[str, ...] = ()

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak for the compute dtype of prefill (FP8 weights use FP8 tensor cores)."""
        if dtype.startswith("fp8") and self.fp8_dense_flops:
            return self.fp8_dense_flops
        return self.bf16_dense_flops

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        return d


def _opt(value: str) -> float | None:
    return float(value) if value.strip() else None


@cache
def _catalog() -> dict[str, Accelerator]:
    text = (importlib.resources.files("tokenwatt.hardware") / "catalog.csv").read_text("utf-8")
    out: dict[str, Accelerator] = {}
    for row in csv.DictReader(text.splitlines()):
        acc = Accelerator(
            name=row["name"],
            vendor=row["vendor"],
            display_name=row["display_name"],
            memory_bytes=float(row["memory_bytes"]),
            bandwidth_bytes_per_s=float(row["bandwidth_bytes_per_s"]),
            tdp_w=_opt(row["tdp_w"]),
            bf16_dense_flops=_opt(row["bf16_dense_flops"]),
            fp8_dense_flops=_opt(row["fp8_dense_flops"]),
            confidence=row["confidence"],
            source=row["source"],
            aliases=tuple(a for a in row["aliases"].split(";") if a),
        )
        out[acc.name] = acc
    return out


def list_accelerators() -> list[Accelerator]:
    return list(_catalog().values())


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def variants_of(name: str) -> list[Accelerator]:
    """The catalog entries a name prefixes (``h100`` → every H100 part): a name that stands
    for more than one memory variant is asked for, never guessed, because the variants' rated
    bandwidths differ (an H100 SXM 64 GB reads 1.63 TB/s, the 80 GB part 3.35 TB/s)."""
    stem = _key(name) + "-"
    return [
        acc
        for acc in _catalog().values()
        if acc.name.startswith(stem) or any(a.startswith(stem) for a in acc.aliases)
    ]


def _variant_text(acc: Accelerator) -> str:
    return (
        f"{acc.name} ({(acc.memory_bytes or 0) / 1e9:.0f} GB, "
        f"{acc.bandwidth_bytes_per_s / 1e12:.4g} TB/s)"
    )


def get_accelerator(name: str) -> Accelerator:
    """Look an accelerator up by name or alias, case-insensitively; a name that several
    memory variants share is refused with the variants listed."""
    key = _key(name)
    for acc in _catalog().values():
        if key == acc.name or key in acc.aliases:
            return acc
    variants = variants_of(key)
    if len(variants) > 1:
        listed = ", ".join(_variant_text(a) for a in variants)
        raise HardwareError(
            f"accelerator {name!r} has {len(variants)} memory variants and their bandwidths "
            f"decide MBU; name one: {listed}"
        )
    known = ", ".join(sorted(_catalog()))
    raise HardwareError(
        f"unknown accelerator {name!r}; known: {known} (or give custom figures in the spec)"
    )


def custom_accelerator(
    name: str,
    *,
    bandwidth_bytes_per_s: float,
    memory_bytes: float | None,
    tdp_w: float | None = None,
    bf16_dense_flops: float | None = None,
    fp8_dense_flops: float | None = None,
    base: Accelerator | None = None,
) -> Accelerator:
    """An accelerator the catalog lacks, or a catalog entry with some figures replaced;
    ``memory_bytes`` None keeps the base entry's memory (unknown without one)."""
    for field_name, value in (
        ("bandwidth_bytes_per_s", bandwidth_bytes_per_s),
        ("memory_bytes", memory_bytes if memory_bytes is not None else 1.0),
    ):
        if not value > 0:
            raise HardwareError(f"hardware.{field_name} must be > 0, got {value!r}")
    if base is not None:
        return replace(
            base,
            name=name,
            bandwidth_bytes_per_s=bandwidth_bytes_per_s,
            memory_bytes=memory_bytes if memory_bytes is not None else base.memory_bytes,
            tdp_w=tdp_w if tdp_w is not None else base.tdp_w,
            bf16_dense_flops=bf16_dense_flops or base.bf16_dense_flops,
            fp8_dense_flops=fp8_dense_flops or base.fp8_dense_flops,
            source="custom (spec)",
            confidence="user",
        )
    return Accelerator(
        name=name,
        vendor="custom",
        display_name=name,
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        tdp_w=tdp_w,
        bf16_dense_flops=bf16_dense_flops,
        fp8_dense_flops=fp8_dense_flops,
        confidence="user",
        source="custom (spec)",
    )
