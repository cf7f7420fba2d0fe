"""The sweep's guard: a small parent process that keeps SIGTERM prompt and leaves no server.

Why a parent: the sweep honours SIGINT and SIGTERM on its event loop, which runs only between
steps. A step that holds the interpreter for minutes (a spec that expands to gigabytes inside
a C serializer was seen to hold it ten minutes) delays the signal that long, and a sweep killed
outright (the kernel's out-of-memory killer, SIGKILL) stops nothing: its server is orphaned.
Neither can be fixed inside the process that is stuck or dead, so ``tokenwatt sweep`` runs the
sweep in a worker process (its own process group, so the terminal's Ctrl-C reaches the guard
alone) and the guard:

* forwards each SIGINT and SIGTERM it gets to the worker, once, which then stops as before
  (the probe in flight written, the server stopped, ``sweep.json`` marked interrupted);
* gives the worker ``grace_s`` (two server stop timeouts and ``STOP_MARGIN_S``: the longest
  an orderly stop takes) and then kills it;
* after a worker that died by a signal (killed by the guard, the OOM killer, anyone), stops
  every process that carries the run's environment marker (``RUN_MARK_VAR``, inherited by the
  worker's servers and their children, ``load.procscan``), marks ``sweep.json`` interrupted
  with a warning naming what was stopped, and exits 128 + the first signal it received (or
  that killed the worker).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from tokenwatt.errors import ReportError
from tokenwatt.load.procscan import find_marked, stop_leftovers
from tokenwatt.sweep_result import load_sweep, write_sweep

__all__ = ["RUN_MARK_VAR", "STOP_MARGIN_S", "WORKER_VAR", "GuardOutcome", "guard_sweep"]

RUN_MARK_VAR = "TOKENWATT_SWEEP_RUN"  # every process of one sweep run carries it
WORKER_VAR = "TOKENWATT_SWEEP_WORKER"  # set in the worker: run the sweep here, no guard
STOP_MARGIN_S = 10.0  # beyond two server stop timeouts: the bench's partial write, the reaping
_POLL_S = 0.1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(slots=True)
class GuardOutcome:
    """How the worker ended: its exit code, the signal that stopped the run (if any), and
    what the guard had to do (kill it, stop its servers)."""

    exit_code: int
    signal: int | None = None
    killed_worker: bool = False
    notes: list[str] = field(default_factory=list)


def guard_sweep(argv: list[str], out_dir: Path, stop_timeout_s: float) -> GuardOutcome:
    """Run the sweep worker ``argv`` under the guard (module doc)."""
    mark = uuid.uuid4().hex
    env = {**os.environ, WORKER_VAR: "1", RUN_MARK_VAR: mark}
    proc = subprocess.Popen(argv, env=env, process_group=0)
    got: list[int] = []

    def forward(sig: int, _frame: FrameType | None) -> None:
        got.append(sig)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)

    previous = {sig: signal.signal(sig, forward) for sig in _STOP_SIGNALS}
    try:
        out = _wait(proc, got, grace_s=2 * stop_timeout_s + STOP_MARGIN_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if out.exit_code < 0 or out.killed_worker:  # died by a signal: nothing stopped its servers
        _clean_up(out, mark, stop_timeout_s, out_dir)
    return out


def _wait(proc: subprocess.Popen[bytes], got: list[int], grace_s: float) -> GuardOutcome:
    first_at: float | None = None
    while True:
        try:
            code = proc.wait(timeout=_POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        if got and first_at is None:
            first_at = time.monotonic()
        if first_at is not None and time.monotonic() - first_at > grace_s:
            proc.kill()
            code = proc.wait()
            return GuardOutcome(
                128 + got[0],
                got[0],
                killed_worker=True,
                notes=[f"the sweep did not stop within {grace_s:g} s of the signal: killed"],
            )
    return GuardOutcome(code, got[0] if got else None)


def _clean_up(out: GuardOutcome, mark: str, stop_timeout_s: float, out_dir: Path) -> None:
    if not out.killed_worker:
        died = -out.exit_code
        out.notes.append(f"the sweep process was killed by signal {died}")
        out.exit_code = 128 + (out.signal or died)
    found = find_marked(RUN_MARK_VAR, mark)
    if found:
        left = stop_leftovers(found, stop_timeout_s)
        stopped = "; ".join(p.describe() for p in found if p not in left)
        out.notes.append(f"stopped what it had started: {stopped or 'nothing'}")
        if left:
            out.notes.append(
                "could not stop: " + "; ".join(p.describe() for p in left) + " (stop them)"
            )
    with contextlib.suppress(ReportError, OSError):
        sweep = load_sweep(out_dir)
        sweep.interrupted = True
        sweep.warnings += out.notes
        write_sweep(sweep, out_dir)
