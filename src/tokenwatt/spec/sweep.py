"""A sweep: one server command template, a grid (or list) of settings, one bench per point.

The peers' engine sweeps (``vllm bench sweep serve``, SGLang ``auto_benchmark``, llm-d's
design of experiments) restart the server for every configuration, because an engine's
settings (slots, batch limits, parallelism) are fixed at launch. A sweep file names

    server.command      the launch line, with ``{name}`` placeholders, e.g.
                        ``llama-server -m {gguf} -np {slots} --port {port}``
    server.health_url   polled until it answers 200 (bounded by ``health_timeout_s``)
    vars                constants every template may use (paths, model names)
    grid | points       the settings: a grid (every combination, the last key fastest) or an
                        explicit list of points
    bench               the bench spec run at every point (a path, relative to the sweep
                        file, or the mapping itself)
    set                 spec fields per point, templated (``endpoint.url:
                        http://127.0.0.1:{port}/v1``), laid over the bench spec

``{port}`` is a free loopback port chosen per point and ``{point}`` the point's index; both
are always defined. The command runs without a shell: it is split into argv first and a value
fills its argv item as data, so a path with spaces stays one argument and ``;`` or ``$(..)``
in a value runs nothing; in a shell script the user wrote (``sh -c '...'``) a value is quoted
for its context or refused (``spec.template``). An unknown placeholder is a one-line error
naming it, before anything starts.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Self

from pydantic import Field, ValidationError, model_validator

from tokenwatt.errors import SpecError
from tokenwatt.spec import format_validation_error, read_spec_document
from tokenwatt.spec._base import MAX_COUNT, MAX_SECONDS, Section
from tokenwatt.spec.dotted import yaml_value
from tokenwatt.spec.template import Scalar, render, render_command

__all__ = [
    "BUILTIN_VARS",
    "Scalar",
    "ServerSection",
    "SweepPointSettings",
    "SweepSpec",
    "expand_points",
    "load_sweep_spec",
    "point_label",
    "render",
    "render_command",
    "render_value",
]

# Placeholders every template may use without declaring them.
BUILTIN_VARS = ("port", "point")
SweepPointSettings = dict[str, Scalar]


class ServerSection(Section):
    """How to start, check and stop the server of one point."""

    command: str = Field(description="launch line with {placeholders}; run without a shell")
    health_url: str = Field(
        description="polled until it answers HTTP 200, e.g. http://127.0.0.1:{port}/health"
    )
    health_timeout_s: float = Field(
        120.0, gt=0, le=MAX_SECONDS, description="longest wait for the server to become healthy"
    )
    stop_timeout_s: float = Field(
        10.0, gt=0, le=MAX_SECONDS, description="SIGTERM → SIGKILL grace for the process group"
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="extra environment variables (templated)"
    )


class SweepSpec(Section):
    """A whole sweep file (``tokenwatt sweep SWEEP.yaml``)."""

    name: str = Field("sweep", min_length=1, max_length=200)
    server: ServerSection
    vars: dict[str, Scalar] = Field(default_factory=dict, description="constants for templates")
    grid: dict[str, list[Scalar]] | None = Field(
        None, description="parameter → values; every combination is a point"
    )
    points: list[SweepPointSettings] | None = Field(
        None, description="explicit points, each a mapping parameter → value"
    )
    bench: str | dict[str, Any] = Field(description="bench spec: a path or the mapping itself")
    set: dict[str, Any] = Field(
        default_factory=dict,
        description="spec field (dotted) → value per point; every string in it is templated",
    )
    max_points: int = Field(64, ge=1, le=MAX_COUNT, description="refuse larger grids")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.grid is None) == (self.points is None):
            raise ValueError("give exactly one of grid (every combination) or points (a list)")
        if self.grid is not None and any(not v for v in self.grid.values()):
            raise ValueError("every grid parameter needs at least one value")
        if self.points is not None and not self.points:
            raise ValueError("points is empty: give at least one point")
        clash = set(BUILTIN_VARS) & (set(self.vars) | set(self.grid or {}))
        if clash:
            raise ValueError(f"{sorted(clash)} are set per point by the sweep; rename them")
        return self


def expand_points(spec: SweepSpec) -> list[SweepPointSettings]:
    """The points in run order: the grid's cartesian product (last key fastest), or the list."""
    if spec.points is not None:
        points = [dict(p) for p in spec.points]
    else:
        grid = spec.grid or {}
        keys = list(grid)
        points = [
            dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())
        ]
    if len(points) > spec.max_points:
        raise SpecError(
            f"sweep: {len(points)} points is over max_points = {spec.max_points}; "
            "shrink the grid or raise max_points"
        )
    return points


def point_label(settings: SweepPointSettings) -> str:
    """``slots=2,threads=1``: how a point is named in folders, tables and plots."""
    return ",".join(f"{k}={v}" for k, v in settings.items()) or "default"


def render_value(value: Any, values: dict[str, Scalar], *, what: str) -> Any:
    """A ``set`` value with every string in it rendered: a bare string is then read as YAML
    (``"{slots}"`` → 2, as ``--set`` reads it); strings inside lists and mappings stay text."""
    if isinstance(value, str):
        return yaml_value(render(value, values, what=what))
    return _render_nested(value, values, what)


def _render_nested(value: Any, values: dict[str, Scalar], what: str) -> Any:
    if isinstance(value, str):
        return render(value, values, what=what)
    if isinstance(value, list):
        return [_render_nested(v, values, what) for v in value]
    if isinstance(value, dict):
        return {k: _render_nested(v, values, what) for k, v in value.items()}
    return value


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep file; every failure is one line naming the field."""
    p = Path(path)
    data = read_spec_document(p, what="sweep")
    if not isinstance(data, dict):
        raise SpecError(f"{p}: a sweep must be a YAML mapping with server, grid and bench")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, source=str(p))) from None
