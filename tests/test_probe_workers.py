"""A probe sent by worker processes (``search.probe.workers`` / ``--workers``).

The truths: the N = 1 run of the same seed (the same requests at the same offsets, the same
counted set, T and per-request tokens close), a worker killed by the test (its requests
become ``worker_lost`` failures, each request recorded once), and hand-built results for the
keep-up refusal rule.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenwatt.load.derive import probe_verdict
from tokenwatt.load.keepup import keep_up_problems, load_generator_summary
from tokenwatt.load.probe import ProbeProgress, ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.report.checks import client_bound_probes, self_checks
from tokenwatt.result import BenchResult, WorkerKeepUp
from tokenwatt.spec import BenchSpec, parse_spec

pytestmark = pytest.mark.timeout(180)

SPEC = """
name: workers-test
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim}
sim: {efficiency: 0.5, prefill_cost: false}
workload: {input_tokens: 64, output_tokens: 12, seed: 4}
slo: {ttft_ms: 2000, tpot_ms: 200}
search: {probe: {warmup_s: 0.5, min_duration_s: 3.0, min_requests: 5}}
"""


_CLI = (sys.executable, "-m", "tokenwatt", "probe")
_THREAD = ("--sim-mode", "thread")


def _probe_cli(spec: Path, out: Path, workers: str) -> dict[str, Any]:
    res = subprocess.run(
        [*_CLI, str(spec), "--rate", "25", "--workers", workers, "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = orjson.loads((out / "result.json").read_bytes())["probes"][0]
    return data


def _lines(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (out / "requests.jsonl").read_bytes().splitlines()]


@pytest.mark.exclusive
def test_probe_with_two_workers_matches_one(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("min_duration_s: 3.0", "min_duration_s: 2.2"))  # 25/s × 2.2 s
    one = _probe_cli(spec, tmp_path / "one", "1")
    two = _probe_cli(spec, tmp_path / "two", "2")
    recs1, recs2 = _lines(tmp_path / "one"), _lines(tmp_path / "two")
    # every request recorded once, in send order, none failed
    ids2 = [r["request_id"] for r in recs2]
    assert ids2 == list(range(len(ids2))) and len(ids2) == two["run"]["requests_total"]
    assert two["requests_failed"] == 0
    # the same seed: the same schedule (offsets from the first slot) and the same counted set
    t1 = one["run"]["started_ns"]
    t2 = two["run"]["started_ns"]
    n = min(len(recs1), len(recs2))
    off1 = [r["scheduled_ns"] - t1 for r in recs1[:n]]
    off2 = [r["scheduled_ns"] - t2 for r in recs2[:n]]
    assert off1 == off2
    counted1 = {r["request_id"] for r in recs1 if r["phase"] == "window"}
    counted2 = {r["request_id"] for r in recs2 if r["phase"] == "window"}
    assert counted1 == counted2 and len(counted2) >= 50
    # the same requests got the same tokens; T within noise at a rate one process handles
    toks1 = {r["request_id"]: sum(r["chunk_tokens"]) for r in recs1 if r["phase"] == "window"}
    toks2 = {r["request_id"]: sum(r["chunk_tokens"]) for r in recs2 if r["phase"] == "window"}
    assert toks1 == toks2
    t_one, t_two = one["output_tokens_per_s"], two["output_tokens_per_s"]
    assert t_two == pytest.approx(t_one, rel=0.1)
    # who sent: two processes, each with its share, in the result
    lg = two["load_generator"]
    assert lg["workers"] == 2 and len(lg["per_worker"]) == 2
    assert sum(w["dealt"] for w in lg["per_worker"]) == len(recs2)
    # dealt alternately; only the last slots before the stop (never sent, dropped) may differ
    assert all(abs(w["dealt"] - len(recs2) / 2) <= 3 for w in lg["per_worker"])
    assert all(w["lost"] == 0 and w["events"] > 0 for w in lg["per_worker"])
    lg1 = one["load_generator"]
    assert lg1["workers"] == 1 and lg1["per_worker"][0]["dealt"] == len(recs1)


def _spec(workers: int, **probe: Any) -> BenchSpec:
    """SPEC with ``workers`` and a 4 s window; ``probe``: more ``search.probe`` fields."""
    import yaml

    data = yaml.safe_load(SPEC)
    data["search"]["probe"].update({"workers": workers, "min_duration_s": 4.0, **probe})
    return parse_spec(data)


def test_a_worker_killed_mid_probe_counts_as_failures() -> None:
    spec = _spec(2)
    killed: list[int] = []

    def kill_one(p: ProbeProgress) -> None:
        if not killed and p.elapsed_s > 1.5:
            victim = mp.active_children()[0]  # a spawned worker of this probe
            assert victim.pid is not None
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    async def main() -> ProbeRun:
        async with open_target(spec, sim_mode="subprocess") as target:
            return await run_probe(spec, target.client, rate_rps=20.0, seed=4, on_progress=kill_one)

    run = asyncio.run(main())
    assert killed
    ids = [r.request_id for r in run.records]
    assert len(ids) == len(set(ids))  # nothing counted twice
    lost = [r for r in run.records if r.error_kind == "worker_lost"]
    assert lost and all(r.failed for r in lost)
    assert all(f"pid {killed[0]}" in (r.error_message or "") for r in lost)
    assert all("killed by SIGKILL" in (r.error_message or "") for r in lost)
    # the survivor's requests completed; lost ones are failures of the window, with a cause
    assert any(r.status == "ok" for r in run.records)
    assert run.metrics.errors_by_kind.get("worker_lost", 0) == sum(
        1 for r in run.counted if r.error_kind == "worker_lost"
    )
    stats = {w.worker: w for w in run.keep_up}
    dead = [w for w in stats.values() if w.lost]
    assert len(dead) == 1 and dead[0].lost == len(lost)
    assert any("ended early" in p for p in keep_up_problems(dead[0]))
    # the client broke, not the server: "load generator failed", no SLO verdict
    verdict = probe_verdict(run, spec, None)
    assert verdict.failed[0] == "load_generator_failed" and not verdict.passed
    assert verdict.reason is not None and verdict.reason.startswith("load generator failed:")
    assert f"worker {dead[0].worker} died (pid {killed[0]} killed by SIGKILL)" in verdict.reason


def _spawned_workers(pid: int) -> list[int]:
    """The multiprocessing workers among ``pid``'s children (not its resource tracker)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:  # a thread (or a child) may end between the listing and the read
            children = (task / "children").read_text().split()
        except FileNotFoundError:
            continue
        for child in children:
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"spawn_main" in cmd:
                out.append(int(child))
    return out


