"""Which weights are stored in which format: from quantization_config, dtype, or the user.

Supported checkpoint schemes: ``fp8`` (block or per-tensor scales, ``modules_to_not_convert``
/ ``ignored_layers``), ``mxfp4`` (expert weights only, as HF's integration converts them),
``gptq`` and ``awq`` (int4/int8, group scales and packed zero points), ``compressed-tensors``
(first weight scheme of ``config_groups``; int4/int8, fp8, nvfp4; ``ignore`` and ``targets``),
``modelopt`` (FP8 per-tensor, NVFP4), also from a folder's ``hf_quant_config.json``.
Embeddings, the LM head, norms, routers and biases are never quantized.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.dtypes import WeightFormat, canonical_dtype, weight_format

__all__ = ["ModuleMatcher", "Precision", "resolve_precision"]

_SUPPORTED = "fp8, mxfp4, gptq, awq, compressed-tensors, modelopt"


class ModuleMatcher:
    """Does a module name (``model.layers.3.mlp.gate``) match a list of config patterns?

    Plain entries match the module itself, any parent (``model.layers.3.self_attn``), or a
    dotted suffix (``lm_head``); ``*`` entries are globs; ``re:`` entries are regexes
    (compressed-tensors).
    """

    def __init__(self, patterns: list[str] | None) -> None:
        self.exact: set[str] = set()
        self.regexes: list[re.Pattern[str]] = []
        for p in patterns or []:
            if p.startswith("re:"):
                self.regexes.append(re.compile(p[3:]))
            elif any(c in p for c in "*?["):
                self.regexes.append(re.compile(fnmatch.translate(p)))
                self.regexes.append(re.compile(fnmatch.translate(p + ".*")))
            else:
                self.exact.add(p)

    def __bool__(self) -> bool:
        return bool(self.exact or self.regexes)

    def matches(self, module: str) -> bool:
        parts = module.split(".")
        for n in range(1, len(parts) + 1):
            if ".".join(parts[:n]) in self.exact or ".".join(parts[-n:]) in self.exact:
                return True
        return any(r.match(module) for r in self.regexes)


@dataclass(frozen=True, slots=True)
class Precision:
    """Storage formats: ``quantized`` for the linears in scope, ``plain`` for the rest."""

    weight_dtype: str
    plain: WeightFormat
    quantized: WeightFormat | None = None
    scope: Literal["linear", "experts"] = "linear"
    exclude: ModuleMatcher = field(default_factory=lambda: ModuleMatcher(None))
    include: ModuleMatcher | None = None
    notes: tuple[str, ...] = ()

    def linear(self, module: str, *, expert: bool = False) -> WeightFormat:
        """Format of a linear weight; routers, embeddings and the head never ask."""
        q = self.quantized
        if q is None or (self.scope == "experts" and not expert):
            return self.plain
        if self.exclude.matches(module):
            return self.plain
        if self.include is not None and not self.include.matches(module):
            return self.plain
        return q


def _plain(cfg: Mapping[str, Any], notes: list[str]) -> WeightFormat:
    raw = cfg.get("dtype", cfg.get("torch_dtype"))
    if raw == "auto":
        raw = None
    if raw is None:
        notes.append("config gives no torch_dtype/dtype: unquantized weights counted as bf16")
        return weight_format("bf16")
    if not isinstance(raw, str):
        raise GeometryError(f"config.json: torch_dtype must be a string, got {raw!r}")
    name = canonical_dtype(raw, what="torch_dtype")
    if name in ("bf16", "fp16"):
        return weight_format(name)
    notes.append(
        f"config dtype is {raw}: unquantized weights counted at 2 bytes (bf16), as serving "
        "engines load them; give --set weight_dtype=fp32 for 4"
    )
    return weight_format("bf16")


def _int_key(qc: Mapping[str, Any], *keys: str, default: int) -> int:
    for key in keys:
        value = qc.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise GeometryError(
                    f"config.json: quantization_config.{key} must be an integer, got {value!r}"
                )
            return value
    return default


def _patterns(qc: Mapping[str, Any], *keys: str) -> list[str]:
    for key in keys:
        value = qc.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise GeometryError(
                f"config.json: quantization_config.{key} must be a list of module names"
            )
        return list(value)
    return []


def _block(value: Any) -> tuple[int, int]:
    if isinstance(value, str) and "x" in value:
        value = value.split("x")
    try:
        rows, cols = (int(v) for v in value)
    except (TypeError, ValueError):
        raise GeometryError(
            f"config.json: weight block size must be two integers, got {value!r}"
        ) from None
    if rows <= 0 or cols <= 0:
        raise GeometryError(f"config.json: weight block size must be positive, got {value!r}")
    return rows, cols


def _int_format(bits: int, group: int, zero_point: bool, method: str) -> WeightFormat:
    if bits not in (4, 8):
        raise GeometryError(
            f"config.json: {method} with {bits}-bit weights is not supported (4 or 8); "
            "give --set weight_dtype=DTYPE to count another precision"
        )
    return weight_format(f"int{bits}", group_size=group, zero_point=zero_point)


def _compressed_tensors(qc: Mapping[str, Any], notes: list[str]) -> Precision:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise GeometryError("config.json: compressed-tensors quantization has no config_groups")
    schemes = [g for g in groups.values() if isinstance(g, dict) and g.get("weights")]
    if not schemes:
        raise GeometryError("config.json: compressed-tensors config_groups have no weights scheme")
    if len(schemes) > 1:
        notes.append(
            "several compressed-tensors schemes: all quantized linears counted with the first"
        )
    scheme = schemes[0]
    w = scheme["weights"]
    if not isinstance(w, dict):
        raise GeometryError("config.json: compressed-tensors weights scheme must be an object")
    bits = _int_key(w, "num_bits", default=8)
    kind = str(w.get("type", "int")).lower()
    strategy = str(w.get("strategy", "tensor")).lower()
    group = _int_key(w, "group_size", default=128) if strategy == "group" else -1
    fmt: WeightFormat
    if kind == "float" and bits == 8:
        if strategy == "block":
            fmt = weight_format("fp8", block=_block(w.get("block_structure") or (128, 128)))
        elif strategy == "channel":
            fmt = weight_format("fp8", block=(1, 0))
        else:
            fmt = weight_format("fp8", block=(0, 0))
    elif kind == "float" and bits == 4:
        fmt = weight_format("nvfp4")
    elif kind == "int":
        zero = not bool(w.get("symmetric", True))
        fmt = _int_format(bits, group, zero, "compressed-tensors")
    else:
        raise GeometryError(
            f"config.json: compressed-tensors {kind}{bits} weights are not supported; "
            "give --set weight_dtype=DTYPE to count another precision"
        )
    targets = scheme.get("targets") or ["Linear"]
    include = None
    if isinstance(targets, list) and any(t != "Linear" for t in targets):
        include = ModuleMatcher([t for t in targets if isinstance(t, str) and t != "Linear"])
    return Precision(
        fmt.name,
        weight_format("bf16"),
        fmt,
        exclude=ModuleMatcher(_patterns(qc, "ignore")),
        include=include,
    )


def _modelopt(algo: Any, exclude: list[str], group: int) -> Precision:
    name = str(algo).upper()
    if name == "FP8":
        fmt = weight_format("fp8", block=(0, 0))
    elif name == "NVFP4":
        fmt = WeightFormat("nvfp4", 4, 1, group, 1.0)
    else:
        raise GeometryError(
            f"modelopt quant_algo {algo!r} is not supported (FP8, NVFP4); "
            "give --set weight_dtype=DTYPE"
        )
    return Precision(fmt.name, weight_format("bf16"), fmt, exclude=ModuleMatcher(exclude))


def _from_quant_config(qc: Mapping[str, Any], notes: list[str]) -> Precision:
    method = str(qc.get("quant_method", "")).strip().lower().replace("_", "-")
    if method == "fp8":
        block_raw = qc.get("weight_block_size")
        block = _block(block_raw) if block_raw is not None else (0, 0)
        if block_raw is None:
            notes.append("fp8 without weight_block_size: one FP32 scale per tensor")
        fmt = weight_format("fp8", block=block)
        excl = _patterns(qc, "modules_to_not_convert", "ignored_layers")
        return Precision("fp8", weight_format("bf16"), fmt, exclude=ModuleMatcher(excl))
    if method == "mxfp4":
        excl = _patterns(qc, "modules_to_not_convert")
        return Precision(
            "mxfp4", weight_format("bf16"), weight_format("mxfp4"), "experts", ModuleMatcher(excl)
        )
    if method == "gptq":
        bits = _int_key(qc, "bits", default=4)
        group = _int_key(qc, "group_size", default=128)
        notes.append("gptq: packed zero points counted; g_idx (4 bytes per input column) ignored")
        fmt = _int_format(bits, group, True, "gptq")
        return Precision(fmt.name, weight_format("fp16"), fmt)
    if method == "awq":
        bits = _int_key(qc, "bits", "w_bit", default=4)
        group = _int_key(qc, "group_size", "q_group_size", default=128)
        zero = bool(qc.get("zero_point", True))
        fmt = _int_format(bits, group, zero, "awq")
        excl = _patterns(qc, "modules_to_not_convert")
        return Precision(fmt.name, weight_format("fp16"), fmt, exclude=ModuleMatcher(excl))
    if method == "compressed-tensors":
        return _compressed_tensors(qc, notes)
    if method == "modelopt":
        group = _int_key(qc, "group_size", default=16)
        return _modelopt(qc.get("quant_algo"), _patterns(qc, "exclude_modules", "ignore"), group)
    raise GeometryError(
        f"config.json: quantization_config.quant_method {qc.get('quant_method')!r} is not "
        f"supported ({_SUPPORTED}); give --set weight_dtype=DTYPE to count the weights at a "
        "given precision"
    )


def _hf_quant_config(folder: Path | None) -> Mapping[str, Any] | None:
    if folder is None or not (folder / "hf_quant_config.json").is_file():
        return None
    path = folder / "hf_quant_config.json"
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GeometryError(f"{path} cannot be read as JSON: {exc}") from None
    quant = data.get("quantization") if isinstance(data, dict) else None
    if not isinstance(quant, dict):
        raise GeometryError(f"{path} has no 'quantization' object")
    return quant


def resolve_precision(
    cfg: Mapping[str, Any], *, weight_dtype: str | None, folder: Path | None = None
) -> Precision:
    """The checkpoint's storage formats, or the user's ``weight_dtype`` applied to every linear."""
    notes: list[str] = []
    plain = _plain(cfg, notes)
    qc = cfg.get("quantization_config") or cfg.get("compression_config")
    found: Precision | None = None
    if qc is not None:
        if not isinstance(qc, dict):
            raise GeometryError(f"config.json: quantization_config must be an object, got {qc!r}")
        try:
            found = _from_quant_config(qc, notes)
        except GeometryError:
            if weight_dtype is None:
                raise
            notes.append("checkpoint quantization not understood; using --weights instead")
    elif (mo := _hf_quant_config(folder)) is not None:
        found = _modelopt(mo.get("quant_algo"), _patterns(mo, "exclude_modules"), 16)
        notes.append("precision from hf_quant_config.json (modelopt)")
    if found is not None:
        found = Precision(
            found.weight_dtype,
            plain,  # unquantized modules keep the checkpoint's dtype
            found.quantized,
            found.scope,
            found.exclude,
            found.include,
            (*notes, *found.notes),
        )
    if weight_dtype is None:
        return found if found is not None else Precision(plain.name, plain, notes=tuple(notes))
    want = canonical_dtype(weight_dtype, what="weight dtype")
    if found is not None and want == found.weight_dtype:
        return found
    if found is not None:
        notes.append(f"checkpoint is {found.weight_dtype}; counted as {want} (--weights)")
    if want in ("bf16", "fp16", "fp32"):
        fmt = weight_format(want)
        return Precision(want, fmt, notes=tuple(notes))
    notes.append(
        f"{want} applied to every attention, MLP and expert linear; embeddings, LM head, "
        f"norms and routers stay {plain.name}"
    )
    return Precision(want, plain, weight_format(want), notes=tuple(notes))
