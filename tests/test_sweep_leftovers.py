"""Servers whose processes leave the process group: a child that calls ``setsid``, a classic
double-forking daemon, and one that also drops its environment. Real processes on 127.0.0.1:
after ``ServerProcess.stop`` and after a sweep point, the process that served the port is gone,
and the point names it in its warnings; a port already taken before the start fails the point.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import pytest

from test_sweep_server import alive, free_port
from tokenwatt.load.procscan import listeners
from tokenwatt.load.server_proc import ServerFailedError, ServerProcess
from tokenwatt.load.sweep import local_port, run_sweep
from tokenwatt.spec.sweep import SweepSpec

FAKE = str(Path(__file__).with_name("fake_server.py"))


def daemon_pid(log: Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"daemon (\d+)", log.read_text() if log.exists() else "")
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no daemon line in {log.read_text()}")


@pytest.mark.parametrize(
    ("mode", "found_by"),
    [
        ("setsid", "environment"),
        ("daemon", "environment"),
        ("daemon-noenv", "listening port"),
    ],
)
def test_processes_that_left_the_group_are_found_and_stopped(
    tmp_path: Path, mode: str, found_by: str
) -> None:
    port = free_port()
    proc = ServerProcess(
        [sys.executable, FAKE, str(port), mode], tmp_path / "server.log", stop_timeout_s=2,
        port=port,
    )  # fmt: skip
    proc.start()
    try:
        asyncio.run(proc.wait_healthy(f"http://127.0.0.1:{port}/health", 20))
        daemon = daemon_pid(tmp_path / "server.log")
        assert proc.pid is not None and daemon != proc.pid and alive(daemon)
    finally:
        proc.stop()
    assert not alive(daemon), "the daemon outlived the stop"
    assert not listeners(port)
    (warning,) = proc.warnings
    assert f"pid {daemon}" in warning and found_by in warning
    assert proc.leftover_cause is None


def test_the_control_a_group_stop_alone_leaves_the_daemon(tmp_path: Path) -> None:
    """Without the search, the daemon would live on: the group stop does not reach it."""
    port = free_port()
    proc = ServerProcess([sys.executable, FAKE, str(port), "daemon"], tmp_path / "s.log", port=port)
    proc.start()
    try:
        asyncio.run(proc.wait_healthy(f"http://127.0.0.1:{port}/health", 20))
        daemon = daemon_pid(tmp_path / "s.log")
        assert proc.proc is not None
        proc._stop_group(proc.proc)
        assert alive(daemon) and daemon in listeners(port)
    finally:
        proc.stop()
    assert not alive(daemon)


def test_a_port_taken_before_the_start_fails_at_once(tmp_path: Path) -> None:
    port = free_port()
    other = ServerProcess([sys.executable, FAKE, str(port), "ok"], tmp_path / "a.log")
    other.start()
    try:
        asyncio.run(other.wait_healthy(f"http://127.0.0.1:{port}/health", 20))
        proc = ServerProcess(["sleep", "30"], tmp_path / "b.log", port=port)
        with pytest.raises(ServerFailedError, match=f"port {port} is already in use"):
            proc.start()
        assert proc.proc is None  # nothing was started
    finally:
        other.stop()
    assert not other.warnings  # the foreign server's own stop found nothing else


def test_a_sweep_point_stops_its_daemon_and_warns(tmp_path: Path) -> None:
    spec = SweepSpec.model_validate(
        {
            "name": "daemons",
            "server": {
                "command": "{python} {fake} {port} daemon",
                "health_url": "http://127.0.0.1:{port}/health",
                "health_timeout_s": 20,
                "stop_timeout_s": 2,
            },
            "vars": {"python": sys.executable, "fake": FAKE},
            "points": [{"n": 1}],
            "bench": {
                "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
                "model": {"source": "qwen3-8b"},
                "hardware": {"accelerator": "h100-sxm"},
            },
            "set": {"endpoint.url": "http://127.0.0.1:{port}/v1"},
        }
    )
    result = asyncio.run(run_sweep(spec, dict(spec.bench), tmp_path))  # type: ignore[arg-type]
    (point,) = result.points
    daemon = daemon_pid(tmp_path / point.log_file)
    assert not alive(daemon)
    assert point.warnings and f"pid {daemon}" in point.warnings[0]
    assert "outlived" in (tmp_path / "sweep.json").read_text()


def test_the_health_port_is_local_only() -> None:
    assert local_port("http://127.0.0.1:8123/health") == 8123
    assert local_port("http://u:p@localhost/health") == 80
    assert local_port("https://gpu-node-7:8443/health") is None


def test_a_leftover_that_cannot_be_stopped_fails_the_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's process cannot be signalled: the kernel answers EPERM. That answer is
    stood in for (this test runs as one user) for the daemon alone; the point fails naming it."""
    import os
    import signal

    from tokenwatt.load import procscan

    real_kill = os.kill
    daemon: list[int] = []

    def kill(pid: int, sig: int) -> None:
        if not daemon:
            daemon.append(daemon_pid(next(tmp_path.glob("points/*/server.log"))))
        if pid == daemon[0]:
            raise PermissionError(1, "Operation not permitted")
        real_kill(pid, sig)

    monkeypatch.setattr(procscan.os, "kill", kill)
    spec = SweepSpec.model_validate(
        {
            "name": "stuck",
            "server": {
                "command": "{python} {fake} {port} setsid",
                "health_url": "http://127.0.0.1:{port}/health",
                "health_timeout_s": 20,
                "stop_timeout_s": 0.5,
            },
            "vars": {"python": sys.executable, "fake": FAKE},
            "points": [{"n": 1}],
            "bench": {
                "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
                "model": {"source": "qwen3-8b"},
                "hardware": {"accelerator": "h100-sxm"},
            },
        }
    )
    try:
        result = asyncio.run(run_sweep(spec, dict(spec.bench), tmp_path))  # type: ignore[arg-type]
        monkeypatch.undo()
        (point,) = result.points
        assert point.status == "failed"
        assert f"could not be stopped: pid {daemon[0]}" in (point.cause or "")
        assert alive(daemon[0])
    finally:
        if daemon:
            real_kill(daemon[0], signal.SIGKILL)
