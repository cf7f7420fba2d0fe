"""The benchmark spec: one YAML file describing endpoint, model, node, workload, SLO,
search and power. Validated once at the edge; errors name the field path and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from tokenwatt.bounded import SPEC_MAX_BYTES, load_document
from tokenwatt.errors import SpecError
from tokenwatt.spec._base import Section
from tokenwatt.spec.endpoint import Endpoint, Timeouts
from tokenwatt.spec.engine import EngineSection
from tokenwatt.spec.hardware import CustomAccelerator, HardwareSection
from tokenwatt.spec.model import ModelSection
from tokenwatt.spec.power import PowerSection, PowerSourceSpec
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


def parse_spec(data: Any, *, source: str = "spec") -> BenchSpec:
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the spec must be a YAML mapping with at least a 'model' section"
        )
    try:
        return BenchSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, source=source)) from None


def read_spec_document(path: str | Path, *, what: str = "spec") -> Any:
    """A spec-like YAML file as plain data, read by the one bounded loader (size, depth,
    aliases expanded, finite numbers); every failure a one-line ``SpecError`` naming it."""
    return load_document(path, max_bytes=SPEC_MAX_BYTES, error=SpecError, fmt="yaml", what=what)


def load_spec(path: str | Path) -> BenchSpec:
    """Read and validate a spec file; every failure is a one-line ``SpecError``."""
    return parse_spec(read_spec_document(path), source=str(path))


# Secret-looking keys: api_key, password, authorization, ...; "token" only as a whole word at
# the end (auth_token, token), never the token counts a spec is full of (input_tokens, ...).
_SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|passw(or)?d|authorization|cookie|credential|(^|[_-])token$)", re.I
)
# user:password@ in a URL's authority (greedy to the last @, since a password may hold one)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/?#\s]*@", re.I)
# secret-looking query parameters: api_key=, token=, access_token=, password=, sig=, ...
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;][^=&;#\s]*(?:key|token|secret|passw(?:or)?d|auth|sig(?:nature)?|credential)"
    r"[^=&;#\s]*=)[^&;#\s]*",
    re.I,
)
_SHOWN_SECRET_MIN = 4  # shorter "secrets" would blank ordinary words


def redact_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with credentials removed: ``user:pass@`` in URLs, secret-looking query
    parameters, and every literal value in ``secrets`` (an API key, a BMC password).

    The one redaction of free text: spec values, error messages, progress lines and logs
    all pass through here, so a secret cannot leak by a path that redacts differently.
    """
    for secret in secrets:
        if secret and len(secret) >= _SHOWN_SECRET_MIN and secret in text:
            text = text.replace(secret, "***")
    if "://" in text and "@" in text:
        text = _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)
    if "=" in text:
        text = _QUERY_SECRET.sub(r"\g<name>***", text)
    return text


def redact(value: Any) -> Any:
    """A copy with secrets removed: values under secret-looking keys (keys ending in ``_env``
    name environment variables and are kept) and, in every string, what ``redact_text``
    removes."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            secret = _SECRET_KEY.search(key) and not key.lower().endswith("_env")
            out[k] = "***" if secret and v is not None else redact(v)
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
