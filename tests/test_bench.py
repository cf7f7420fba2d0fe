"""`tokenwatt bench` end to end against the simulator, plus the early-stop rule in isolation.

The end-to-end spec makes the boundary a property of the engine: a dense model limited to 8
running sequences per step, so service saturates at 8 ÷ (8 tokens × step time) requests/s
and the queue (TTFT) grows above it. Arrivals are evenly spaced (constant) so that windows of
1.5 s mean something (and stay over ten update periods of the energy counter): with Poisson
arrivals a 30-request window carries ±18 % of count noise, which the slow validation tests
handle with longer probes instead. Eight output tokens keep a
request's lifetime (and so the bench's warm-up of three lifetimes) near a quarter of a second,
and the search starts at about 85 % of saturation. The SLO is p90 (α = 0.1): the two-sided
search stops only once its reported interval is closed at both ends, and at p90 the low end
needs about a hundred clean requests (at p99, about a thousand: far beyond 1.5 s windows).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml

from tokenwatt.geometry import load_geometry
from tokenwatt.load.bench import outcome_of
from tokenwatt.load.search import bracket_rate
from tokenwatt.metrics.boundary import LOW_END_MIN_BELOW_SHORT, Evidence, two_sided_boundary
from tokenwatt.metrics.slo import EarlyStop, Limits
from tokenwatt.records import RequestRecord
from tokenwatt.report.exports import br02_name
from tokenwatt.result import BenchResult, load_result

SECRET = "sk-bench-test-7d1e"

SPEC = {
    "name": "bench-test",
    "endpoint": {"url": "sim", "api_key_env": "TW_BENCH_KEY"},
    "model": {"source": "llama-3.1-8b"},
    "hardware": {
        "accelerator": None,
        "custom": {
            "bandwidth_bytes_per_s": 1e12,
            "memory_bytes": 80e9,
            "bf16_dense_flops": 1e15,
            "tdp_w": 700,
        },
    },
    "sim": {"efficiency": 0.5, "prefill_cost": False, "max_num_seqs": 8},
    "workload": {
        "input_tokens": 128,
        "output_tokens": 8,
        "seed": 3,
        "arrival": {"kind": "constant"},
    },
    "slo": {"ttft_ms": 200, "tpot_ms": 200, "percentile": 0.9},
    "search": {
        "start_rate_rps": 28,
        "growth": 2.0,
        "precision": 0.45,
        "max_probes": 8,
        "single_stream_requests": 2,
        "probe": {
            "warmup_s": 0.5,
            "min_duration_s": 1.5,
            "min_requests": 15,
            "max_duration_s": 4,
            "drain_timeout_s": 5,
        },
    },
}


def run_cli(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TW_BENCH_KEY": SECRET, "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def bench_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One bench of ``SPEC`` for the whole run: under pytest-xdist the two tests reading it
    may land on both workers, and the second reads the first's run (its files and its printed
    output, kept beside them) instead of running the same bench again."""
    xdist = os.environ.get("PYTEST_XDIST_WORKER") is not None
    base = tmp_path_factory.getbasetemp()
    d = (base.parent if xdist else base) / "bench-run"  # the parent is shared by the workers
    with open(d.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            printed = d / "printed.json"
            if not printed.exists():
                d.mkdir(exist_ok=True)
                spec = d / "spec.yaml"
                # room for a low end probed twice (SPEC's 8 is what tests/test_bench_progress.py
                # reads)
                roomy = {**SPEC, "search": {**SPEC["search"], "max_probes": 12}}  # type: ignore[dict-item]
                spec.write_text(yaml.safe_dump(roomy))
                res = run_cli("bench", str(spec), "--out", str(d / "out"))
                run = {"args": res.args, "rc": res.returncode, "out": res.stdout, "err": res.stderr}
                printed.write_bytes(orjson.dumps(run))
            run = orjson.loads(printed.read_bytes())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return d / "out", subprocess.CompletedProcess(run["args"], run["rc"], run["out"], run["err"])


def _check_probe_figures(r: BenchResult) -> None:
    """Every probe carries the figures the issue lists, MBU with its inputs (a window cut short
    by the early stop has no MBU: its counted requests were cancelled mid-stream). Whether a
    failing probe here is stopped early or runs its window out depends on timing on a busy
    machine; the early stop itself is tested in test_probe_e2e.py."""
    for p in r.probes:
        if p.slo_detail.in_flight_misses and not p.slo_detail.judged:
            # stopped on known TTFT misses still in flight before a counted request finished
            assert p.achieved_rate_rps == 0 and not p.slo_passed and p.mbu is None
            continue
        assert p.achieved_rate_rps > 0 and p.output_tokens_per_s > 0
        assert p.goodput_output_tokens_per_s_per_gpu == pytest.approx(
            p.goodput_output_tokens_per_s / r.gpus
        )
        if p.slo_detail.early_stopped:
            assert p.mbu is None and "window_cut" in p.flags and not p.slo_passed
            continue
        assert p.mbu is not None and 0 < p.mbu < 1 and p.mbu_detail is not None
        inputs = p.mbu_detail.inputs
        assert inputs.batch_per_replica == pytest.approx(p.batch_per_replica)
        assert inputs.output_tokens_per_s == pytest.approx(p.output_tokens_per_s)
        # the simulator's energy counter is read like an exporter
        assert p.tokens_per_joule is not None and p.tokens_per_joule > 0


@pytest.mark.timeout(200)
def test_bench_writes_a_consistent_result(
    bench_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, res = bench_run
    assert res.returncode == 0, res.stderr[-2000:]
    r = load_result(out)
    assert not r.interrupted and r.search is not None
    assert r.search.stop_reason == "converged"
    # The boundary passed, the lowest failure above it failed, within the precision.
    b = r.boundary
    assert b is not None and b.slo_passed and b.rate_rps == r.search.lo_rps  # type: ignore[attr-defined]
    hi = r.search.hi_rps  # type: ignore[attr-defined]
    assert hi is not None and (hi - b.rate_rps) / b.rate_rps < 0.45  # type: ignore[operator]
    assert any(p.rate_rps == hi and not p.slo_passed for p in r.probes)
    # Saturation: 8 running sequences ÷ (8 steps × step time), the step reading the weights
    # (and a negligible KV cache) at 50 % of 1 TB/s. Short windows resolve it to a few percent.
    step_s = load_geometry("llama-3.1-8b").weight_bytes_per_step(8) / 0.5e12
    capacity = 8 / (8 * step_s)
    assert 32 < capacity < 35
    assert b.rate_rps < 1.15 * capacity  # type: ignore[operator]
    assert hi > 0.9 * capacity
    # The search history matches the probes, one requests file each; after it come the
    # drift checks (a re-test of the boundary's rate, a confirmation at the fitted rate unless
    # the re-test's lies within the precision of it: load.search.drift_check_plan).
    searched = [p for p in r.probes if p.phase != "check"]
    assert [s.rate_rps for s in r.search.history] == [p.rate_rps for p in searched]
    checks = [p for p in r.probes if p.phase == "check"]
    assert len(checks) in (1, 2) and checks[0].rate_rps == b.rate_rps
    assert len(r.search.drift) == len(checks)
    assert all("latency as searched" in d for d in r.search.drift), r.search.drift
    # The checks do not join the fit (joined, their long windows near the boundary cost the
    # reported interval its coverage): the interval is the fit over the search's own probes,
    # each at the rate its verdict is placed at.
    every = [
        Evidence(
            bracket_rate(p.rate_rps, o), o.evidence.judged, o.evidence.misses, o.evidence.in_flight
        )
        for p in searched
        if (o := outcome_of(p)).evidence is not None and p.rate_rps is not None
    ]
    assert len(every) == len(searched)
    allowed = Limits.from_spec(r.spec.slo).allowed_violation_fraction
    # 8 output tokens per request: short outputs, the low end at least 22 % below the point
    assert r.search.low_end_min_below == LOW_END_MIN_BELOW_SHORT
    fit = two_sided_boundary(every, allowed, min_below=r.search.low_end_min_below)
    assert b.rate_interval_rps == (fit.low_rps, fit.high_rps)
    # One drift check exactly when the re-test's rate lies within the precision (45 %) of the
    # fitted point; a confirmation runs at that point.
    assert fit.rate_rps is not None
    near = abs(b.rate_rps - fit.rate_rps) < 0.45 * fit.rate_rps  # type: ignore[operator]
    assert len(checks) == (1 if near else 2)
    assert all(c.rate_rps == fit.rate_rps for c in checks[1:])
    # Converged means the reported interval is closed at both ends within the precision, its
    # low end at a probed rate (the two-sided search's stop rule).
    assert fit.low_rps is not None and fit.high_rps is not None
    assert fit.relative_half_width is not None and fit.relative_half_width <= 0.45
    assert fit.low_rps in {e.rate_rps for e in every}
    for p in [r.single_stream, *r.probes]:
        assert p is not None and p.requests_file is not None
        lines = (out / p.requests_file).read_bytes().splitlines()
        assert len(lines) >= p.requests_ok + p.requests_failed
    _check_probe_figures(r)
    ss = r.single_stream
    assert ss is not None and ss.rate_rps is None and ss.requests_ok == 2
    # The report leads with goodput; the key never reaches a file or the terminal.
    assert "SLO goodput" in res.stdout
    assert (out / "report.html").exists()
    for f in out.iterdir():
        assert SECRET not in f.read_text("utf-8", errors="replace"), f
    assert SECRET not in res.stdout + res.stderr
    assert (
        orjson.loads((out / "result.json").read_bytes())["spec"]["endpoint"]["api_key_env"]
        == "TW_BENCH_KEY"
    )


@pytest.mark.timeout(120)
def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    slow = {**SPEC, "search": {**SPEC["search"], "probe": {**SPEC["search"]["probe"]}}}  # type: ignore[dict-item]
    slow["search"]["probe"].update(min_duration_s=30, max_duration_s=30)  # type: ignore[index]
    # p99 far below saturation: no sequential verdict closes the 30 s window before the signal
    slow["search"]["start_rate_rps"] = 12  # type: ignore[index]
    slow["slo"] = {**SPEC["slo"], "percentile": 0.99}  # type: ignore[dict-item]
    spec.write_text(yaml.safe_dump(slow))
    out = tmp_path / "out"
    env = {**os.environ, "TW_BENCH_KEY": SECRET}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenwatt", "bench", str(spec), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # wait until the first search probe is running (the single-stream point is written)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (out / "requests-00.jsonl").exists():
                break
            time.sleep(0.2)
        time.sleep(3.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    r = load_result(out)
    assert r.interrupted
    assert r.single_stream is not None
    assert len(r.probes) == 1 and "interrupted" in r.probes[0].slo_detail.failed
    assert not r.probes[0].slo_passed
    assert r.search is not None and r.search.stop_reason == "interrupted"
    assert (out / "requests-01.jsonl").exists()
    assert "interrupted" in stdout


def test_bad_spec_is_one_line_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "search": {"growth": 0.5}}))
    res = run_cli("bench", str(spec), "--out", str(tmp_path / "o"), timeout=30)
    assert res.returncode == 2
    assert "search.growth" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "o").exists()


