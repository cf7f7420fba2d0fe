"""The engine as witness in every probe: `tokenwatt probe` and `bench` against the simulator
over HTTP scrape its /metrics, store the engine's figures beside the client's in the result,
and flag a disagreement with its cause.

Truth: the simulator's own counters (every generated token and every step counted once).
A closed loop of long outputs keeps every slot busy, so the client's B = T·τ/R and the
engine's tokens per step must agree to ~1/output length (< 1%); two replicas behind one
endpoint with one stream leave one idle, which must be flagged as such.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from rich.console import Console

from faultserver import FaultServer
from tokenwatt.load.engine_probe import EngineWitness
from tokenwatt.records import read_requests
from tokenwatt.report.checks import self_checks
from tokenwatt.report.engine_view import MBU_ROW_NOTE, engine_rows
from tokenwatt.report.format import fmt_pct
from tokenwatt.report.html import render_html
from tokenwatt.report.terminal import ResultView
from tokenwatt.result import BenchResult, EngineAgreement, EngineFigures, load_result
from tokenwatt.spec.server_metrics import ServerMetricsSection

pytestmark = pytest.mark.timeout(180)

SPEC = """
name: engine-witness
model: {{source: llama-3.1-8b}}
hardware: {{accelerator: h100-sxm, replicas: {replicas}, gpus: {replicas}}}
endpoint: {{url: sim}}
sim: {{efficiency: 0.5, prefill_cost: false}}
workload: {{input_tokens: 32, output_tokens: {output_tokens}, seed: 4}}
slo: {{ttft_ms: 5000, tpot_ms: 500}}
search: {{probe: {{warmup_s: 0.5, min_duration_s: 3.0, min_requests: 4}}}}
server_metrics: {{interval_s: 0.1}}
"""


def _probe(
    tmp_path: Path, *, replicas: int, concurrency: int, output_tokens: int = 400
) -> tuple[dict, str]:  # type: ignore[type-arg]
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(replicas=replicas, output_tokens=output_tokens))
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "probe", str(spec), "-c", str(concurrency),
         "--out", str(out)],
        capture_output=True, text=True, timeout=150, check=False, env=dict(os.environ),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return orjson.loads((out / "result.json").read_bytes()), res.stdout


def _agreements(summary: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {a["figure"]: a for a in summary["engine"]["agreements"]}


@pytest.mark.exclusive
def test_probe_client_and_engine_agree_within_one_percent(tmp_path: Path) -> None:
    # 200-token outputs (a request's lifetime about 1.9 s, so the drain after the window is
    # half that of 400): B's engine figure 5.982 at 200 against 5.987-5.998 at 400, the client's
    # T and B within 0.2 % at both (1 % asserted)
    data, stdout = _probe(tmp_path, replicas=1, concurrency=6, output_tokens=200)
    s = data["probes"][0]
    e = s["engine"]
    assert e["engine"] == "vllm" and e["unavailable"] is None and e["scrapes"] >= 10
    checks = _agreements(s)
    # T and B within 1% of the simulator's own counts over the same window
    assert abs(checks["T"]["rel_diff"]) < 0.01, checks["T"]
    assert abs(checks["B"]["rel_diff"]) < 0.01, checks["B"]
    assert checks["T"]["client"] == pytest.approx(s["output_tokens_per_s"])
    assert checks["B"]["client"] == pytest.approx(s["batch_per_replica"])
    assert checks["B"]["engine"] == pytest.approx(6.0, rel=0.01)  # six streams, never idle
    assert all(a["ok"] for a in checks.values())
    # the second MBU (engine's B and s) lands on the client's; both near the sim's efficiency
    assert e["mbu"] == pytest.approx(s["mbu"], rel=0.02)
    assert e["mbu"] == pytest.approx(0.5, abs=0.03)
    assert "engine_disagrees" not in s["flags"]
    # the time series beside the requests: every scrape of the probe, the first before any
    # request was sent and the last after the drain, so it spans every generated token
    rows = [orjson.loads(x) for x in (tmp_path / "out" / "engine.jsonl").read_bytes().splitlines()]
    assert s["engine_series_file"] == "engine.jsonl" and len(rows) >= e["scrapes"]
    assert rows[0]["t_ns"] < s["window_start_ns"] and rows[-1]["t_ns"] > s["window_end_ns"]
    sent = sum(r.output_tokens for _, r in read_requests(tmp_path / "out" / "requests.jsonl"))
    assert rows[-1]["generated_tokens"] - rows[0]["generated_tokens"] == pytest.approx(sent, abs=6)
    assert "Client vs engine" in stdout


MIXED_SPEC = """
name: engine-witness-mixed
model: {source: qwen3-30b-a3b}
hardware: {accelerator: h100-sxm, replicas: 1, gpus: 1}
endpoint: {url: sim}
sim: {efficiency: 0.5, prefill_efficiency: 0.5, step_overhead_ms: 0.5}
workload: {input_tokens: {kind: uniform, min: 128, max: 512}, output_tokens: 32, seed: 3}
slo: {ttft_ms: 5000, tpot_ms: 500}
search: {probe: {warmup_s: 1.0, min_duration_s: 4.0, min_requests: 40, early_stop: false}}
server_metrics: {interval_s: 0.1}
"""


@pytest.mark.exclusive
def test_engine_mbu_stands_beside_the_client_seed_figure(tmp_path: Path) -> None:
    """MoE with prefill in the steps: the headline counts the experts prompt tokens route to
    (mixed steps), the engine's second MBU is the seed's literal formula on its own B and s.
    So the engine figure lands on the same formula on the client's B and s (within their own
    disagreement) and the report sets it beside that one, not beside the headline (the demo
    showed 44.9 % beside 40.0 % with B and s agreeing within 1.4 %) nor the decode-only figure
    (its batch comes from decode intervals, not T·τ/R)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(MIXED_SPEC)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "probe", str(spec), "--rate", "20", "--out", str(out)],
        capture_output=True, text=True, timeout=150, check=False, env=dict(os.environ),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = load_result(out).probes[0]
    detail, engine = summary.mbu_detail, summary.engine
    assert detail is not None and engine is not None and engine.mbu is not None
    mixed = detail.inputs.mixed_steps
    assert mixed is not None and mixed.mixed_step_fraction > 0.2  # the regime under test
    assert summary.mbu is not None and detail.mbu_decode_only is not None
    checks = {a.figure: a for a in engine.agreements}
    spread = sum(abs(checks[f].rel_diff or 0.0) for f in ("B", "s")) + 0.01
    seed = detail.seed_mbu
    assert seed is not None
    assert engine.mbu == pytest.approx(seed, rel=spread)
    # the headline is another figure: here it adds > 3 pt of mixed-step bytes to decode-only
    assert summary.mbu - detail.mbu_decode_only > 0.03
    (row,) = [r for r in engine_rows(summary) if r[0] == "seed-formula MBU"]
    assert row == ("seed-formula MBU", fmt_pct(seed), fmt_pct(engine.mbu), "—",
                   MBU_ROW_NOTE)  # fmt: skip


