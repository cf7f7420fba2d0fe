"""Start, health-wait and stop a server the way a sweep does, with a fake server that fails to
start, dies mid-run, never becomes healthy, or ignores SIGTERM: every time, nothing of its
process group is left behind, and the log is kept."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
import time
from pathlib import Path

import pytest

from tokenwatt.load.server_proc import ServerFailedError, ServerProcess, group_alive

FAKE = str(Path(__file__).with_name("fake_server.py"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): look at its state
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def child_pid(log: Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"child (\d+)", log.read_text() if log.exists() else "")
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no child line in {log.read_text()}")


def server(
    tmp_path: Path, mode: str, *extra: str, stop_s: float = 5.0
) -> tuple[ServerProcess, str]:
    port = free_port()
    proc = ServerProcess(
        [sys.executable, FAKE, str(port), mode, *extra],
        tmp_path / "server.log",
        stop_timeout_s=stop_s,
    )
    return proc, f"http://127.0.0.1:{port}/health"


def assert_gone(proc: ServerProcess, child: int | None) -> None:
    assert proc.pid is not None
    assert not alive(proc.pid)
    if child is not None:
        assert not alive(child), "the server's child was left behind"
    deadline = time.monotonic() + 5
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in _group_members(proc.pid))


def _group_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = d.joinpath("stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                out.append(int(d.name))
    return out


def test_healthy_server_and_its_child_are_stopped(tmp_path: Path) -> None:
    proc, url = server(tmp_path, "ok")
    proc.start()
    try:
        took = asyncio.run(proc.wait_healthy(url, 20))
        assert took >= 0
        child = child_pid(proc.log_path)
        assert alive(child)
    finally:
        proc.stop()
    assert_gone(proc, child)
    assert not proc.killed  # SIGTERM sufficed
    assert "listening" in proc.log_path.read_text()


def test_server_that_fails_to_start_gives_its_exit_code_and_log(tmp_path: Path) -> None:
    proc, url = server(tmp_path, "fail")
    proc.start()
    with pytest.raises(ServerFailedError) as err:
        asyncio.run(proc.wait_healthy(url, 20))
    proc.stop()
    assert "exited with code 3 before it became healthy" in err.value.cause
    assert "out of memory" in err.value.cause
    assert_gone(proc, None)


def test_unstartable_command_is_a_cause_not_a_crash(tmp_path: Path) -> None:
    proc = ServerProcess(["/nonexistent/llama-server"], tmp_path / "s.log")
    with pytest.raises(ServerFailedError, match="could not start"):
        proc.start()
    proc.stop()  # nothing to stop: no error


def test_health_wait_is_bounded(tmp_path: Path) -> None:
    proc, url = server(tmp_path, "never-healthy")
    proc.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(ServerFailedError, match=r"not healthy .* within 1 s"):
            asyncio.run(proc.wait_healthy(url, 1.0))
        assert time.monotonic() - t0 < 10
        child = child_pid(proc.log_path)
    finally:
        proc.stop()
    assert_gone(proc, child)


def test_server_that_exits_mid_run_leaves_no_orphan(tmp_path: Path) -> None:
    proc, url = server(tmp_path, "die", "1.0")
    proc.start()
    try:
        asyncio.run(proc.wait_healthy(url, 20))
        child = child_pid(proc.log_path)
        deadline = time.monotonic() + 10
        while proc.exited() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.exited() == 4
        assert alive(child)  # the orphaned worker is still there until the group is stopped
        assert "exited with code 4" in proc.died_cause("during the bench")
    finally:
        proc.stop()
    assert_gone(proc, child)


def test_server_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    proc, url = server(tmp_path, "ignore-term", stop_s=1.0)
    proc.start()
    try:
        asyncio.run(proc.wait_healthy(url, 20))
        child = child_pid(proc.log_path)
    finally:
        t0 = time.monotonic()
        proc.stop()
    assert proc.killed
    assert time.monotonic() - t0 < 8
    assert_gone(proc, child)
