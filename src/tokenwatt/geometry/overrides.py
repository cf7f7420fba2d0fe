"""User-set geometry fields (``--set FIELD=VALUE``, a spec's ``model.overrides``).

Three kinds, applied at the point where they mean something:

* inputs of the count (``layers``, ``experts``, ``experts_per_token``, ``shared_experts``,
  ``tied_embeddings``, ``weight_dtype``, ``kv_dtype``) replace what the config says, and
  every derived figure follows;
* ``config.KEY`` sets a raw config.json key (of the text config) before parsing, for keys
  the config lacks or gets wrong;
* any other ModelGeometry field replaces the computed value as given (nothing else is
  recomputed from it), except that ``kv_bytes_per_token_full_context`` and ``kv_groups`` are kept
  consistent with each other.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.dtypes import canonical_dtype
from tokenwatt.geometry.model import KVGroup, KVKind, ModelGeometry

__all__ = ["SplitOverrides", "apply_outputs", "overridable_fields", "split_overrides"]

INPUT_FIELDS = frozenset({"layers", "experts", "experts_per_token", "shared_experts"})
_POSITIVE = frozenset({"layers", "total_params", "active_params", "dense_weight_bytes"})
_INT_FIELDS = frozenset(
    {
        "total_params",
        "active_params",
        "mtp_params",
        "embedding_params",
        "lm_head_params",
        "layers",
        "moe_layers",
        "experts",
        "experts_per_token",
        "shared_experts",
        "expert_params",
        "dense_weight_bytes",
        "expert_bytes",
        "kv_bytes_per_token_full_context",
        "stored_weight_bytes",
    }
)
# old override names still accepted (specs written before the rename)
_RENAMED = {"kv_bytes_per_token": "kv_bytes_per_token_full_context"}
_STR_FIELDS = frozenset({"name", "model_type", "source"})
_NOT_SETTABLE = frozenset({"notes"})
_KINDS: tuple[str, ...] = get_args(KVKind)
_NUMBER = re.compile(r"^[+-]?(\d[\d_]*)(\.\d*)?([eE][+-]?\d+)?$")


def overridable_fields() -> list[str]:
    names = [f.name for f in dataclasses.fields(ModelGeometry) if f.name not in _NOT_SETTABLE]
    return [*names, "config.KEY"]


def _int(name: str, value: Any) -> int:
    minimum = 1 if name in _POSITIVE else 0
    out: int | None = None
    if isinstance(value, bool):
        out = None
    elif isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer():
        out = int(value)
    elif isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value.strip().replace("_", ""))
        out = int(number) if number.is_integer() else None
    if out is None or out < minimum:
        raise GeometryError(f"override {name}={value}: must be a whole number ≥ {minimum}")
    return out


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise GeometryError(f"override {name}={value}: must be true or false")


def _json_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _kv_groups(value: Any) -> tuple[KVGroup, ...]:
    value = _json_value(value)
    if not isinstance(value, list | tuple):
        raise GeometryError(
            "override kv_groups: must be a list like "
            '[{"kind": "full", "layers": 32, "bytes_per_token": 131072}]'
        )
    groups: list[KVGroup] = []
    for item in value:
        if isinstance(item, KVGroup):
            groups.append(item)
            continue
        if not isinstance(item, Mapping):
            raise GeometryError(f"override kv_groups: each group must be an object, got {item!r}")
        kind = item.get("kind")
        if kind not in _KINDS:
            raise GeometryError(f"override kv_groups: kind must be one of {_KINDS}, got {kind!r}")
        window = item.get("window")
        if kind in ("sliding", "chunked"):
            window = _int("kv_groups.window", window)
            if window < 1:
                raise GeometryError("override kv_groups: window must be ≥ 1")
        elif window is not None:
            raise GeometryError(f"override kv_groups: a {kind} group has no window")
        layers = _int("kv_groups.layers", item.get("layers"))
        if layers < 1:
            raise GeometryError("override kv_groups: layers must be ≥ 1")
        groups.append(
            KVGroup(
                kind, layers, _int("kv_groups.bytes_per_token", item.get("bytes_per_token")), window
            )
        )
    return tuple(groups)


@dataclass(slots=True)
class SplitOverrides:
    forced: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    weight_dtype: str | None = None
    kv_dtype: str | None = None


def split_overrides(overrides: Mapping[str, Any] | None) -> SplitOverrides:
    """Validate every override and sort it by where it applies."""
    out = SplitOverrides()
    valid = {f.name for f in dataclasses.fields(ModelGeometry)} - _NOT_SETTABLE
    for raw_key, value in (overrides or {}).items():
        key = str(raw_key).strip()
        key = _RENAMED.get(key, key)
        if key.startswith("config."):
            ckey = key.removeprefix("config.")
            if not ckey:
                raise GeometryError(
                    "override config.KEY needs a key name, e.g. config.head_dim=128"
                )
            out.config[ckey] = _json_value(value)
        elif key in ("weight_dtype", "kv_dtype"):
            name = canonical_dtype(str(value), what=key.replace("_", " "))
            setattr(out, key, name)
        elif key == "tied_embeddings":
            out.forced[key] = _bool(key, value)
        elif key in INPUT_FIELDS:
            out.forced[key] = _int(key, value)
        elif key in _INT_FIELDS:
            out.outputs[key] = _int(key, value)
        elif key in _STR_FIELDS:
            if not str(value).strip():
                raise GeometryError(f"override {key}: must not be empty")
            out.outputs[key] = str(value).strip()
        elif key == "kv_groups":
            out.outputs[key] = _kv_groups(value)
        elif key in valid:  # a field added to ModelGeometry without a rule here
            raise GeometryError(f"override {key}: this field cannot be set by hand yet")
        else:
            raise GeometryError(
                f"unknown override {key!r}; settable: {', '.join(overridable_fields())}"
            )
    return out


def apply_outputs(geom: ModelGeometry, outputs: Mapping[str, Any]) -> ModelGeometry:
    """Replace computed fields with the user's, then check the result still hangs together."""
    if not outputs:
        return geom
    changes = dict(outputs)
    groups = changes.get("kv_groups", geom.kv_groups)
    if "kv_bytes_per_token_full_context" in changes and "kv_groups" not in changes:
        value = changes["kv_bytes_per_token_full_context"]
        growing = [g for g in groups if g.kind in ("full", "mla")]
        kind: KVKind = growing[0].kind if len(growing) == 1 else "full"
        layers = sum(g.layers for g in growing) or geom.layers
        rest = [g for g in groups if g.kind not in ("full", "mla")]
        changes["kv_groups"] = (*([KVGroup(kind, layers, value)] if value else []), *rest)
    elif "kv_groups" in changes:
        derived = sum(g.bytes_per_token for g in groups if g.kind in ("full", "mla"))
        given = changes.setdefault("kv_bytes_per_token_full_context", derived)
        if given != derived:
            raise GeometryError(
                f"override kv_bytes_per_token_full_context={given} disagrees with the "
                f"full/MLA groups of kv_groups ({derived}); set one of them"
            )
    note = "set by hand: " + ", ".join(sorted(outputs))
    out = dataclasses.replace(geom, **changes, notes=(*geom.notes, note))
    check_consistent(out)
    return out


def check_consistent(g: ModelGeometry) -> None:
    """Relations every geometry must satisfy, whoever set the numbers."""
    if g.moe_layers > g.layers:
        raise GeometryError(f"moe_layers ({g.moe_layers}) exceeds layers ({g.layers})")
    if g.experts and g.experts_per_token > g.experts:
        raise GeometryError(
            f"experts_per_token ({g.experts_per_token}) exceeds experts ({g.experts})"
        )
    if g.moe_layers and g.experts and g.experts_per_token < 1:
        raise GeometryError("a MoE model needs experts_per_token ≥ 1; set it with --set")
    if g.active_params > g.total_params:
        raise GeometryError(
            f"active_params ({g.active_params}) exceeds total_params ({g.total_params}); "
            "set both with --set"
        )
