"""Other tools' result files read into TokenWatt's result (``tokenwatt import``).

``read_runs(path)`` detects the format from the file's own keys (never from its name) and
returns one ``ImportedRun`` per load point; ``to_result.imported_result`` makes the
``result.json`` that ``report`` and ``compare`` read. Formats: ``vllm bench serve
--save-result`` (with or without ``--save-detailed``), GuideLLM's ``benchmarks.json``, AIPerf's
``profile_export_aiperf.json`` (with its per-request ``profile_export.jsonl`` beside it),
inference-perf's lifecycle report, llm-d Benchmark Report v0.2/v0.2.1, and ML.ENERGY Benchmark
result files (with their own energy figures).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokenwatt.bounded import IMPORT_MAX_BYTES, load_document
from tokenwatt.importers import aiperf, br02, guidellm, inference_perf, mlenergy, vllm
from tokenwatt.importers.base import ImportedRun, ImportFileError
from tokenwatt.importers.checks import check_runs

__all__ = ["FORMATS", "ImportFileError", "ImportedRun", "detect", "read_runs"]

Reader = Callable[[Any], list[ImportedRun]]
# name -> (does this document look like it, read it); checked in this order
FORMATS: dict[str, tuple[Callable[[Any], bool], Reader]] = {
    "br02": (br02.looks_like, br02.read),
    "guidellm": (guidellm.looks_like, guidellm.read),
    "aiperf": (aiperf.looks_like, aiperf.read),
    "inference-perf": (inference_perf.looks_like, inference_perf.read),
    "mlenergy": (mlenergy.looks_like, mlenergy.read),
    "vllm": (vllm.looks_like, vllm.read),
}


def _load(path: Path) -> Any:
    # numbers as written (``.inf`` is "unlimited" in a Benchmark Report): checks.check_runs
    # holds every figure a run takes from the file to finite, non-negative bounds
    return load_document(path, max_bytes=IMPORT_MAX_BYTES, error=ImportFileError, values=False)


def detect(doc: Any) -> str | None:
    """The format whose keys the document has; None when none matches."""
    for name, (looks_like, _) in FORMATS.items():
        if looks_like(doc):
            return name
    return None


def read_runs(path: Path, fmt: str = "auto") -> tuple[str, list[ImportedRun]]:
    """The file's format and its runs; ``fmt`` forces one (``auto``: detect)."""
    doc = _load(path)
    name = detect(doc) if fmt == "auto" else fmt
    if name is None:
        known = ", ".join(FORMATS)
        raise ImportFileError(f"{path.name}: not a format tokenwatt import knows ({known})")
    if name not in FORMATS:
        raise ImportFileError(f"--format {name!r}: one of auto, {', '.join(FORMATS)}")
    if name == "aiperf":
        runs = aiperf.read(doc, records=aiperf.records_beside(path))
    else:
        runs = FORMATS[name][1](doc)
    if not runs:
        raise ImportFileError(f"{path.name}: no benchmark in the file")
    check_runs(path, runs)
    return name, runs
