"""The result of a sweep, ``DIR/sweep.json``: one record per point, each naming its folder.

Every point's own run is a normal ``result.json`` in ``DIR/points/NN-label/`` (with the
server's log beside it); this file lists the points in run order with their settings, the
launch line, how the point ended (ok, failed with its cause, interrupted) and the operating
point copied from its result, so a reader of the sweep needs nothing else. Views (the sweep's
HTML picture) read this file or any set of ``result.json`` files through ``operating_point``.

Figures of an operating point (the boundary probe of the point's search):

    goodput_output_tokens_per_s_per_gpu   SLO goodput ÷ N_GPU (the throughput axis)
    tokens_per_s_per_user                 1 ÷ median TPOT at the boundary (the interactivity
                                          axis; InferenceX and the peers' Pareto plots)
    tokens_per_joule, joules_per_output_token, joules_per_total_token   the boundary's energy
    usd_per_mtok                          ``CostFigures.usd_per_mtok`` at the boundary, the
                                          energy's part left out where the energy is invalid
    device_unit                           what "per device" means on this hardware: GPU,
                                          accelerator (TPU, Gaudi, Trainium), CPU socket (a
                                          bandwidth measured by ``hardware --measure``) or node
    lower_bound                           the search stopped at its probe or rate limit
                                          (``LOWER_BOUND_STOPS``): the boundary is at least the
                                          highest passing rate, not found

Schema changelog (``SWEEP_SCHEMA_VERSION``):

    1 - first version. Additive: ``OperatingPoint`` ``device_unit``, ``slo``, the prices,
        ``stop_reason``, ``lower_bound``, ``energy_cause``.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
)

from tokenwatt.bounded import RESULT_WHOLE_MAX_BYTES, load_document
from tokenwatt.errors import ReportError
from tokenwatt.hardware import Accelerator
from tokenwatt.result import BenchResult, CostFigures, EnergySummary, SloSettings
from tokenwatt.spec import redact

__all__ = [
    "LOWER_BOUND_STOPS",
    "SWEEP_FILE",
    "SWEEP_SCHEMA_VERSION",
    "OperatingPoint",
    "SweepPoint",
    "SweepResult",
    "device_unit",
    "load_sweep",
    "operating_point",
    "write_sweep",
]

SWEEP_FILE = "sweep.json"
SWEEP_SCHEMA_VERSION = 1
PointStatus = Literal["ok", "failed", "interrupted"]
# search stops that leave the boundary unfound: it is at least the highest passing rate
LOWER_BOUND_STOPS = frozenset({"max_probes", "max_rate"})
_GPU_VENDORS = frozenset({"nvidia", "amd"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OperatingPoint(_Strict):
    """A run's figures at its SLO boundary (None where the run found none)."""

    name: str = Field(description="the run's name or the sweep point's label")
    simulated: bool
    gpus: int
    boundary: bool = Field(description="the search found a passing boundary")
    rate_rps: float | None = None
    goodput_output_tokens_per_s: float | None = None
    goodput_output_tokens_per_s_per_gpu: float | None = None
    tpot_p50_s: float | None = None
    tokens_per_s_per_user: float | None = Field(None, description="1 ÷ median TPOT")
    tokens_per_joule: float | None = None
    joules_per_output_token: float | None = None
    joules_per_total_token: float | None = None
    energy_valid: bool | None = Field(None, description="the energy audit's headline verdict")
    energy_cause: str | None = Field(None, description="invalid energy: the audit's verdict")
    usd_per_mtok: float | None = Field(
        None, description="$/Mtok at the boundary; the energy's part only when it is valid"
    )
    device_unit: str = Field("GPU", description="GPU, accelerator, CPU socket or node")
    slo: SloSettings | None = Field(None, description="the SLO the run was judged against")
    price_per_gpu_hour: float | None = Field(None, description="the spec's price per device-hour")
    price_per_kwh: float | None = None
    stop_reason: str | None = Field(None, description="why the search stopped (None: no search)")
    lower_bound: bool = Field(
        False, description="the search stopped at its probe or rate limit: boundary ≥ this"
    )


class SweepPoint(_Strict):
    """One point of the sweep: its settings, how its server ran, and what it measured."""

    index: int
    label: str
    settings: dict[str, str | int | float | bool]
    command: list[str] = Field(description="the launch line as run (argv)")
    folder: str = Field(description="relative to the sweep folder")
    log_file: str = Field(description="the server's stdout and stderr, relative")
    status: PointStatus
    cause: str | None = Field(None, description="why a point failed, one line")
    health_s: float | None = Field(None, description="launch → healthy")
    server_exit_code: int | None = Field(None, description="set when the server died on its own")
    server_killed: bool = Field(False, description="the server ignored SIGTERM: SIGKILL")
    warnings: list[str] = Field(
        default_factory=list, description="e.g. processes that outlived the stop, found, killed"
    )
    point: OperatingPoint | None = None

    @field_validator("cause", "command", "warnings")
    @classmethod
    def _redact_in(cls, v: Any) -> Any:
        return redact(v)  # a file written before redaction reached every line

    @field_serializer("cause", "command", "warnings")
    def _redact_out(self, v: Any) -> Any:
        return redact(v)  # whatever path filled them, no URL secret is written