# --- early stop in isolation ------------------------------------------------------------

P99 = Limits("percentile", ttft_s=0.5, tpot_s=0.05, e2e_s=None, percentile=0.99, attainment=0.9)


def _rec(i: int, ttft_s: float, tpot_s: float = 0.02, ok: bool = True) -> RequestRecord:
    sent = i * 10_000_000
    first = sent + round(ttft_s * 1e9)
    end = first + round(tpot_s * 9 * 1e9)
    r = RequestRecord(i, sent, 100, 10, sent_ns=sent, first_token_ns=first, end_ns=end)
    r.done_ns, r.completion_tokens, r.prompt_tokens = end, 10, 100
    if not ok:
        r.status, r.error_kind = "error", "http_status"
    return r


def test_early_stop_needs_both_a_lost_budget_and_a_clear_binomial_failure() -> None:
    stop = EarlyStop(P99, expected_requests=200)  # budget: 2 misses
    good = [_rec(i, 0.1) for i in range(40)]
    stop.on_counted(43)
    # 3 misses of 43: over the budget, and P(X ≥ 3 | 43, 0.01) ≈ 0.009 < 1 %: stop.
    assert stop([*good, _rec(40, 0.9), _rec(41, 0.9), _rec(42, 0.9)])
    assert stop.reason is not None and "ttft" in stop.reason
    # 2 misses: within the budget of a 200-request probe, whatever the binomial says.
    stop2 = EarlyStop(P99, expected_requests=200)
    stop2.on_counted(12)
    assert not stop2([*good[:10], _rec(40, 0.9), _rec(41, 0.9)])
    # 3 misses but among 400 counted so far: plausible for a p99 server (P ≈ 0.76): go on.
    stop3 = EarlyStop(P99, expected_requests=200)
    stop3.on_counted(400)
    assert not stop3([*good, _rec(40, 0.9), _rec(41, 0.9), _rec(42, 0.9)])