def test_a_killed_worker_process_fails_the_load_generator_not_the_server(
    tmp_path: Path,
) -> None:
    """``probe --workers 2`` with one worker process killed mid-window: exit 3 with "load
    generator failed" naming the worker, no SLO verdict; every request on disk once."""
    import time

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("min_duration_s: 3.0", "min_duration_s: 4.0"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*_CLI, str(spec), "--rate", "20", "--workers", "2", *_THREAD, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    spill = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        spill.exists() and len(spill.read_bytes().splitlines()) >= 15
    ):
        time.sleep(0.1)
    victims = _spawned_workers(proc.pid)
    assert len(victims) == 2, victims
    os.kill(victims[1], signal.SIGKILL)
    stdout, err = proc.communicate(timeout=90)
    text = stdout.decode() + err.decode()
    assert proc.returncode == 3, text[-3000:]
    assert "Traceback" not in text
    assert "no SLO verdict" in text and "load generator failed" in text
    assert f"pid {victims[1]} killed by SIGKILL" in " ".join(text.split())
    data = orjson.loads((out / "result.json").read_bytes())["probes"][0]
    detail = data["slo_detail"]
    assert detail["load_generator_failed"] and detail["failed"][0] == "load_generator_failed"
    recs = _lines(out)
    ids = [r["request_id"] for r in recs]
    assert len(ids) == len(set(ids))
    lost = [r for r in recs if r["error_kind"] == "worker_lost"]
    assert lost and all(f"pid {victims[1]}" in r["error_message"] for r in lost)
    per_worker = data["load_generator"]["per_worker"]
    assert sum(w["lost"] for w in per_worker) == len(lost)


def _stats(busy: float) -> WorkerKeepUp:
    return WorkerKeepUp(
        worker=0,
        core=1,
        dealt=100,
        lost=0,
        send_lateness_p50_s=100e-6,
        send_lateness_p99_s=400e-6,
        busy_fraction=busy,
        coalesced_reads=0,
        events=1000,
        exact_share=1.0,
    )


def _result(boundary_busy: float | None, hi_busy: float | None) -> BenchResult:
    fixture = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"
    data = json.loads(fixture.read_text("utf-8"))
    data["search"]["hi_rps"] = 9.5  # probe 9 failed at 9.5 rps, above the 9.25 boundary
    for p, busy in ((data["boundary"], boundary_busy), (data["probes"][8], hi_busy)):
        if busy is not None:
            lg = load_generator_summary(1, [_stats(busy)], saturated=False)
            p["load_generator"] = lg.model_dump(mode="json")
    return BenchResult.model_validate(data)


