"""``tokenwatt sweep`` under its guard, with real processes: SIGTERM is honoured while the
sweep is stuck, and a sweep killed outright leaves no server behind.

The sweep runs the fake server (never healthy, so the sweep sits in its health wait with the
server up). A stuck sweep is made with SIGSTOP (a stopped process handles no signal, as a
process held for minutes inside one C call handles none), a killed one with SIGKILL (the
out-of-memory killer's signal)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from test_sweep_server import alive
from tokenwatt.load.sweep_guard import STOP_MARGIN_S
from tokenwatt.sweep_result import load_sweep

FAKE = str(Path(__file__).with_name("fake_server.py"))
STOP_S = 0.5


def start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    doc = {
        "name": "guarded",
        "server": {
            "command": "{python} {fake} {port} never-healthy",
            "health_url": "http://127.0.0.1:{port}/health",
            "health_timeout_s": 120,
            "stop_timeout_s": STOP_S,
        },
        "vars": {"python": sys.executable, "fake": FAKE},
        "points": [{"n": 1}, {"n": 2}],
        "bench": {
            "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
            "model": {"source": "qwen3-8b"},
            "hardware": {"accelerator": "h100-sxm"},
        },
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    cmd = [sys.executable, "-m", "tokenwatt", "sweep", str(tmp_path / "sweep.yaml"), "-o", str(out)]
    guard = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return guard, out


def server_pids(out: Path) -> tuple[int, int]:
    """(the worker's PID, the fake server's forked child) once the server listens."""
    log = out / "points" / "00-n=1" / "server.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        m = re.search(r"child (\d+)", text)
        if m and "listening" in text:
            server = _ppid(int(m.group(1)))
            return _ppid(server), int(m.group(1))
        time.sleep(0.05)
    raise AssertionError("the server never started")


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_sigterm_is_forwarded_and_the_sweep_stops_in_order(tmp_path: Path) -> None:
    guard, out = start(tmp_path)
    worker, child = server_pids(out)
    assert _ppid(worker) == guard.pid
    guard.send_signal(signal.SIGTERM)
    text, _ = guard.communicate(timeout=60)
    assert guard.returncode == 143, text
    assert not alive(child) and not alive(worker)
    sweep = load_sweep(out)
    assert sweep.interrupted and [p.status for p in sweep.points] == ["interrupted"]


def test_a_killed_sweep_leaves_no_server(tmp_path: Path) -> None:
    guard, out = start(tmp_path)
    worker, child = server_pids(out)
    os.kill(worker, signal.SIGKILL)
    text, _ = guard.communicate(timeout=60)
    assert guard.returncode == 128 + signal.SIGKILL, text
    assert "killed by signal 9" in text and "stopped what it had started" in text
    assert not alive(child), "the server outlived its killed sweep"
    sweep = load_sweep(out)  # the point in flight, as the worker left it, and the guard's word
    assert sweep.interrupted and [p.status for p in sweep.points] == ["interrupted"]
    assert any("killed by signal 9" in w for w in sweep.warnings)


@pytest.mark.slow
def test_sigterm_is_honoured_while_the_sweep_is_stuck(tmp_path: Path) -> None:
    guard, out = start(tmp_path)
    worker, child = server_pids(out)
    os.kill(worker, signal.SIGSTOP)  # holds no signal handler: as stuck as a process gets
    guard.send_signal(signal.SIGTERM)
    # ends after its grace (2 x STOP_S + STOP_MARGIN_S) and one stop of the leftovers
    text, _ = guard.communicate(timeout=2 * STOP_S + STOP_MARGIN_S + 60)
    assert guard.returncode == 143, text
    assert f"did not stop within {2 * STOP_S + STOP_MARGIN_S:g} s" in text
    assert not alive(child) and not alive(worker)
