"""`tokenwatt probe` as a user runs it: files written, secrets kept out, Ctrl-C keeps what was
measured, bad flags are one line and exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-test-3f9a0c1b2d"

SPEC = """
name: cli-test
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim, api_key_env: TW_PROBE_KEY}
sim: {efficiency: 0.5, prefill_cost: false}
workload: {input_tokens: 64, output_tokens: 12, seed: 4}
slo: {ttft_ms: 2000, tpot_ms: 200}
search: {probe: {warmup_s: 0.3, min_duration_s: 1.0, min_requests: 5}}
"""


def run_cli(*args: str, env_key: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TW_PROBE_KEY": SECRET} if env_key else dict(os.environ)
    if not env_key:
        env.pop("TW_PROBE_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", "probe", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
    )


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC)
    return p


def test_probe_writes_results(spec_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = run_cli(str(spec_file), "--rate", "12", "--out", str(out))
    assert res.returncode == 0, res.stderr
    data = orjson.loads((out / "probe.json").read_bytes())
    lines = (out / "requests.jsonl").read_bytes().splitlines()
    m = data["metrics"]
    assert data["schema"] == "tokenwatt.probe/2"
    assert data["probe"]["rate_rps"] == 12 and data["probe"]["arrival"] == "poisson"
    assert data["probe"]["seed"] == 4  # workload.seed by default
    assert data["spec"]["endpoint"]["api_key_env"] == "TW_PROBE_KEY"  # the name, never the key
    assert data["target"]["kind"] == "sim"
    assert len(lines) == m["requests_total"]
    phases = [orjson.loads(x)["phase"] for x in lines]
    assert phases.count("window") == m["requests_counted"] >= 5
    assert m["window_s"] >= 1.0 and m["requests_failed"] == 0
    assert data["slo_verdict"]["passed"] is True
    assert data["clock"]["timestamp_source"] in ("kernel", "user")
    # MBU from the same window's T and τ
    assert data["mbu"] is not None and 0 < data["mbu"] < 1
    inputs = data["mbu_inputs"]["inputs"]
    assert inputs["output_tokens_per_s"] == pytest.approx(m["output_tokens_per_s"])
    assert inputs["itl_token_weighted_s"] == pytest.approx(m["itl_token_weighted_s"])
    assert "output tokens/s (T)" in res.stdout and "MBU" in res.stdout
    # a simulated probe says so, above and on its table, and beside its modelled power
    assert "SIMULATED: served by tokenwatt's built-in simulator" in res.stdout
    assert "probe · SIMULATED (tokenwatt sim)" in res.stdout
    # the key never reaches a file or the terminal
    for blob in ((out / "probe.json").read_text(), (out / "requests.jsonl").read_text()):
        assert SECRET not in blob
    assert SECRET not in res.stdout + res.stderr


def test_closed_loop_max_requests(spec_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "single"
    res = run_cli(
        str(spec_file), "-c", "1", "--max-requests", "4", "--warmup", "0", "-o", str(out), "-q"
    )
    assert res.returncode == 0, res.stderr
    data = orjson.loads((out / "probe.json").read_bytes())
    assert data["probe"]["concurrency"] == 1 and data["probe"]["rate_rps"] is None
    assert data["metrics"]["requests_counted"] == 4 == data["metrics"]["requests_total"]
    assert res.stdout == ""


def test_ctrl_c_writes_what_was_measured(spec_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    env = {**os.environ, "TW_PROBE_KEY": SECRET}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokenwatt",
            "probe",
            str(spec_file),
            "--rate",
            "30",
            "--duration",
            "60",
            "--out",
            str(out),
            "-q",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # interrupt once a request has finished (records are written as they finish), not
        # after a fixed sleep: on a loaded machine start-up alone can take seconds
        spill = out / "requests.jsonl"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if spill.exists() and b'"status":"ok"' in spill.read_bytes().replace(b" ", b""):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    data = orjson.loads((out / "probe.json").read_bytes())
    assert data["interrupted"] is True and data["window"]["interrupted"] is True
    records = [orjson.loads(x) for x in (out / "requests.jsonl").read_bytes().splitlines()]
    assert len(records) == data["metrics"]["requests_total"] > 0
    assert any(r["status"] == "ok" for r in records)
    assert data["window"]["window_s"] < 60


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "-1"], "--rate must be a positive"),
        (["--rate", "2", "--concurrency", "2"], "not both"),
        (["--duration", "0", "--rate", "1"], "--duration must be > 0"),
        (["--sim-mode", "fork", "--rate", "1"], "--sim-mode"),
        ([], "give a rate"),
    ],
)
def test_bad_flags_are_one_line(
    spec_file: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    res = run_cli(str(spec_file), *args, "-o", str(tmp_path / "x"), "-q")
    assert res.returncode == 2
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_missing_key_and_missing_spec_are_one_line(spec_file: Path, tmp_path: Path) -> None:
    res = run_cli(str(spec_file), "--rate", "1", "-o", str(tmp_path / "y"), env_key=False)
    assert res.returncode == 2 and "TW_PROBE_KEY is not set" in res.stderr
    res = run_cli(str(tmp_path / "nope.yaml"), "--rate", "1")
    assert res.returncode == 2 and "cannot read spec" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
