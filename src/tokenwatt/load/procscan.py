"""The processes a server left behind, found in ``/proc`` four ways, and the stop of them.

Why four: a server stopped by signalling its process group takes everything that stayed in the
group, but a child may leave it. ``setsid`` makes a new session and group; a classic daemon
forks, calls ``setsid``, forks again and lets the middle process exit, so its parent is init
and nothing links it to the server's PID. What still links it:

* its **session** or **group** id, for a child that changed only one of them;
* the **environment**: the server is started with a marker variable
  (``TOKENWATT_SERVER_MARK``) that every descendant inherits unless it rebuilds its
  environment from nothing;
* the **listening port**: a server is for its port, so whatever listens on the health URL's
  port after the stop, and did not before the start, is the server's (the socket's inode in
  ``/proc/net/tcp`` and ``tcp6``, its owner through ``/proc/PID/fd``).

Only this user's processes can be read or signalled; a leftover that cannot be stopped is
reported with its reason. Linux only: elsewhere nothing is found (the process group stop
still runs).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MARK_VAR",
    "Leftover",
    "ServerMarks",
    "find_leftovers",
    "find_marked",
    "listeners",
    "stop_leftovers",
]

MARK_VAR = "TOKENWATT_SERVER_MARK"
_PROC = Path("/proc")
_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


@dataclass(frozen=True, slots=True)
class ServerMarks:
    """What ties a process to one server: its session (= its group, = the leader's PID, since
    the server starts a new session), the environment marker, the port it serves and the
    processes that already listened there before it started (not ours)."""

    sid: int
    mark: str
    port: int | None = None
    listeners_before: frozenset[int] = frozenset()


@dataclass(slots=True)
class Leftover:
    """A live process of the server's after its stop, and how it was found."""

    pid: int
    name: str
    found_by: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"pid {self.pid} ({self.name}, by {' and '.join(self.found_by)})"


def _stat(pid_dir: Path) -> tuple[str, str, int, int] | None:
    """(name, state, pgid, sid) of a process, None if it is gone."""
    try:
        text = pid_dir.joinpath("stat").read_text()
    except OSError:
        return None
    name = text[text.find("(") + 1 : text.rfind(")")]
    fields = text[text.rfind(")") + 1 :].split()
    return name, fields[0], int(fields[2]), int(fields[3])


def _has_mark(pid_dir: Path, mark: bytes) -> bool:
    try:
        return mark in pid_dir.joinpath("environ").read_bytes()
    except OSError:  # another user's process, or gone
        return False


def _socket_inodes(port: int) -> set[str]:
    """Inodes of the sockets listening on ``port`` (any address, IPv4 or IPv6)."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = _PROC.joinpath("net", table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _owns(pid_dir: Path, links: set[str]) -> bool:
    try:
        fds = list(pid_dir.joinpath("fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd) in links:
                return True
    return False


def _pids() -> list[Path]:
    try:
        return [d for d in _PROC.iterdir() if d.name.isdigit()]
    except OSError:
        return []


def listeners(port: int) -> frozenset[int]:
    """The PIDs (readable by this user) holding a socket that listens on ``port``."""
    links = {f"socket:[{i}]" for i in _socket_inodes(port)}
    if not links:
        return frozenset()
    return frozenset(int(d.name) for d in _pids() if _owns(d, links))


def find_leftovers(marks: ServerMarks) -> list[Leftover]:
    """Every live process (zombies hold nothing and are skipped) tied to the server."""
    me = os.getpid()
    mark = f"{MARK_VAR}={marks.mark}".encode()
    on_port = listeners(marks.port) - marks.listeners_before if marks.port else frozenset()
    found: list[Leftover] = []
    for d in _pids():
        pid = int(d.name)
        st = _stat(d)
        if pid == me or st is None or st[1] in "ZX":
            continue
        name, _, pgid, sid = st
        why = [
            what
            for what, hit in (
                ("session", sid == marks.sid),
                ("process group", pgid == marks.sid),
                ("environment", _has_mark(d, mark)),
                (f"listening port {marks.port}", pid in on_port),
            )
            if hit
        ]
        if why:
            found.append(Leftover(pid, name, why))
    return found


def find_marked(var: str, value: str) -> list[Leftover]:
    """Every live process (but this one) whose environment holds ``var=value``."""
    me, mark = os.getpid(), f"{var}={value}".encode()
    found = []
    for d in _pids():
        st = _stat(d)
        if int(d.name) != me and st is not None and st[1] not in "ZX" and _has_mark(d, mark):
            found.append(Leftover(int(d.name), st[0], ["environment"]))
    return found


def _alive(pid: int) -> bool:
    st = _stat(_PROC / str(pid))
    return st is not None and st[1] not in "ZX"


def stop_leftovers(found: list[Leftover], grace_s: float) -> list[Leftover]:
    """SIGTERM each, SIGKILL what is left after ``grace_s``; returns those still alive (not
    ours to signal, or unkillable)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for p in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, sig)
        deadline = time.monotonic() + wait_s
        while any(_alive(p.pid) for p in found) and time.monotonic() < deadline:
            time.sleep(0.05)
        found = [p for p in found if _alive(p.pid)]
        if not found:
            break
    return found
