"""The figures an imported run may hold: finite, non-negative, and a duration over zero.

Each format module reads its peer's numbers as the peer wrote them; this is the one check
between those numbers and a ``result.json``: a file whose throughput is negative, whose
latency is NaN or 1e308, or whose duration is zero would otherwise print as a figure (a
negative goodput, "SLO met"). The refusal names the file, the run and the field.
"""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from tokenwatt.bounded import MAX_MAGNITUDE
from tokenwatt.importers.base import ImportedRun, ImportFileError
from tokenwatt.result import Latency

__all__ = ["check_runs", "run_problem"]


def _problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value):
        return f"{value}: figures must be finite"
    if value < 0:
        return f"{value:g}, and cannot be negative"
    if value > MAX_MAGNITUDE:
        return f"{value:.3g}, beyond any measurable figure"
    return None


def _named(run: ImportedRun) -> list[tuple[str, Any]]:
    """(field, value) for every number of the run, per-request pairs and timings included."""
    out: list[tuple[str, Any]] = []
    for f in fields(run):
        value = getattr(run, f.name)
        if isinstance(value, Latency):
            out += [(f"{f.name}.{k}", v) for k, v in value.model_dump().items()]
        elif f.name in ("pairs", "timings") and value is not None:
            out += [(f"{f.name}[{i}]", x) for i, row in enumerate(value) for x in row]
        else:
            out.append((f.name, value))
    return out


def run_problem(run: ImportedRun) -> str | None:
    """What makes the run's figures impossible, naming the field; None when nothing does."""
    for name, value in _named(run):
        problem = _problem(value)
        if problem:
            return f"{name} is {problem}"
    # a run that counted requests took time; a summary that publishes no duration and no
    # request count (ML.ENERGY's steady windows) leaves it at zero
    if not run.duration_s > 0 and (run.requests_ok > 0 or run.duration_s < 0):
        return f"duration_s is {run.duration_s:g}: a run's duration must be over zero"
    return None


def check_runs(path: Path, runs: list[ImportedRun]) -> None:
    """Refuse the file at its first impossible figure (one line, exit 2)."""
    for i, run in enumerate(runs):
        problem = run_problem(run)
        if problem:
            which = f" (benchmark {i + 1} of {len(runs)})" if len(runs) > 1 else ""
            raise ImportFileError(f"{path.name}{which}: {problem}; the file is damaged")
