"""The xdist lock (``xdist_exclusive``) on a suite of its own, run by pytest-xdist on two workers:
an exclusive test's run overlaps no other test's, while the shared tests do overlap each other
(so the check below could see an overlap if the lock let one through). Each test also says how
it holds the lock (a second shared ``flock`` from the same process is refused only beside an
exclusive one): a long-run marker alone, ``virtual`` shared. The exclusive tests run first, as
one block on one worker, so the other worker waits for them once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

TESTS = Path(__file__).parent

SUITE = """
import fcntl, json, os, time, pytest
from xdist_exclusive import lock_paths

@pytest.fixture
def span(request):
    lock_path = lock_paths(request.config)[1]

    def record(name, seconds):
        with open(lock_path, "a") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
                held = "shared"
                fcntl.flock(probe, fcntl.LOCK_UN)
            except BlockingIOError:
                held = "alone"
        t0 = time.monotonic()
        time.sleep(seconds)
        with open(os.path.join(os.environ["SPANS"], name), "w") as f:
            json.dump([t0, time.monotonic(), held, os.environ["PYTEST_XDIST_WORKER"]], f)

    return record

@pytest.mark.slow
def test_long_run(span):
    span("long0", 0.4)

@pytest.mark.parametrize("i", range(6))
def test_shared(i, span):
    span(f"shared{i}", 0.4)

@pytest.mark.exclusive
@pytest.mark.parametrize("i", range(2))
def test_alone(i, span):
    span(f"alone{i}", 0.4)

@pytest.mark.slow
@pytest.mark.virtual
@pytest.mark.parametrize("i", range(2))
def test_long_virtual(i, span):
    span(f"virtual{i}", 0.4)
"""


def test_an_exclusive_test_overlaps_no_other(tmp_path: Path) -> None:
    suite, spans = tmp_path / "suite", tmp_path / "spans"
    suite.mkdir()
    spans.mkdir()
    (suite / "conftest.py").write_text('pytest_plugins = ["xdist_exclusive"]\n')
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: long\n")
    (suite / "test_mixed.py").write_text(SUITE)
    path = f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    env = {**os.environ, "SPANS": str(spans), "PYTHONPATH": path}
    # its own --basetemp: a run under the shared temporary root first deletes the oldest runs'
    # folders there (another whole suite's tmp_path trees), which is not this check's time
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "worksteal",
           "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "basetemp"),
           "--rootdir", str(suite), str(suite)]  # fmt: skip
    proc = subprocess.run(
        cmd, check=False, cwd=suite, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = {f.name: json.loads(f.read_text()) for f in spans.iterdir()}
    assert len(got) == 11
    held = {name: span[2] for name, span in got.items()}
    alone = {"alone0", "alone1", "long0"}
    assert held == {n: "alone" if n in alone else "shared" for n in got}, held

    def overlap(a: list[float], b: list[float]) -> bool:
        return a[0] < b[1] and b[0] < a[1]

    for name in alone:
        others = [n for n in got if n != name]
        assert not any(overlap(got[name], got[n]) for n in others), (name, got)
    shared = [got[f"shared{i}"] for i in range(6)]
    assert any(overlap(a, b) for k, a in enumerate(shared) for b in shared[k + 1 :])
    # The exclusive tests run as one block on one worker: no other test starts or ends between
    # the first one's start and the last one's end (the scheduling that saves the other
    # worker a wait per exclusive test; without the lock kept across them a shared test
    # slips in between).
    assert len({got[name][3] for name in alone}) == 1, got
    first, last = min(got[n][0] for n in alone), max(got[n][1] for n in alone)
    between = [n for n in got if n not in alone and got[n][1] > first and got[n][0] < last]
    assert not between, (between, got)