@pytest.mark.exclusive
@pytest.mark.slow  # end to end through the CLI; quick: test_engine_sim's test of the same name
# (the comparison and its cause) and the self-check and table test below
def test_idle_replica_is_flagged_with_its_cause(tmp_path: Path) -> None:
    """Two replicas, one stream: the client's B = T·τ/R halves; the engine's stays 1."""
    data, stdout = _probe(tmp_path, replicas=2, concurrency=1)
    s = data["probes"][0]
    b = _agreements(s)["B"]
    assert b["engine"] == pytest.approx(1.0, rel=0.02)
    assert b["client"] == pytest.approx(0.5, rel=0.05)
    assert b["ok"] is False and "idle replicas" in b["cause"]
    assert _agreements(s)["T"]["ok"] is True  # T is node-wide: still agrees
    assert "engine_disagrees" in s["flags"]
    assert "DISAGREE" in stdout


FIXTURE = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"


def test_disagreement_is_a_self_check_and_both_reports_show_the_table() -> None:
    """An older result plus engine figures: the disagreement becomes one warning naming the
    figure, the two values and the cause; terminal and HTML show client beside engine."""
    data = json.loads(FIXTURE.read_text("utf-8"))
    cause = "idle replicas or idle time: ..."
    bad = EngineAgreement(
        figure="B", client=0.5, engine=1.0, rel_diff=-0.5, tolerance=0.05, ok=False, cause=cause
    )
    good = EngineAgreement(
        figure="T", client=99.0, engine=100.0, rel_diff=-0.01, tolerance=0.02, ok=True
    )
    engine = EngineFigures(engine="vllm", url="http://h/metrics", agreements=[good, bad], mbu=0.2)
    for p in (data["probes"][2], data["boundary"]):
        p["engine"] = engine.model_dump(mode="json")
    result = BenchResult.model_validate(data)
    (msg,) = [c.message for c in self_checks(result) if "disagree" in c.message]
    assert msg == (
        "probes 3, 10: client and engine disagree on B (client 0.500 vs engine 1.00, −50.0% "
        "beyond ±5%); likely cause: " + cause
    )
    assert not [c for c in self_checks(result) if "disagree on T" in c.message]
    console = Console(width=100, file=io.StringIO(), record=True, color_system=None)
    console.print(ResultView(result))
    text = console.export_text()
    assert "Client vs engine /metrics (probe" in text and "DISAGREE" in text
    html = render_html(result)
    assert '<section id="engine">' in html and "DISAGREE (±5%)" in html
    # an older file without engine figures shows no table
    plain = BenchResult.model_validate(json.loads(FIXTURE.read_text("utf-8")))
    assert '<section id="engine">' not in render_html(plain)


