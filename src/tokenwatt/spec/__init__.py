"""The benchmark spec: one YAML file describing endpoint, model, node, workload, SLO,
search and power. Validated once at the edge; errors name the field path and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from tokenwatt.errors import SpecError
from tokenwatt.spec._base import Section
from tokenwatt.spec.endpoint import Endpoint, Timeouts
from tokenwatt.spec.engine import EngineSection
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
    "EngineSection",
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
    engine: EngineSection = Field(default_factory=EngineSection)


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


# Secret-looking keys: api_key, password, authorization, ...; "token" only as a whole word at
# the end (auth_token, token), never the token counts a spec is full of (input_tokens, ...).
_SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|passw(or)?d|authorization|cookie|credential|(^|[_-])token$)", re.I
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I)


def redact(value: Any) -> Any:
    """A copy with secrets removed: values under secret-looking keys (keys ending in ``_env``
    name environment variables and are kept) and credentials inside URLs."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            secret = _SECRET_KEY.search(key) and not key.lower().endswith("_env")
            out[k] = "***" if secret and v is not None else redact(v)
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str) and "@" in value:
        return _URL_CREDENTIALS.sub(r"\g<scheme>***@", value)
    return value