def test_keep_up_refuses_a_boundary_the_client_could_not_drive() -> None:
    # a sender with CPU to spare: no refusal
    assert client_bound_probes(_result(0.5, 0.89)) == []
    assert not [c for c in self_checks(_result(0.5, 0.89)) if "bottleneck" in c.message]
    # the failed probe above the boundary was client-bound: its failure may be the client's
    r = _result(0.5, 0.95)
    assert [p.index for p in client_bound_probes(r)] == [9]
    (msg,) = [c.message for c in self_checks(r) if "bottleneck" in c.message]
    assert msg.startswith("probe 9: the load generator was the bottleneck (a sending process")
    assert "95% busy with 1 worker" in msg and "use more workers" in msg
    # the boundary probe itself client-bound
    assert [p.index for p in client_bound_probes(_result(0.97, None))] == [10]
    # saturation alone is a bottleneck too
    sat = load_generator_summary(2, [_stats(0.3)], saturated=True)
    assert sat.bottleneck and sat.problems[0].startswith("the sender fell behind")


def test_workers_flag_and_field_are_bounded(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    for bad, words in (("0", "1 to 256"), ("two", "whole number or auto")):
        res = subprocess.run(
            [*_CLI, str(spec), "--rate", "5", "--workers", bad, "--out", str(tmp_path / "x")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert res.returncode == 2
        assert "--workers" in res.stderr and words in res.stderr
        assert "Traceback" not in res.stderr
    assert _spec(3).search.probe.workers == 3


def test_ctrl_c_to_the_process_group_cancels_worker_requests(tmp_path: Path) -> None:
    """Ctrl-C in a terminal reaches every process of the group: the workers must leave the
    ending to the probe, so their requests end ``cancelled`` (not ``worker_lost``)."""
    ctrl_c_keeps_every_request(tmp_path, ["--workers", "2"])


def ctrl_c_keeps_every_request(
    tmp_path: Path, senders: list[str], sig: signal.Signals = signal.SIGINT, group: bool = True
) -> None:
    """Start a 60 s probe with ``senders``, Ctrl-C its process group (or send ``sig`` to
    ``group`` or the CLI alone) once 20 requests are on disk: exit 128 + sig, no traceback,
    each request once, none lost or failed, some cancelled, the result written."""
    import time

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("min_duration_s: 3.0", "min_duration_s: 60.0"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        # the simulator in a thread: a simulator process in the group would shut down too
        [*_CLI, str(spec), "--rate", "20", *senders, *_THREAD, "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    spill = out / "requests.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if spill.exists() and len(spill.read_bytes().splitlines()) >= 20:
            break
        time.sleep(0.2)
    if group:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err.decode()[-2000:]
    assert b"Traceback" not in err
    recs = _lines(out)
    ids = [r["request_id"] for r in recs]
    assert len(ids) == len(set(ids)) >= 20
    assert not [r for r in recs if r["error_kind"] == "worker_lost"]
    assert [(r["error_kind"], r["error_message"]) for r in recs if r["status"] == "error"] == []
    assert any(r["status"] == "cancelled" for r in recs)  # in flight when it stopped
    data = orjson.loads((out / "result.json").read_bytes())
    assert data["interrupted"] is True and data["probes"][0]["interrupted"] is True
    assert sorted(ids) == list(range(len(ids)))  # none missing: only unsent ones dropped
    assert all(w["lost"] == 0 for w in data["probes"][0]["load_generator"]["per_worker"])


def test_generator_failure_names_each_broken_worker() -> None:
    """Hand-built keep-up figures: a healthy pool is no failure; a dead process, a lost Ray
    actor and a refused clock each get their line, in worker order."""
    from tokenwatt.load.keepup import generator_failure

    ok = _stats(0.3)

    def replace(w: WorkerKeepUp, **changes: Any) -> WorkerKeepUp:
        return w.model_copy(update=changes)

    assert generator_failure([ok, replace(ok, worker=1)]) is None
    dead = replace(ok, worker=1, lost=7, exit_code=-9, cause="pid 42 killed by SIGKILL")
    actor = replace(ok, worker=2, lost=3, node_id="abcdef0123456789", cause="Ray actor lost: X")
    clock = replace(ok, worker=3, node_id="ffff", cause="clock of worker 3 known only to ±9 ms")
    why = generator_failure([ok, dead, actor, clock])
    assert why == (
        "load generator failed: worker 1 died (pid 42 killed by SIGKILL), 7 requests "
        "worker_lost; worker 2 on node abcdef012345 died (Ray actor lost: X), 3 requests "
        "worker_lost; worker 3 on node ffff: clock of worker 3 known only to ±9 ms; the client "
        "failed, not the server: no SLO verdict, rerun the probe"
    )
