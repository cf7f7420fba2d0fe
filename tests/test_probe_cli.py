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
    assert not (out / "probe.json").exists()  # one file per run (schema 3)
    data = orjson.loads((out / "result.json").read_bytes())
    lines = (out / "requests.jsonl").read_bytes().splitlines()
    p = data["probes"][0]
    run = p["run"]
    assert data["schema_version"] == 3
    assert p["rate_rps"] == 12 and run["arrival"] == "poisson"
    assert p["seed"] == 4  # workload.seed by default
    assert data["spec"]["endpoint"]["api_key_env"] == "TW_PROBE_KEY"  # the name, never the key
    assert data["target"]["kind"] == "sim"
    assert len(lines) == run["requests_total"]
    phases = [orjson.loads(x)["phase"] for x in lines]
    assert phases.count("window") == p["requests_counted"] >= 5
    assert p["window_s"] >= 1.0 and p["requests_failed"] == 0
    assert p["slo_passed"] is True
    assert run["clock"]["timestamp_source"] in ("kernel", "user")
    # MBU from the same window's T and τ
    assert p["mbu"] is not None and 0 < p["mbu"] < 1
    inputs = p["mbu_detail"]["inputs"]
    assert inputs["output_tokens_per_s"] == pytest.approx(p["output_tokens_per_s"])
    assert inputs["itl_token_weighted_s"] == pytest.approx(p["itl_token_weighted_s"])
    assert "output tokens/s (T)" in res.stdout and "MBU" in res.stdout
    # a simulated probe says so, above and on its table, and beside its modelled power
    assert "SIMULATED: served by tokenwatt's built-in simulator" in res.stdout
    assert "probe · SIMULATED (tokenwatt sim)" in res.stdout
    # the key never reaches a file or the terminal
    for blob in ((out / "result.json").read_text(), (out / "requests.jsonl").read_text()):
        assert SECRET not in blob
    assert SECRET not in res.stdout + res.stderr


def test_closed_loop_max_requests(spec_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "single"
    res = run_cli(
        str(spec_file), "-c", "1", "--max-requests", "4", "--warmup", "0", "-o", str(out), "-q"
    )
    assert res.returncode == 0, res.stderr
    p = orjson.loads((out / "result.json").read_bytes())["probes"][0]
    assert p["concurrency"] == 1 and p["rate_rps"] is None
    assert p["requests_counted"] == 4 == p["run"]["requests_total"]
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
    data = orjson.loads((out / "result.json").read_bytes())
    p = data["probes"][0]
    assert data["interrupted"] is True and p["interrupted"] is True
    records = [orjson.loads(x) for x in (out / "requests.jsonl").read_bytes().splitlines()]
    assert len(records) == p["run"]["requests_total"] > 0
    assert any(r["status"] == "ok" for r in records)
    assert p["window_s"] < 60


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


def test_a_remote_endpoint_without_a_readable_config_still_gets_result_json(
    tmp_path: Path,
) -> None:
    """Before schema 3 this probe wrote only ``probe.json``: the model's config.json cannot be
    read, so there is no geometry and no MBU. Now it writes ``result.json`` with the geometry
    null and the reason kept, and ``tokenwatt report`` renders it (terminal and HTML)."""
    import yaml

    from tokenwatt.load.target import sim_config
    from tokenwatt.result import load_result
    from tokenwatt.sim import start_sim_thread
    from tokenwatt.spec import parse_spec

    node = (
        "name: n\nmodel: {source: llama-3.1-8b}\nhardware: {accelerator: h100-sxm}\n"
        "endpoint: {url: sim, model: m}\nsim: {efficiency: 0.5, prefill_cost: false}\n"
    )
    with start_sim_thread(sim_config(parse_spec(yaml.safe_load(node)))) as sim:
        spec = tmp_path / "remote.yaml"
        missing = tmp_path / "nowhere" / "config.json"
        spec.write_text(
            SPEC.replace(
                "endpoint: {url: sim, api_key_env: TW_PROBE_KEY}",
                f"endpoint: {{url: {sim.url}, model: m}}",
            )
            .replace("model: {source: llama-3.1-8b}", f"model: {{source: {missing}}}")
            .replace("sim: {efficiency: 0.5, prefill_cost: false}\n", "")
        )
        out = tmp_path / "remote"
        res = run_cli(str(spec), "--rate", "8", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".json") == ["result.json"]
    r = load_result(out)
    assert r.geometry is None and r.accelerator is None and r.mbu_unavailable
    assert str(missing) in r.mbu_unavailable or "nowhere" in r.mbu_unavailable
    p = r.probes[0]
    assert p.mbu is None and p.output_tokens_per_s > 0 and p.achieved_rate_rps > 0
    rep = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "report", str(out)],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    assert "one probe" in rep.stdout
    assert "Not derived" in (out / "report.html").read_text("utf-8")