def test_server_without_metrics_is_said_once(tmp_path: Path) -> None:
    """A server with no /metrics: one warning for the run, no scrape after the first."""

    async def go() -> tuple[list[str], object, object]:
        async with FaultServer() as server:
            warnings: list[str] = []
            witness = EngineWitness(ServerMetricsSection(), server.url, warnings)
            run = SimpleNamespace(window_start_ns=0, window_end_ns=0)
            first = await witness.stop(await witness.start(), run)  # type: ignore[arg-type]
            second_scraper = await witness.start()
            return warnings, first, second_scraper

    warnings, first, second = asyncio.run(go())
    assert len(warnings) == 1 and "engine figures not measured" in warnings[0]
    assert "/metrics" in warnings[0]
    assert first is not None and first.window.unavailable is not None
    assert second is None


BENCH_SPEC = """
name: engine-bench
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim}
sim: {efficiency: 0.5, prefill_cost: false, max_num_seqs: 8}
workload: {input_tokens: 64, output_tokens: 64, seed: 3, arrival: {kind: constant}}
slo: {ttft_ms: 2000, tpot_ms: 200}
search:
  start_rate_rps: 20
  max_probes: 2
  single_stream_requests: 2
  probe: {warmup_s: 0.5, min_duration_s: 2.0, min_requests: 10, max_duration_s: 4,
          drain_timeout_s: 5}
server_metrics: {interval_s: 0.1}
"""


@pytest.mark.exclusive
@pytest.mark.slow  # a whole bench; each probe's engine figures come from the one derivation
# probe and bench share (load.derive), checked quickly by the probe tests here
def test_bench_stores_engine_figures_for_every_probe(tmp_path: Path) -> None:
    """`tokenwatt bench`: every probe (single stream too) carries the engine's figures and
    its series file; T agrees with the simulator's count within 2% at every search probe. The
    single-stream point starts and stops the load at its edges, where interpolating between
    scrapes misplaces tokens: the client's tokens are counted the same way (on the engine's
    clock), so no widening is needed."""
    from tokenwatt.result import load_result

    spec = tmp_path / "spec.yaml"
    spec.write_text(BENCH_SPEC)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "bench", str(spec), "--out", str(out)],
        capture_output=True, text=True, timeout=170, check=False,
        env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    r = load_result(out)
    probes = [p for p in (r.single_stream, *r.probes) if p is not None]
    assert len(probes) >= 2
    for p in probes:
        e = p.engine
        assert e is not None and e.engine == "vllm" and e.unavailable is None
        assert p.engine_series_file == f"engine-{p.index:02d}.jsonl"
        assert (out / p.engine_series_file).stat().st_size > 0
        t = next(a for a in e.agreements if a.figure == "T")
        # the tolerance is the counters' resolution, not widened by the scrape interval; the
        # edges are handled by counting the client's tokens on the engine's clock
        assert e.generated_tokens is not None
        assert t.tolerance == pytest.approx(0.02 + 1 / e.generated_tokens)
        assert t.cause is not None and "compared on the engine's clock" in t.cause
        assert t.ok and t.rel_diff is not None, (p.index, t)
        if p.index > 0:  # open loop: the load runs on through both edges, the rate is steady
            assert abs(t.rel_diff) < 0.02, (p.index, t)
    assert not [w for w in r.warnings if "engine" in w]
    assert "Client vs engine" in res.stdout


def test_metrics_url_credentials_stay_out_of_the_result() -> None:
    """A /metrics URL with user:pass@ and a token: neither reaches the figures or the warning."""
    from tokenwatt.load.engine_probe import ProbeEngine, engine_figures
    from tokenwatt.spec import parse_spec

    url = "http://admin:hunter2-secret@127.0.0.1:9/metrics?token=abcdef123456"
    window = EngineFigures(
        engine=None, url=url, unavailable=f"no engine metrics at {url} (refused)"
    )
    spec = parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "endpoint": {"url": "sim"},
            "hardware": {"accelerator": "h100-sxm", "gpus": 1},
        }
    )
    figures = engine_figures(ProbeEngine(window, 0.0), None, spec, None, None)  # type: ignore[arg-type]
    text = figures.model_dump_json()
    assert "hunter2-secret" not in text and "abcdef123456" not in text
    assert figures.unavailable is not None and "127.0.0.1:9" in figures.unavailable
