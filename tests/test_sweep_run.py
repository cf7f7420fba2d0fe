"""``run_sweep`` without a bench: points whose server fails are recorded with their cause and
the sweep goes on; Ctrl-C during a point stops its server and keeps the sweep file."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from test_sweep_server import alive, child_pid
from tokenwatt.load.sweep import run_sweep
from tokenwatt.spec.sweep import SweepSpec
from tokenwatt.sweep_result import load_sweep

FAKE = str(Path(__file__).with_name("fake_server.py"))
BENCH = {
    "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
    "model": {"source": "qwen3-8b"},
    "hardware": {"accelerator": "h100-sxm"},
}


def sweep(mode_by_point: list[str], health_timeout_s: float = 20.0) -> SweepSpec:
    return SweepSpec.model_validate(
        {
            "name": "fake",
            "server": {
                "command": "{python} {fake} {port} {mode}",
                "health_url": "http://127.0.0.1:{port}/health",
                "health_timeout_s": health_timeout_s,
                "stop_timeout_s": 2,
            },
            "vars": {"python": sys.executable, "fake": FAKE},
            "points": [{"mode": m} for m in mode_by_point],
            "bench": BENCH,
            "set": {"endpoint.url": "http://127.0.0.1:{port}/v1"},
        }
    )


def test_failed_points_are_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    spec = sweep(["fail", "never-healthy", "fail"], health_timeout_s=1.0)
    result = asyncio.run(run_sweep(spec, BENCH, tmp_path))
    assert [p.status for p in result.points] == ["failed", "failed", "failed"]
    assert "exited with code 3" in (result.points[0].cause or "")
    assert "out of memory" in (result.points[0].cause or "")
    assert "not healthy" in (result.points[1].cause or "")
    assert result.points[0].server_exit_code == 3
    on_disk = load_sweep(tmp_path)
    assert [p.label for p in on_disk.points] == ["mode=fail", "mode=never-healthy", "mode=fail"]
    for p in on_disk.points:
        assert (tmp_path / p.log_file).is_file()  # the server's log is kept
        assert p.command[0] == sys.executable and p.command[-1] == p.settings["mode"]
    assert not result.interrupted and result.ended_at is not None


def test_a_bench_that_cannot_reach_the_server_is_a_failed_point(tmp_path: Path) -> None:
    # the fake answers /health but is no OpenAI server: the bench refuses it at the start
    result = asyncio.run(run_sweep(sweep(["ok"]), BENCH, tmp_path))
    (p,) = result.points
    assert p.status == "failed" and p.cause
    assert p.health_s is not None and p.health_s >= 0


def test_ctrl_c_stops_the_server_and_keeps_the_sweep(tmp_path: Path) -> None:
    spec = sweep(["never-healthy", "ok"], health_timeout_s=60.0)

    async def main() -> None:
        task = asyncio.create_task(run_sweep(spec, BENCH, tmp_path))
        log = tmp_path / "points" / "00-mode=never-healthy" / "server.log"
        while not (log.exists() and "listening" in log.read_text()):
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    t0 = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - t0 < 30
    child = child_pid(tmp_path / "points" / "00-mode=never-healthy" / "server.log")
    assert not alive(child)
    saved = load_sweep(tmp_path)
    assert saved.interrupted and len(saved.points) == 1
    assert saved.points[0].status == "interrupted"
    assert os.path.exists(tmp_path / "sweep.json")
