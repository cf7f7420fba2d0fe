"""Find and read a model's config.json: a path, a folder, the local HF cache, or a preset.

Never touches the network: a repo id is looked up in the Hugging Face cache on disk
(``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``) and, failing
that, among the bundled presets under its short name.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tokenwatt.errors import GeometryError

__all__ = [
    "LoadedConfig",
    "hf_cache_dir",
    "list_presets",
    "preset_stand_in",
    "read_config",
    "resolve_preset",
]

_NOT_CACHED = "is not in the local HF cache"

# friendly names → bundled preset (lowercase file stem)
_ALIASES: dict[str, str] = {
    "mixtral-8x7b": "mixtral-8x7b-v0.1",
    "mixtral-8x7b-instruct": "mixtral-8x7b-v0.1",
    "mixtral-8x7b-instruct-v0.1": "mixtral-8x7b-v0.1",
    "llama-3-8b": "llama-3.1-8b",
    "llama3-8b": "llama-3.1-8b",
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama-3.1-8b": "llama-3.1-8b",
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama-3-70b": "llama-3.1-70b",
    "llama3-70b": "llama-3.1-70b",
    "llama-3.1-70b-instruct": "llama-3.1-70b",
    "meta-llama-3.1-70b": "llama-3.1-70b",
    "meta-llama-3.1-70b-instruct": "llama-3.1-70b",
    "llama-3.3-70b": "llama-3.1-70b",
    "llama-3.3-70b-instruct": "llama-3.1-70b",
    "deepseek-r1": "deepseek-v3",
    "deepseek-v3-0324": "deepseek-v3",
    "deepseek-r1-0528": "deepseek-v3",
    "qwen3-30b-a3b-instruct-2507": "qwen3-30b-a3b",
    "qwen3-30b-a3b-thinking-2507": "qwen3-30b-a3b",
    "gpt-oss": "gpt-oss-20b",
}


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A parsed config.json and where it came from."""

    data: dict[str, Any]
    name: str
    origin: str
    folder: Path | None = None  # the folder it sits in (for hf_quant_config.json), if any


@cache
def _preset_files() -> dict[str, str]:
    root = importlib.resources.files("tokenwatt.geometry") / "presets"
    return {
        entry.name.removesuffix(".json").lower(): entry.name
        for entry in root.iterdir()
        if entry.name.endswith(".json")
    }


def list_presets() -> list[str]:
    """Bundled preset names (lowercase; any case is accepted on lookup)."""
    return sorted(_preset_files())


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def resolve_preset(name: str) -> str | None:
    """The preset key for ``name`` (case-insensitive, aliases allowed), or None."""
    key = _norm(name)
    files = _preset_files()
    if key in files:
        return key
    key = _ALIASES.get(key, key)
    return key if key in files else None


def hf_cache_dir() -> Path:
    """The HF hub cache folder, by the same environment rules as huggingface_hub."""
    if env := os.environ.get("HF_HUB_CACHE"):
        return Path(env).expanduser()
    if env := os.environ.get("HF_HOME"):
        return Path(env).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _parse(text: str, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GeometryError(
            f"{origin} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict):
        raise GeometryError(f"{origin} must hold a JSON object, got {type(data).__name__}")
    return data


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text("utf-8")
    except UnicodeDecodeError:
        raise GeometryError(f"{path} is not UTF-8 text; give the model's config.json") from None
    except OSError as exc:
        raise GeometryError(f"cannot read {path}: {exc.strerror or exc}") from None
    return _parse(text, str(path))


def _from_hf_cache(repo_id: str) -> Path | None:
    repo_dir = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        pinned = snapshots / ref.read_text("utf-8").strip() / "config.json"
        if pinned.is_file():
            return pinned
    found = [p for p in snapshots.glob("*/config.json") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _read_preset(key: str) -> LoadedConfig:
    filename = _preset_files()[key]
    text = (importlib.resources.files("tokenwatt.geometry") / "presets" / filename).read_text(
        "utf-8"
    )
    return LoadedConfig(
        _parse(text, f"preset {key}"), filename.removesuffix(".json"), f"preset {key}"
    )


def preset_stand_in(origin: str) -> str | None:
    """The terminal's note when a Hugging Face id was not cached and the bundled preset of the
    same name stood in for it (``origin``: ``ModelGeometry.source``); None otherwise. Why: a
    repo id that names a different revision or fine-tune would be counted as the preset
    without a word where a person reads (it was said only in result.json)."""
    if _NOT_CACHED not in origin:
        return None
    return f"model geometry from the bundled {origin}: the preset of that name stands in"


def read_config(source: str | os.PathLike[str]) -> LoadedConfig:
    """Locate and parse ``source``'s config.json (see the module docstring for the order)."""
    text = os.fspath(source).strip()
    if not text:
        raise GeometryError("no model given; name a preset, a config.json, a folder or a repo id")
    path = Path(text).expanduser()
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise GeometryError(f"folder {path} has no config.json")
        return LoadedConfig(_read_file(cfg), path.resolve().name, str(cfg), path)
    if path.is_file():
        name = path.parent.resolve().name if path.name == "config.json" else path.stem
        return LoadedConfig(_read_file(path), name or path.stem, str(path), path.parent)
    if (key := resolve_preset(text)) is not None:
        return _read_preset(key)
    looks_like_path = text.endswith(".json") or text.startswith((".", "/", "~")) or os.sep in text
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        if (cached := _from_hf_cache(text)) is not None:
            return LoadedConfig(_read_file(cached), text, str(cached), cached.parent)
        if (key := resolve_preset(text.split("/", 1)[1])) is not None:
            loaded = _read_preset(key)
            return LoadedConfig(
                loaded.data,
                text,
                f"{loaded.origin} ({text} {_NOT_CACHED} {hf_cache_dir()})",
            )
        raise GeometryError(
            f"{text!r} is not in the local Hugging Face cache ({hf_cache_dir()}) and is no "
            "bundled preset; fetch its config.json first (huggingface-cli download "
            f"{text} config.json) or give a path"
        )
    if looks_like_path:
        raise GeometryError(f"no such file or folder: {text}")
    close = difflib.get_close_matches(_norm(text), [*_preset_files(), *_ALIASES], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise GeometryError(
        f"unknown model {text!r}: not a file, folder, cached repo id or preset{hint} "
        f"(presets: {', '.join(list_presets())})"
    )
