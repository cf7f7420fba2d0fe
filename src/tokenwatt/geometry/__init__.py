"""Model geometry from a config.json: parameter counts, bytes per decode step, KV layout.

    load_geometry("qwen3-30b-a3b")                  # bundled preset, any case
    load_geometry("/models/x/config.json")           # a file, or the folder holding it
    load_geometry("Qwen/Qwen3-30B-A3B")              # repo id found in the local HF cache
    load_geometry("deepseek-v3", kv_dtype="fp8", overrides={"experts_per_token": 4})

Nothing here touches the network or imports an ML framework: the counts come from the JSON.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.config import list_presets, read_config
from tokenwatt.geometry.dtypes import bytes_per_param
from tokenwatt.geometry.families import mlp_gated_from_names
from tokenwatt.geometry.model import KVGroup, ModelGeometry
from tokenwatt.geometry.overrides import apply_outputs, check_consistent, split_overrides
from tokenwatt.geometry.parse import build_geometry, text_config
from tokenwatt.geometry.safetensors import (
    apply_safetensors_headers,
    read_safetensors_header,
    safetensors_files,
)
from tokenwatt.geometry.support import check_supported

__all__ = [
    "KVGroup",
    "ModelGeometry",
    "bytes_per_param",
    "geometry_from_config",
    "list_presets",
    "load_geometry",
]


_BYTE_FIELDS = ("dense_weight_bytes", "expert_bytes", "stored_weight_bytes")


def _patched(config: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Apply ``config.KEY`` overrides to the text config (nested or not)."""
    root = dict(config)
    if not patch:
        return root
    if isinstance(root.get("text_config"), dict):
        root["text_config"] = {**root["text_config"], **patch}
    else:
        root.update(patch)
    return root


def _build(
    config: Mapping[str, Any],
    *,
    name: str,
    weight_dtype: str | None,
    kv_dtype: str | None,
    overrides: Mapping[str, Any] | None,
    folder: Path | None,
    source: str,
    names_gated: bool | None = None,
) -> ModelGeometry:
    if not isinstance(config, Mapping):
        raise GeometryError(f"a model config must be a JSON object, got {type(config).__name__}")
    # on the config as written: a config.KEY override cannot make a Mamba count as a Llama
    check_supported(text_config(config))
    split = split_overrides(overrides)
    geom = build_geometry(
        _patched(config, split.config),
        name=name,
        weight_dtype=weight_dtype or split.weight_dtype,
        kv_dtype=kv_dtype or split.kv_dtype,
        forced=split.forced if names_gated is None else {**split.forced, "gated_mlp": names_gated},
        folder=folder,
        source=source,
    )
    if split.outputs:
        return apply_outputs(geom, split.outputs)
    check_consistent(geom)
    return geom


def geometry_from_config(
    config: Mapping[str, Any],
    *,
    name: str,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ModelGeometry:
    """Geometry of an already-parsed config.json dict (see ``load_geometry`` for the options)."""
    return _build(
        config,
        name=name,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        overrides=overrides,
        folder=None,
        source="config dict",
    )


def _from_gguf(
    source: str | os.PathLike[str],
    weight_dtype: str | None,
    kv_dtype: str | None,
    overrides: Mapping[str, Any] | None,
) -> ModelGeometry:
    """A .gguf states every tensor's type: only geometry-field overrides apply to it."""
    from tokenwatt.geometry.gguf import geometry_from_gguf  # noqa: PLC0415 - gguf only when used

    split = split_overrides(overrides)
    if weight_dtype or split.weight_dtype or split.config or split.forced:
        raise GeometryError(
            "a .gguf file states each tensor's type and the model's structure: drop "
            "weight_dtype and config./structure overrides (set output fields instead)"
        )
    geom = geometry_from_gguf(os.fspath(source).strip(), kv_dtype=kv_dtype or split.kv_dtype)
    return apply_outputs(geom, split.outputs) if split.outputs else geom


def load_geometry(
    source: str | os.PathLike[str],
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ModelGeometry:
    """Find ``source``'s config.json (file, folder, cached repo id or preset) and count it;
    a ``.gguf`` file is counted from its own tensor table instead (``geometry.gguf``).

    ``weight_dtype`` replaces the checkpoint's precision (bf16, fp16, fp32, fp8, int8, int4,
    mxfp4, nvfp4); ``kv_dtype`` the KV-cache's (default bf16); ``overrides`` sets any
    ModelGeometry field or raw ``config.KEY``. Every problem raises a one-line GeometryError.
    """
    if os.fspath(source).strip().lower().endswith(".gguf"):
        return _from_gguf(source, weight_dtype, kv_dtype, overrides)
    loaded = read_config(source)
    names_gated = None
    if loaded.folder is not None and (files := safetensors_files(loaded.folder)):
        names = (n for p in files for n in read_safetensors_header(p))
        names_gated = mlp_gated_from_names(names)
    geom = _build(
        loaded.data,
        name=loaded.name,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        overrides=overrides,
        folder=loaded.folder,
        source=loaded.origin,
        names_gated=names_gated,
    )
    # safetensors headers beside the config give exact bytes, unless the user set them
    set_by_hand = {"weight_dtype", *_BYTE_FIELDS} & set(overrides or {})
    if loaded.folder is not None and weight_dtype is None and not set_by_hand:
        geom = apply_safetensors_headers(geom, loaded.folder)
    return geom
