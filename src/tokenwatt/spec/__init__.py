"""The benchmark spec: one YAML file describing endpoint, model, node, workload, SLO,
search and power. Validated once at the edge; errors name the field path and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import Field, ValidationError

from tokenwatt.errors import SpecError
from tokenwatt.spec._base import Section
from tokenwatt.spec.endpoint import Endpoint, Timeouts
from tokenwatt.spec.hardware import CustomAccelerator, HardwareSection
from tokenwatt.spec.model import ModelSection
from tokenwatt.spec.power import PowerSection, PowerSourceSpec
from tokenwatt.spec.search import ProbeSettings, SearchSettings
from tokenwatt.spec.sim import SimSection
from tokenwatt.spec.slo import SLO, SLO_PRESETS
from tokenwatt.spec.workload import Arrival, Distribution, Workload

__all__ = [
    "SLO",
    "SLO_PRESETS",
    "Arrival",
    "BenchSpec",
    "CustomAccelerator",
    "Distribution",
    "Endpoint",
    "HardwareSection",
    "ModelSection",
    "PowerSection",
    "PowerSourceSpec",
    "ProbeSettings",
    "SearchSettings",
    "SimSection",
    "Timeouts",
    "Workload",
    "format_validation_error",
    "load_spec",
    "parse_spec",
    "redact",
]


class BenchSpec(Section):
    """A whole benchmark: what to drive, what it serves, on what, with which load and goals."""

    name: str = Field("tokenwatt", description="label for results and reports")
    endpoint: Endpoint = Field(default_factory=Endpoint)
    model: ModelSection
    hardware: HardwareSection = Field(default_factory=HardwareSection)
    workload: Workload = Field(default_factory=Workload)
    slo: SLO = Field(default_factory=SLO)
    search: SearchSettings = Field(default_factory=SearchSettings)
    power: PowerSection = Field(default_factory=PowerSection)
    sim: SimSection = Field(default_factory=SimSection)


def format_validation_error(exc: ValidationError, *, source: str = "spec") -> str:
    """One line: every bad field path with what is wrong and, where pydantic says it, the input."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        parts.append(f"{loc or '<root>'}: {msg}{shown}")
    return f"{source}: " + "; ".join(parts)


def parse_spec(data: Any, *, source: str = "spec") -> BenchSpec:
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the spec must be a YAML mapping with at least a 'model' section"
        )
    try:
        return BenchSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, source=source)) from None


def load_spec(path: str | Path) -> BenchSpec:
    """Read and validate a spec file; every failure is a one-line ``SpecError``."""
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except OSError as exc:
        raise SpecError(f"{p}: cannot read spec ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{p}: not valid YAML{where}: {problem}") from None
    return parse_spec(data, source=str(p))


_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|passw(or)?d|authorization|cookie)", re.I)
_ENV_NAME_KEY = re.compile(r"_env$")


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def redact(value: Any) -> Any:
    """A copy with secrets removed: values under secret-looking keys (names of environment
    variables are kept, they are not secrets) and credentials inside URLs."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            if _SECRET_KEY.search(key) and not _ENV_NAME_KEY.search(key) and v is not None:
                out[k] = "***"
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str) and "://" in value and "@" in value:
        return _redact_url(value)
    return value
