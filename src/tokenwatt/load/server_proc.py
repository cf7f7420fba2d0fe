"""One inference server under the sweep's control: start, wait until healthy, stop with its
children, keep its log.

The server starts in its own session (``start_new_session``), so it leads a fresh process
group and everything it forks (vLLM's engine core and workers, a shell's children) belongs to
that group. Stopping signals the *group*: SIGTERM, then SIGKILL after ``stop_timeout_s`` for
whatever is still there, then a check that the group is empty. Signalling only the PID would
leave the workers holding GPU memory and the port, and the next point would fail or, worse,
measure a machine still busy with the last one. A child that leaves the group (``setsid``, a
classic double-forking daemon) is found afterwards by its session, the environment marker the
server starts with, or the port it listens on (``load.procscan``), stopped, and named in
``warnings``; one that cannot be stopped is ``leftover_cause``. A port someone else already
listens on before the start fails the point at once: its health check would ask the wrong
server.

The health wait is bounded and watches the process: a server that exits while starting
fails the point at once with its exit code and the last lines of its log, instead of
waiting out the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tokenwatt import httpget
from tokenwatt.load.procscan import (
    MARK_VAR,
    ServerMarks,
    find_leftovers,
    listeners,
    stop_leftovers,
)
from tokenwatt.spec import redact_text

__all__ = ["LOG_TAIL_LINES", "ServerFailedError", "ServerProcess", "group_alive"]

LOG_TAIL_LINES = 5
_HEALTH_POLL_S = 0.2
_HEALTH_REQUEST_S = 2.0
_HEALTH_MAX_BYTES = 1 << 20  # a health answer is bytes; a server streaming more is not ready


class ServerFailedError(Exception):
    """The server did not start, did not become healthy, or died: ``cause`` is one line."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def group_alive(pgid: int) -> bool:
    """True while a live (not zombie) process of group ``pgid`` exists. An orphan killed by
    us may stay a zombie until init reaps it (a container's PID 1 may never): it holds no
    memory, no GPU and no port, so it does not count."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    return any(_live_member(d, pgid) for d in proc.iterdir() if d.name.isdigit())


def _live_member(d: Path, pgid: int) -> bool:
    try:
        fields = d.joinpath("stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[2]) == pgid


def _health_ok(url: str) -> bool:
    """A 2xx answer within the bound (``httpget.get``: a trickling health URL cannot hold the
    wait past its deadline)."""
    try:
        httpget.get(url, timeout_s=_HEALTH_REQUEST_S, max_bytes=_HEALTH_MAX_BYTES)
    except (httpget.HttpError, ValueError):
        return False
    return True


@dataclass(slots=True)
class ServerProcess:
    """A server launched from ``argv`` with stdout and stderr in ``log_path``."""

    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    stop_timeout_s: float = 10.0
    port: int | None = None  # the port it serves on this machine (the health URL's)
    proc: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    killed: bool = False  # SIGKILL was needed: the server ignored SIGTERM
    marks: ServerMarks | None = None
    warnings: list[str] = field(default_factory=list)  # processes that outlived the stop
    leftover_cause: str | None = None  # some of them could not be stopped

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> None:
        """Launch in a new session (its own process group); an unstartable command fails."""
        before = listeners(self.port) if self.port else frozenset()
        if before:
            raise ServerFailedError(
                f"port {self.port} is already in use (pid {', '.join(map(str, sorted(before)))})"
                " before the server started: stop what listens there or use {port}"
            )
        mark = uuid.uuid4().hex
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **self.env, MARK_VAR: mark},
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServerFailedError(
                    f"could not start {self.argv[0]!r}: {exc.strerror or exc}"
                ) from None
        self.marks = ServerMarks(self.proc.pid, mark, self.port, before)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])

    def exited(self) -> int | None:
        """The exit code once the server has exited (not stopped by us), else None."""
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is not None and self.exit_code is None:
            self.exit_code = code
        return code

    def died_cause(self, when: str) -> str:
        tail = self.log_tail()
        return f"the server exited with code {self.exit_code} {when}" + (
            f"; its log ends: {tail}" if tail else ""
        )

    async def wait_healthy(self, url: str, timeout_s: float) -> float:
        """Poll ``url`` until 200; returns the seconds it took. Raises with the cause when
        the server exits first or ``timeout_s`` passes."""
        t0 = time.perf_counter()
        while True:
            if self.exited() is not None:
                raise ServerFailedError(self.died_cause("before it became healthy"))
            if await asyncio.to_thread(_health_ok, url):
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout_s:
                raise ServerFailedError(
                    f"the server was not healthy at {redact_text(url)} within {timeout_s:g} s"
                )
            await asyncio.sleep(_HEALTH_POLL_S)

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after the grace period, reap, then whatever left the
        group (``_stop_leftovers``); nothing left behind. Idempotent; safe when the server
        already exited (its group may still hold children, and its daemons may live on)."""
        proc = self.proc
        if proc is None:
            return
        self._stop_group(proc)
        self._stop_leftovers()

    def _stop_group(self, proc: subprocess.Popen[bytes]) -> None:
        pgid = proc.pid  # the session leader: its PID is the group's id
        self._signal(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while time.monotonic() < deadline:
            self.exited()
            if proc.returncode is not None and not group_alive(pgid):
                return
            time.sleep(0.05)
        if group_alive(pgid):
            self.killed = True
            self._signal(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        self.exited()
        end = time.monotonic() + 5.0
        while group_alive(pgid) and time.monotonic() < end:  # orphans reaped by init
            time.sleep(0.05)

    def _stop_leftovers(self) -> None:
        """Whatever left the group but is still the server's: stopped, and said so."""
        if self.marks is None:
            return
        found = find_leftovers(self.marks)
        self.marks = None  # once: stop() is idempotent
        if not found:
            return
        names = "; ".join(p.describe() for p in found)
        self.warnings.append(
            f"{len(found)} process(es) of the server outlived its stop outside its process "
            f"group: {names}; stopped (SIGTERM, then SIGKILL)"
        )
        left = stop_leftovers(found, self.stop_timeout_s)
        if left:
            self.leftover_cause = (
                "processes of the server could not be stopped: "
                + "; ".join(p.describe() for p in left)
                + " (another user's, or unkillable): the machine is not idle"
            )

    @staticmethod
    def _signal(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
