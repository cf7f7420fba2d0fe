"""``tokenwatt probe`` and the benchmark's probe judge and report one run identically.

One seeded probe runs through the real command line against the simulator (its own process,
real HTTP). Its ``requests.jsonl`` is read back (no edits) and handed, with the window the
probe wrote, to ``tokenwatt.load.bench``'s summarizer: the figures and the SLO verdict must be
the ones its ``result.json`` holds, to the last bit. A passing rate and a failing SLO are both run,
so the verdict's reasons are compared too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenwatt.engine import clip_samples, summarize
from tokenwatt.geometry import load_geometry
from tokenwatt.load import bench
from tokenwatt.load.engine_probe import ProbeEngine, edge_fraction, read_engine_series
from tokenwatt.load.probe import ProbeRun
from tokenwatt.load.target import resolve_accelerator
from tokenwatt.metrics.latency import compute_probe_metrics
from tokenwatt.records import read_requests
from tokenwatt.result import EnergySummary, ProbeSummary, load_result
from tokenwatt.spec import load_spec

SPEC = """
name: agree
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim}
sim: {efficiency: 0.5, prefill_cost: false}
workload: {input_tokens: 64, output_tokens: 24, seed: 4}
slo: {ttft_ms: 2000, tpot_ms: TPOT}
search: {probe: {warmup_s: 0.5, min_duration_s: 2.0, min_requests: 20}}
"""


CLI = [sys.executable, "-m", "tokenwatt", "probe"]


def _run_cli(spec_path: Path, out: Path) -> dict[str, Any]:
    res = subprocess.run(
        [*CLI, str(spec_path), "--rate", "15", "--seed", "11", "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    data: dict[str, Any] = orjson.loads((out / "result.json").read_bytes())
    return data


def _bench_summary(spec_path: Path, out: Path, data: dict[str, Any]) -> ProbeSummary:
    """What the benchmark's summarizer makes of the same records and window."""
    spec = load_spec(spec_path)
    rows = read_requests(out / "requests.jsonl")
    records = [rec for _, rec in rows]
    p = data["probes"][0]
    w = {**p, **p["run"]}
    run = ProbeRun(
        records=records,
        window_start_ns=w["window_start_ns"],
        window_end_ns=w["window_end_ns"],
        metrics=compute_probe_metrics(
            records,
            window_start_ns=w["window_start_ns"],
            window_end_ns=w["window_end_ns"],
            slo=spec.slo,
            target_rate_rps=p["rate_rps"],
        ),
        rate_rps=p["rate_rps"],
        concurrency=p["concurrency"],
        arrival=w["arrival"],
        seed=p["seed"],
        settings=spec.search.probe,
        prompt_format=w["prompt_format"],
        started_ns=w["started_ns"],
        ended_ns=w["ended_ns"],
        interrupted=w["interrupted"],
        stopped_early=w["stopped_early"],
        drain_timeouts=w["drain_timeouts"],
        saturated=p["slo_detail"]["load_generator_saturated"],
        error_stopped=w["error_stopped"],
        late_sends=w["late_sends"],
        max_send_lag_s=w["max_send_lag_s"],
    )
    geometry = load_geometry(spec.model.source)
    # the engine's window from its scrapes on file, cut to the same window
    samples = read_engine_series(out / "engine.jsonl")
    engine = summarize(
        clip_samples(samples, w["window_start_ns"], w["window_end_ns"]),
        engine=p["engine"]["engine"],
        url=p["engine"]["url"],
    )
    edge = edge_fraction(samples, w["window_start_ns"], w["window_end_ns"])
    reason = None
    if w["stopped_early"]:
        # the early-stop line is the stopper's text, not the judge's: carry it over
        reason = next(r for r in p["slo_detail"]["reason"].split("; ") if "stopped early" in r)
    return bench.summarize_probe(
        index=1,
        run=run,
        spec=spec,
        geometry=geometry,
        accelerator=resolve_accelerator(spec.hardware),
        early_stop_reason=reason,
        requests_file="requests.jsonl",
        engine_window=ProbeEngine(engine, edge, tuple(sorted(x.t_ns for x in samples))),
        engine_series_file="engine.jsonl",
        # the power readings are live (not in the files): the probe's energy, measured by the
        # same load.energy_window.probe_energy the bench calls, is handed over
        energy=EnergySummary.model_validate(p["energy"]),
        power_series=p["power_series"],
    )


@pytest.mark.parametrize(("tpot_ms", "passes"), [(200, True), (1, False)])
def test_probe_and_bench_agree_on_one_run(tmp_path: Path, tpot_ms: int, passes: bool) -> None:
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC.replace("TPOT", str(tpot_ms)))
    out = tmp_path / "probe"
    data = _run_cli(spec_path, out)
    from_probe = load_result(out).probes[0]
    from_bench = _bench_summary(spec_path, out, data)
    assert from_probe.slo_passed is passes
    # the sender's keep-up, the client's clock and connections are live (CPU time, per-process
    # figures, the client object), not in the files; the probe's flag --max-requests neither
    live = {"load_generator": True, "run": {"clock", "connections", "max_requests"}}
    assert from_bench.model_dump(mode="json", exclude=live) == from_probe.model_dump(
        mode="json", exclude=live
    )
    assert from_probe.load_generator is not None and from_probe.load_generator.workers == 1
    # the probe measured power as the bench does: the simulator's counter over the window,
    # divided by the window's output tokens, with its audit
    e = from_probe.energy
    assert e is not None and e.measured and e.source == "sim" and e.audit
    assert from_probe.run is not None and e.output_tokens == from_probe.run.output_tokens
    assert from_probe.tokens_per_joule == pytest.approx(e.output_tokens / e.energy_j)
    assert data["probes"][0]["slo_passed"] is passes
    assert data["probes"][0]["output_tokens_per_s"] == from_bench.output_tokens_per_s
