"""A sweep: for every point, start the server, wait until healthy, run ``bench``, stop it.

``run_sweep(spec, bench_doc, out_dir)`` walks the points of a ``SweepSpec`` in order. Each point
gets a free loopback port, its own folder ``out_dir/points/NN-label/`` holding the bench's
``result.json`` (``load.bench.run_bench``, unchanged) and the server's log, and a record in
``out_dir/sweep.json``, rewritten after every point. A point that fails (the server does not
start, is not healthy in time, dies during the bench, or the bench refuses its spec) is
recorded with its cause and the sweep goes on. Ctrl-C ends the bench in flight (which writes
what it measured), stops the server and its children, writes the sweep and stops.

The server runs in its own process group (``load.server_proc``), so stopping it takes every
child with it and the terminal's Ctrl-C reaches only the sweep, which then stops the server
itself. Processes that left the group (``setsid``, daemons) are found by session, environment
marker and the health URL's port, stopped, and named in the point's ``warnings``; a point
whose leftovers cannot be stopped fails with that cause.
"""

from __future__ import annotations

import asyncio
import copy
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tokenwatt import __version__, httpget
from tokenwatt.errors import TokenwattError
from tokenwatt.load.bench import BenchEvent, run_bench
from tokenwatt.load.server_proc import ServerFailedError, ServerProcess
from tokenwatt.result import BenchResult
from tokenwatt.spec import BenchSpec, parse_spec, redact, redact_text
from tokenwatt.spec.dotted import put_dotted
from tokenwatt.spec.redact import secrets_in
from tokenwatt.spec.sweep import (
    Scalar,
    SweepPointSettings,
    SweepSpec,
    expand_points,
    point_label,
    render,
    render_command,
    render_value,
)
from tokenwatt.sweep_result import SweepPoint, SweepResult, operating_point, write_sweep

__all__ = ["SweepEvent", "local_port", "point_spec", "run_sweep"]

SIM_VERSION_PREFIX = "tokenwatt-sim"


@dataclass(frozen=True, slots=True)
class SweepEvent:
    """What a progress display needs: a point starting or done, or a bench event inside it."""

    kind: str  # point_start, server_healthy, point_done, bench
    index: int
    label: str
    point: SweepPoint | None = None
    bench: BenchEvent | None = None
    message: str | None = None


OnSweepEvent = Callable[[SweepEvent], None]


def free_port() -> int:
    """A loopback port nobody listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}


def local_port(url: str) -> int | None:
    """The port of a health URL on this machine (a loopback host), where the server listens
    and its leftovers can be found; None for another host."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None
    return port if (parts.hostname or "") in _LOCAL_HOSTS else None


