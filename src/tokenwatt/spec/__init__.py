"""The benchmark spec: one YAML file describing endpoint, model, node, workload, SLO,
search and power. Validated once at the edge; errors name the field path and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from pydantic import Field, ValidationError, model_validator

from tokenwatt.bounded import SPEC_MAX_BYTES, load_document
from tokenwatt.errors import SpecError
from tokenwatt.spec._base import Section
from tokenwatt.spec.endpoint import Endpoint, Timeouts
from tokenwatt.spec.engine import READ_FILES, EngineSection, check_sim_drafter
from tokenwatt.spec.graded import GradedSection
from tokenwatt.spec.hardware import CustomAccelerator, HardwareSection
from tokenwatt.spec.model import ModelSection
from tokenwatt.spec.power import PowerSection, PowerSourceSpec
from tokenwatt.spec.redact import redact, redact_text
from tokenwatt.spec.search import ProbeSettings, SearchSettings
from tokenwatt.spec.server_metrics import ServerMetricsSection
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
    "GradedSection",
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
    "redact_text",
]


class BenchSpec(Section):
    """A whole benchmark: what to drive, what it serves, on what, with which load and goals."""

    name: str = Field("tokenwatt", description="label for results and reports")
    endpoint: Endpoint = Field(
        description="required: what to drive (an http(s) URL, or 'sim' for the simulator)"
    )
    model: ModelSection
    hardware: HardwareSection = Field(
        description="required: the accelerator and GPU count serving the model (MBU, per-GPU)"
    )
    workload: Workload = Field(default_factory=Workload)
    slo: SLO = Field(default_factory=SLO)
    search: SearchSettings = Field(default_factory=SearchSettings)
    power: PowerSection = Field(default_factory=PowerSection)
    sim: SimSection = Field(default_factory=SimSection)
    server_metrics: ServerMetricsSection = Field(default_factory=ServerMetricsSection)
    engine: EngineSection = Field(default_factory=EngineSection)
    graded: GradedSection | None = Field(
        None, description="a slice of each probe's requests carrying tasks graded for accuracy"
    )

    @model_validator(mode="after")
    def _one_drafter(self) -> Self:
        """The simulator runs the drafter the engine section declares (``check_sim_drafter``)."""
        if self.endpoint.is_sim:
            check_sim_drafter(self.engine.drafter, self.sim.speculative)
        return self

    @model_validator(mode="after")
    def _accuracy_needs_graded(self) -> Self:
        """An accuracy floor needs graded answers to judge."""
        if self.slo.accuracy_min is not None and self.graded is None:
            raise ValueError(
                "slo.accuracy_min needs graded answers; add a graded: section (e.g. "
                "graded: {fraction: 0.2})"
            )
        return self


# ``endpoint`` and ``hardware`` change every figure, so neither has a default: a spec without
# ``hardware`` once reported a 70B model on 8 GPUs as 1 × H100 at MBU 200%, and one without
# ``endpoint`` quietly benchmarked the simulator. Their "Field required" says how to give them.
REQUIRED_HINTS = {
    "endpoint": "endpoint is required (endpoint.url: http://HOST:PORT/v1, or 'sim' for the "
    "simulator; or --base-url)",
    "hardware": "hardware is required (hardware.accelerator from `tokenwatt hardware` and "
    "hardware.gpus; or --set hardware.accelerator=NAME)",
}


ERROR_LINE_MAX = 300  # characters of one spec error line (a 200,000-character value was echoed)
_SHOWN_MAX = 60  # characters of one offending value or key shown in it


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_validation_error(exc: ValidationError, *, source: str = "spec") -> str:
    """One line: every bad field path with what is wrong and, where pydantic says it, the input
    (redacted, each value and the whole line cut to a readable length)."""
    parts = []
    for err in exc.errors():
        loc = ".".join(
            _cut(str(p), _SHOWN_MAX) for p in err["loc"] if not str(p).startswith("function-")
        )
        msg = _cut(err["msg"].removeprefix("Value error, "), _SHOWN_MAX * 3)
        if err["type"] == "missing" and len(err["loc"]) == 1 and err["loc"][0] in REQUIRED_HINTS:
            loc, msg = "", REQUIRED_HINTS[str(err["loc"][0])]
        got = err.get("input")
        shown = (
            ""
            if isinstance(got, dict | list) or got is None
            else f" (got {_cut(redact_text(repr(got)), _SHOWN_MAX)})"
        )
        parts.append(f"{loc}: {msg}{shown}" if loc else msg)
    return _cut(f"{_cut(source, _SHOWN_MAX * 2)}: " + "; ".join(parts), ERROR_LINE_MAX)


def parse_spec(data: Any, *, source: str = "spec", read_files: bool = True) -> BenchSpec:
    """Validate a spec; every failure is a one-line ``SpecError``. ``read_files``: read and
    check the files it names (``engine.expert_load_file``) now, before any load."""
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the spec must be a YAML mapping with at least a 'model' section"
        )
    try:
        return BenchSpec.model_validate(data, context={READ_FILES: read_files})
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, source=source)) from None


def read_spec_document(path: str | Path, *, what: str = "spec") -> Any:
    """A spec-like YAML file as plain data, read by the one bounded loader (size, depth,
    aliases expanded, finite numbers); every failure a one-line ``SpecError`` naming it."""
    return load_document(path, max_bytes=SPEC_MAX_BYTES, error=SpecError, fmt="yaml", what=what)


def load_spec(path: str | Path, *, read_files: bool = True) -> BenchSpec:
    """Read and validate a spec file; every failure is a one-line ``SpecError``."""
    return parse_spec(read_spec_document(path), source=str(path), read_files=read_files)
