"""SIGTERM and SIGINT, in the foreground and in a background job (SIGINT ignored by the
shell), stop ``probe`` and ``bench`` cleanly: what was measured is written, the simulator
child is stopped, the exit code is 128 + the signal, and a stopped bench never reads as
"SLO not met at any probed rate" when a probe passed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import yaml

from tokenwatt.records import read_requests
from tokenwatt.result import load_result

SPEC = {
    "name": "signals",
    "model": {"source": "llama-3.1-8b"},
    "hardware": {"accelerator": "h100-sxm"},
    "endpoint": {"url": "sim"},
    "sim": {"efficiency": 0.5, "prefill_cost": False},
    "workload": {"input_tokens": 64, "output_tokens": 12, "seed": 4},
    "slo": {"ttft_ms": 2000, "tpot_ms": 200},
    "search": {
        "start_rate_rps": 4,
        "single_stream_requests": 2,
        "probe": {
            "warmup_s": 0.3,
            "min_duration_s": 1.0,
            "min_requests": 5,
            "max_duration_s": 2,
            "drain_timeout_s": 5,
        },
    },
}


def children_of(pid: int) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(d.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start(args: list[str], *, background: bool) -> subprocess.Popen[str]:
    def ignore_sigint() -> None:  # what a shell does to a job started with '&'
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "tokenwatt", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=ignore_sigint if background else None,  # noqa: PLW1509 - test only
    )


def wait_for(cond: Callable[[], bool], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("sig", "background", "code"),
    [(signal.SIGTERM, False, 143), (signal.SIGINT, True, 130)],
)
def test_probe_stops_cleanly(tmp_path: Path, sig: int, background: bool, code: int) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    args = ["probe", str(spec), "--rate", "4", "--duration", "60", "--out", str(out), "--quiet"]
    proc = start(args, background=background)
    try:
        lines = out / "requests.jsonl"
        # incremental: records are on disk while the probe still runs
        wait_for(lambda: lines.exists() and len(lines.read_bytes().splitlines()) >= 3)
        kids = children_of(proc.pid)
        assert kids, "the simulator child is running"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr[-3000:]
    data = orjson.loads((out / "result.json").read_bytes())
    assert data["interrupted"] and "interrupted" in data["probes"][0]["slo_detail"]["failed"]
    rows = read_requests(lines)
    assert len(rows) >= 3 and all(phase != "pending" for phase, _ in rows)
    assert len({r.request_id for _, r in rows}) == len(rows)
    wait_for(lambda: not any(alive(k) for k in kids), timeout_s=10)


@pytest.mark.timeout(200)
def test_bench_sigterm_keeps_the_passing_probe_and_says_interrupted(tmp_path: Path) -> None:
    slow = yaml.safe_load(yaml.safe_dump(SPEC))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(slow))
    out = tmp_path / "out"
    proc = start(["bench", str(spec), "--out", str(out)], background=True)
    try:
        # wait until a search probe has passed (result.json names a lo)
        def passed() -> bool:
            try:
                r = load_result(out)
            except Exception:
                return False
            return any(p.slo_passed for p in r.probes)

        wait_for(passed, timeout_s=120)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr[-3000:]
    r = load_result(out)
    assert r.interrupted and r.search is not None and r.search.stop_reason == "interrupted"
    assert any(p.slo_passed for p in r.probes)
    assert "SLO not met at any probed rate" not in stdout
    assert "interrupted" in stdout