def _folder_name(index: int, label: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_.=" else "-" for c in label)[:80]
    return f"{index:02d}-{safe}"


def point_spec(doc: dict[str, Any], spec: SweepSpec, values: dict[str, Scalar]) -> BenchSpec:
    """The bench spec of one point: ``doc`` with the sweep's templated ``set`` laid over it
    (values read as YAML, like ``--set``), named after the sweep and the point."""
    point_doc = copy.deepcopy(doc)
    for key, raw in spec.set.items():
        put_dotted(point_doc, key, render_value(raw, values, what=f"set.{key}"), what="sweep set")
    point_doc["name"] = f"{spec.name}-{values['point']}"
    return parse_spec(point_doc, source=f"sweep point {values['point']}")


def _is_simulator(health_url: str) -> bool:
    """The built-in simulator answers ``/version`` with ``tokenwatt-sim …``: its points are
    marked simulated whatever the sweep file says."""
    base = health_url.split("://", 1)[-1].split("/", 1)[0]
    scheme = health_url.split("://", 1)[0]
    try:
        body = httpget.get(f"{scheme}://{base}/version", timeout_s=2.0, max_bytes=1 << 16)
    except (httpget.HttpError, ValueError):
        return False
    return SIM_VERSION_PREFIX in body[:512].decode("utf-8", "replace")


@dataclass(slots=True)
class _Point:
    index: int
    settings: SweepPointSettings
    values: dict[str, Scalar]
    record: SweepPoint
    folder: Path
    secrets: list[str] = field(default_factory=list)  # hidden in every line kept (redact)


def _new_point(spec: SweepSpec, out: Path, index: int, settings: SweepPointSettings) -> _Point:
    values: dict[str, Scalar] = {**spec.vars, **settings, "port": free_port(), "point": index}
    label = point_label(settings)
    name = _folder_name(index, label)
    record = SweepPoint(
        index=index,
        label=label,
        settings=settings,
        command=[],
        folder=f"points/{name}",
        log_file=f"points/{name}/server.log",
        status="failed",
    )
    return _Point(index, settings, values, record, out / "points" / name)


def _prepare(
    p: _Point, spec: SweepSpec, doc: dict[str, Any]
) -> tuple[ServerProcess, str, BenchSpec]:
    """The point's server (not started), health URL and bench spec; a template or spec error
    is a ``TokenwattError`` naming the field."""
    argv = render_command(spec.server.command, p.values)
    health = render(spec.server.health_url, p.values, what="server.health_url")
    env = {k: render(v, p.values, what=f"server.env.{k}") for k, v in spec.server.env.items()}
    bench_spec = point_spec(doc, spec, p.values)
    p.secrets = secrets_in([health, env, spec.vars, bench_spec.model_dump(mode="json")])
    p.record.command = [redact_text(a, p.secrets) for a in argv]
    server = ServerProcess(
        argv,
        p.folder / "server.log",
        env=env,
        stop_timeout_s=spec.server.stop_timeout_s,
        port=local_port(health),
    )
    return server, health, bench_spec


async def _bench_point(
    p: _Point,
    server: ServerProcess,
    health: tuple[str, float],
    bench_spec: BenchSpec,
    on_event: OnSweepEvent | None,
) -> BenchResult:
    """Start, wait until healthy (URL, timeout), bench; the caller stops the server."""
    rec = p.record
    server.start()
    rec.health_s = await server.wait_healthy(*health)
    simulated = await asyncio.to_thread(_is_simulator, health[0])
    if on_event is not None:
        on_event(SweepEvent("server_healthy", p.index, rec.label, message=f"{rec.health_s:.1f} s"))

    def forward(ev: BenchEvent) -> None:
        if on_event is not None:
            on_event(SweepEvent("bench", p.index, rec.label, bench=ev))

    result = await run_bench(bench_spec, p.folder, on_event=forward, sim_mode="subprocess")
    rec.point = operating_point(result, name=rec.label, simulated=simulated)
    code = server.exited()
    if code is not None:
        rec.server_exit_code = code
        rec.status, rec.cause = "failed", server.died_cause("during the bench")
    else:
        rec.status = "interrupted" if result.interrupted else "ok"
    return result


async def _run_point(
    p: _Point, spec: SweepSpec, doc: dict[str, Any], on_event: OnSweepEvent | None
) -> bool:
    """Run one point, always stopping its server; True when the sweep must stop (Ctrl-C)."""
    rec = p.record
    try:
        server, health, bench_spec = _prepare(p, spec, doc)
    except TokenwattError as exc:
        rec.cause = redact_text(str(exc))
        return False
    try:
        wait = (health, spec.server.health_timeout_s)
        result = await _bench_point(p, server, wait, bench_spec, on_event)
        return result.interrupted
    except ServerFailedError as exc:
        rec.cause, rec.server_exit_code = exc.cause, server.exit_code
    except TokenwattError as exc:  # the bench refused the point (target unreachable, ...)
        rec.cause = str(exc)
    except asyncio.CancelledError:
        rec.status, rec.cause = "interrupted", "stopped by Ctrl-C"
        raise
    except Exception as exc:  # one broken point must not lose the sweep; the cause says what
        rec.cause = f"{type(exc).__name__}: {exc}"
    finally:
        server.stop()  # synchronous: a second Ctrl-C must not skip it
        rec.server_killed = server.killed
        rec.warnings += server.warnings
        if server.leftover_cause is not None:
            rec.status, rec.cause = "failed", server.leftover_cause
        if rec.cause is not None:  # a log tail or an error may echo a URL or a password
            rec.cause = redact_text(rec.cause, p.secrets)
    return False


def _write_in_flight(result: SweepResult, rec: SweepPoint, out: Path) -> None:
    """``sweep.json`` with the point about to run recorded as interrupted: what the file says
    if the sweep dies during the point (killed, out of memory); the point's end rewrites it."""
    rec.status, rec.cause = "interrupted", "the sweep ended during this point"
    write_sweep(result, out)
    rec.status, rec.cause = "failed", None


async def run_sweep(
    spec: SweepSpec,
    bench_doc: dict[str, Any],
    out_dir: str | Path,
    *,
    on_event: OnSweepEvent | None = None,
) -> SweepResult:
    """Run every point; ``out_dir/sweep.json`` is rewritten after each. Ctrl-C (cancellation)
    stops the server in flight, writes the sweep with ``interrupted: true`` and re-raises."""
    out = Path(out_dir)
    points = expand_points(spec)
    result = SweepResult(
        tool_version=__version__,
        name=spec.name,
        sweep=redact(spec.model_dump(mode="json")),
        started_at=datetime.now(UTC),
    )
    try:
        for index, settings in enumerate(points):
            p = _new_point(spec, out, index, settings)
            result.points.append(p.record)
            _write_in_flight(result, p.record, out)
            if on_event is not None:
                on_event(SweepEvent("point_start", index, p.record.label))
            try:
                stop = await _run_point(p, spec, bench_doc, on_event)
            finally:  # a var that is a password only in a rendered URL: hidden in the file too
                result.sweep = redact(result.sweep, p.secrets)
            write_sweep(result, out)
            if on_event is not None:
                on_event(SweepEvent("point_done", index, p.record.label, point=p.record))
            if stop:
                result.interrupted = True
                break
    except asyncio.CancelledError:
        result.interrupted = True
        raise
    finally:
        result.ended_at = datetime.now(UTC)
        write_sweep(result, out)
    return result
