"""AIPerf's ``profile_export_aiperf.json`` (and its per-request ``profile_export.jsonl``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenwatt.importers.base import ImportedRun, ImportFileError

__all__ = ["looks_like", "read", "records_beside"]


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and "time_to_first_token" in doc and "input_config" in doc


def records_beside(path: Path) -> list[dict[str, Any]] | None:
    return None


def read(doc: Any, records: list[dict[str, Any]] | None = None) -> list[ImportedRun]:
    raise ImportFileError("AIPerf: not read yet")
