"""A sweep of ``tokenwatt sim`` servers at three efficiencies, end to end through the CLI: the
server restarted per point, a short bench at each, ``sweep.json``, ``sweep.html``.

The truth is the simulator's own: each point's engine counters (its /metrics over the same
boundary window: generated tokens/s and decode steps/s, counted by the engine, not the
client) give the operating points' ordering and Pareto frontier independently of the client's
figures, and the efficiency knob orders the engine's step rate (a memory-bound step reads the
weights at efficiency × rated bandwidth)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tokenwatt.report.pareto import pareto_mask
from tokenwatt.result import load_result
from tokenwatt.sweep_result import load_sweep

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

EFFICIENCIES = [0.15, 0.3, 0.6]
PRICE = 2.5


def sweep_file(tmp_path: Path) -> Path:
    doc = {
        "name": "sim-eff",
        "server": {
            "command": "{python} -m tokenwatt sim --model llama-3.1-8b --accelerator h100-sxm "
            "--port {port} --efficiency {eff} --served-model-name m",
            "health_url": "http://127.0.0.1:{port}/health",
            "health_timeout_s": 60,
        },
        "vars": {"python": sys.executable},
        "grid": {"eff": EFFICIENCIES},
        "set": {
            "endpoint.url": "http://127.0.0.1:{port}/v1",
            "power.sources": [
                {
                    "kind": "prometheus",
                    "url": "http://127.0.0.1:{port}/metrics",
                    "metric": "tokenwatt_sim_energy_joules_total",
                    "interval_s": 0.1,
                }
            ],
        },
        "bench": {
            "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm", "gpus": 1},
            "server_metrics": {"engine": "vllm", "interval_s": 0.5},
            "workload": {"input_tokens": 128, "output_tokens": 32, "seed": 0},
            "slo": {"kind": "percentile", "percentile": 0.9, "ttft_ms": 300, "tpot_ms": 100},
            "search": {
                "growth": 2.0,
                "precision": 0.3,
                "max_probes": 6,
                "single_stream_requests": 3,
                "probe": {
                    "warmup_s": 1,
                    "min_duration_s": 3,
                    "min_requests": 30,
                    "max_duration_s": 8,
                    "drain_timeout_s": 5,
                    "early_stop": False,
                },
            },
        },
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_sweep_of_three_sim_efficiencies(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    cmd = [sys.executable, "-m", "tokenwatt", "sweep", str(sweep_file(tmp_path)), "--out",
           str(out), "--price-per-gpu-hour", str(PRICE)]  # fmt: skip
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=380)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    sweep = load_sweep(out)
    assert [p.status for p in sweep.points] == ["ok"] * 3, [p.cause for p in sweep.points]
    assert (out / "sweep.html").is_file()
    html = (out / "sweep.html").read_text()
    assert "<svg" in html and "eff=0.6 (sim)" in html

    client, engine, steps = [], [], []
    for p in sweep.points:
        op = p.point
        assert op is not None and op.boundary and op.simulated
        r = load_result(out / p.folder)
        b = r.boundary
        assert b is not None and b.engine is not None and b.energy is not None
        assert (out / p.log_file).stat().st_size > 0  # the server's log is kept
        # the figures beside the point are the boundary's, by hand
        assert op.goodput_output_tokens_per_s_per_gpu == b.goodput_output_tokens_per_s
        assert op.tokens_per_s_per_user == pytest.approx(1 / b.tpot_s.p50)  # type: ignore[operator]
        assert op.usd_per_mtok == pytest.approx(
            PRICE * 1 / (b.goodput_output_tokens_per_s * 3600) * 1e6
        )
        assert b.energy.valid and b.energy.audit and b.energy.audit[0].valid
        assert op.tokens_per_joule == pytest.approx(b.energy.tokens_per_joule)
        client.append((op.tokens_per_s_per_user, op.goodput_output_tokens_per_s_per_gpu))
        e = b.engine
        assert e.generated_tokens_per_s is not None and e.steps_per_s_per_replica is not None
        engine.append((e.steps_per_s_per_replica, e.generated_tokens_per_s))
        steps.append(e.steps_per_s_per_replica)

    def order(values: list[float]) -> list[int]:
        return sorted(range(len(values)), key=values.__getitem__)

    # ordering on each axis and the frontier: the client's figures against the engine's own
    for axis in (0, 1):
        assert order([c[axis] for c in client]) == order([e[axis] for e in engine])
    assert pareto_mask(client) == pareto_mask(engine)
    # and the simulator's knob: more efficiency, faster steps
    assert order(steps) == [0, 1, 2]