def test_early_stop_counts_errors_and_tpot() -> None:
    stop = EarlyStop(P99, expected_requests=100)  # budget: 1
    stop.on_counted(20)
    errs = [_rec(i, 0.0, ok=False) for i in range(3)]
    assert stop([*[_rec(i, 0.1) for i in range(3, 20)], *errs])
    stop_tpot = EarlyStop(P99, expected_requests=100)
    stop_tpot.on_counted(20)
    slow = [_rec(i, 0.1, tpot_s=0.08) for i in range(3)]
    assert stop_tpot([*[_rec(i, 0.1) for i in range(3, 20)], *slow])
    assert stop_tpot.reason is not None and "tpot" in stop_tpot.reason


def test_early_stop_attainment_form() -> None:
    att = Limits("attainment", ttft_s=0.5, tpot_s=0.05, e2e_s=None, percentile=0.99,
                 attainment=0.9)  # fmt: skip
    stop = EarlyStop(att, expected_requests=100)  # may miss 10
    stop.on_counted(40)
    ok = [_rec(i, 0.1) for i in range(28)]
    assert not stop([*ok, *[_rec(i, 0.9) for i in range(28, 36)]])  # 8 misses: within budget
    assert stop([*ok, *[_rec(i, 0.9) for i in range(28, 40)]])  # 12 of 40: clear failure


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_runs_the_bundled_spec(tmp_path: Path) -> None:
    """`tokenwatt demo` end to end (two to three minutes here; its wall time is reported in
    docs/methodology.md, never asserted)."""
    out = tmp_path / "demo"
    res = run_cli("demo", "--out", str(out), timeout=390)
    assert res.returncode == 0, res.stderr[-2000:]
    r = load_result(out)
    assert r.geometry.experts == 128 and r.accelerator.name == "h100-sxm"
    assert r.search is not None and r.search.stop_reason == "converged"
    b = r.boundary
    assert b is not None and b.slo_passed and b.mbu is not None
    assert b.tokens_per_joule is not None
    # MBU below the simulated stack's 50 %: prefill and overhead share each step.
    assert 0.3 < b.mbu < 0.5
    assert "SLO goodput" in res.stdout and (out / "report.html").exists()
    # labelled simulated; sized so that every p99 rests on >= 2 requests beyond it
    assert r.target is not None and r.target.kind == "sim" and "SIMULATED" in res.stdout
    from tokenwatt.report.checks import self_checks

    assert not [c for c in self_checks(r) if "rests on fewer" in c.message]