class SweepResult(_Strict):
    schema_version: int = SWEEP_SCHEMA_VERSION
    tool_version: str
    name: str
    sweep: dict[str, Any] = Field(description="the sweep file as run (secrets removed)")
    started_at: datetime
    ended_at: datetime | None = None
    points: list[SweepPoint] = Field(default_factory=list)
    interrupted: bool = False
    warnings: list[str] = Field(default_factory=list)


def device_unit(accelerator: Accelerator | None) -> str:
    """What one of the run's N devices is: a GPU (NVIDIA, AMD), another accelerator from the
    catalog, a CPU socket (a bandwidth measured on this machine: a CPU engine), or, with no
    catalog entry to go by, the node."""
    if accelerator is None:
        return "node"
    if accelerator.confidence == "measured":
        return "CPU socket"
    if accelerator.vendor in _GPU_VENDORS:
        return "GPU"
    return "accelerator" if accelerator.vendor != "custom" else "node"


def _energy_cause(e: EnergySummary) -> str | None:
    """Why the headline energy is invalid: the audit's verdict for its scope, else its flags."""
    if e.valid:
        return None
    for a in e.audit:
        if a.scope == e.scope and not a.valid:
            return a.verdict
    return "; ".join(e.flags) or "the energy audit failed"


def _usd(cost: CostFigures | None, energy: EnergySummary | None) -> float | None:
    """$/Mtok without an invalid energy's part (a result written before that rule kept it)."""
    if cost is None:
        return None
    if energy is not None and not energy.valid:
        return cost.usd_per_mtok_gpu
    return cost.usd_per_mtok


def _context(result: BenchResult, name: str | None, simulated: bool) -> dict[str, Any]:
    """What every operating point states besides its figures: the SLO, the prices, the unit
    and how the search ended."""
    s, hw = result.search, result.spec.hardware
    stop = s.stop_reason if s is not None else None
    return {
        "name": name or result.name,
        "simulated": simulated or result.simulated,
        "gpus": result.gpus,
        "device_unit": device_unit(result.accelerator),
        "slo": result.slo,
        "price_per_gpu_hour": hw.price_per_gpu_hour,
        "price_per_kwh": hw.price_per_kwh,
        "stop_reason": stop,
    }


def operating_point(
    result: BenchResult, *, name: str | None = None, simulated: bool = False
) -> OperatingPoint:
    """The figures at the boundary of ``result`` (a bench run; a probe's one probe counts as
    its boundary when it passed). Simulated when the run drove the built-in simulator (its
    own or one it found at its URL) or the caller knows the server was one (a sweep of
    ``tokenwatt sim`` servers)."""
    b = result.boundary
    if b is None and result.search is None and len(result.probes) == 1:
        b = result.probes[0] if result.probes[0].slo_passed else None
    base = _context(result, name, simulated)
    if b is None:
        return OperatingPoint(boundary=False, **base)
    tpot = b.tpot_s.p50
    e = b.energy
    return OperatingPoint(
        boundary=True,
        rate_rps=b.rate_rps,
        goodput_output_tokens_per_s=b.goodput_output_tokens_per_s,
        goodput_output_tokens_per_s_per_gpu=b.goodput_output_tokens_per_s_per_gpu,
        tpot_p50_s=tpot,
        tokens_per_s_per_user=1.0 / tpot if tpot else None,
        tokens_per_joule=b.tokens_per_joule,
        joules_per_output_token=None if e is None else e.joules_per_output_token,
        joules_per_total_token=None if e is None else e.joules_per_total_token,
        energy_valid=None if e is None else e.valid,
        energy_cause=None if e is None else _energy_cause(e),
        usd_per_mtok=_usd(b.cost, e),
        lower_bound=base["stop_reason"] in LOWER_BOUND_STOPS,
        **base,
    )


def write_sweep(result: SweepResult, out_dir: Path) -> Path:
    """Atomically (re)write ``out_dir/sweep.json``: a crash mid-sweep keeps the last copy."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SWEEP_FILE
    fd, tmp = tempfile.mkstemp(prefix=".sweep-", suffix=".json", dir=out_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(result.model_dump_json(indent=2))
    os.replace(tmp, path)
    return path


def load_sweep(path: str | Path) -> SweepResult:
    """Read ``sweep.json`` (or the folder holding it); one-line ``ReportError`` on failure."""
    p = Path(path)
    if p.is_dir():
        p = p / SWEEP_FILE
    data = load_document(
        p, max_bytes=RESULT_WHOLE_MAX_BYTES, error=ReportError, fmt="json", what="the sweep"
    )
    if not isinstance(data, dict) or data.get("schema_version") != SWEEP_SCHEMA_VERSION:
        raise ReportError(f"{p}: not a sweep.json of schema {SWEEP_SCHEMA_VERSION}")
    try:
        return SweepResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ReportError(f"{p}: {where}: {first['msg']}") from None