@pytest.mark.timeout(200)
def test_bench_writes_br02_and_csv_next_to_the_result(
    bench_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """Each probe's BR0.2 partial validates against the schema model and carries the probe's
    own counts (the result's figures are the independent truth); probes.csv has one row each."""
    import csv

    from test_report_br02_official import official_errors
    from tokenwatt.report.br02 import BenchmarkReportV02

    out, proc = bench_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = load_result(out)
    probes = [result.single_stream, *result.probes]
    eids = set()
    powered = 0
    for p in probes:
        assert p is not None
        doc = yaml.safe_load((out / br02_name(p.index)).read_text())
        for version in ("0.2", "0.2.1"):  # llm-d's official models (tests/fixtures/llm-d)
            assert official_errors(doc, version) == []
        rep = BenchmarkReportV02.model_validate(doc)
        eids.add(rep.run.eid)
        agg = rep.results.request_performance.aggregate
        assert agg.requests is not None and agg.requests.total == p.requests_counted
        assert (agg.requests.failures or 0) == p.requests_failed
        assert (agg.requests.incomplete or 0) == p.requests_cancelled
        assert rep.run.time.duration == f"PT{p.window_s:.6f}S"
        assert agg.latency is not None
        # none only for a probe stopped on known misses in flight before any request finished
        assert (agg.latency.time_to_first_token is None) == (p.ttft_s.mean is None)
        if p.ttft_s.mean is not None:
            ttft = agg.latency.time_to_first_token
            scale = 1e3 if ttft.units == "ms" else 1.0
            assert ttft.mean == pytest.approx(p.ttft_s.mean * scale, rel=1e-9)
        # the measured power and the engine's KV usage ride along in observability
        comps = (doc["results"].get("observability") or {}).get("components") or [{}]
        power = comps[0].get("aggregate", {}).get("power_consumption")
        if p.energy is not None and p.energy.valid and p.energy.mean_power_w is not None:
            assert power == {"units": "Watts", "mean": pytest.approx(p.energy.mean_power_w)}
            powered += 1
    assert len(eids) == 1  # one experiment, one report per probe
    assert powered >= 1  # the simulator's energy counter measured every probe
    rows = list(csv.DictReader((out / "probes.csv").open()))
    assert [int(r["stage"]) for r in rows] == [p.index for p in probes if p is not None]
    for r, p in zip(rows, probes, strict=True):
        assert p is not None and int(r["completed"]) == p.requests_ok
        # one definition: the CSV's output tokens/s is the result's T, per GPU ÷ N_GPU
        assert float(r["output_tok_s"]) == p.output_tokens_per_s
        assert float(r["output_tok_s_per_gpu"]) == p.output_tokens_per_s / result.gpus
