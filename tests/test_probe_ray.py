"""A probe sent by Ray actors fed live (``search.probe.ray`` / ``--ray``, ``send.ray_actors``).

The truths: the in-process probe of the same seed (the same requests at the same offsets, the
same counted set, tokens per request, T within noise at a rate one process handles); on one
machine every actor shares the coordinator's monotonic clock, so each measured offset must lie
within its own uncertainty of the true 0; an actor killed by the test (its unreported requests
become ``worker_lost`` failures with the cause, each request recorded once, no hang).

The Ray tests are slow (Ray takes seconds to start) and skip without the ``ray`` extra; the
flag and field checks at the end need no Ray and run in the default suite.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from test_probe_workers import _CLI, SPEC, _spec, ctrl_c_keeps_every_request
from tokenwatt.load.derive import probe_verdict
from tokenwatt.load.keepup import keep_up_problems
from tokenwatt.load.probe import ProbeProgress, ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.spec import BenchSpec

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _probe(spec: BenchSpec, rate: float, **kw: Any) -> ProbeRun:
    async def main() -> ProbeRun:
        async with open_target(spec, sim_mode="subprocess") as target:
            return await run_probe(spec, target.client, rate_rps=rate, seed=4, **kw)

    return asyncio.run(main())


def _counted_tokens(run: ProbeRun) -> dict[int, int]:
    return {r.request_id: r.output_tokens for r in run.counted}


@pytest.mark.slow
def test_two_actors_send_what_one_process_sends(cluster: Any) -> None:
    one = _probe(_spec(1), 25.0)
    two = _probe(_spec(2, ray="local"), 25.0)
    # every request recorded exactly once, none failed (those after the window may be cut)
    ids = [r.request_id for r in two.records]
    assert ids == list(range(len(ids)))
    assert not [r.error_message for r in two.records if r.failed]
    assert all(r.ok for r in two.counted)
    # the same seed: the same offsets from the first slot, the same counted set and tokens
    n = min(len(one.records), len(two.records))
    off1 = [r.scheduled_ns - one.started_ns for r in one.records[:n]]
    off2 = [r.scheduled_ns - two.started_ns for r in two.records[:n]]
    assert off1 == off2
    assert _counted_tokens(one) == _counted_tokens(two) and len(two.counted) >= 50
    t1, t2 = one.metrics.output_tokens_per_s, two.metrics.output_tokens_per_s
    assert t2 == pytest.approx(t1, rel=0.1)
    # sent on time on the coordinator's clock: stamps shifted back, in order
    for r in two.counted:
        assert r.sent_ns is not None and r.first_token_ns is not None and r.done_ns is not None
        assert r.scheduled_ns - 2_000_000 <= r.sent_ns < r.first_token_ns <= r.done_ns
    # two actors, each with its node and its clock: one machine, so the true offset is 0
    assert two.workers == 2 and len(two.keep_up) == 2
    assert sum(w.dealt for w in two.keep_up) == len(two.records)
    for w in two.keep_up:
        assert w.lost == 0 and w.node_id and w.events > 0
        assert w.clock_offset_ns is not None and w.clock_uncertainty_ns is not None
        assert abs(w.clock_offset_ns) <= w.clock_uncertainty_ns + 1_000
        assert w.clock_uncertainty_ns < 100_000_000


@pytest.mark.slow
def test_an_actor_killed_mid_probe_counts_its_requests_as_worker_lost(cluster: Any) -> None:
    killed: list[str] = []

    def kill_one(p: ProbeProgress) -> None:
        if killed or p.elapsed_s < 1.5:
            return
        names = [x for x in cluster.util.list_named_actors() if x.startswith("tokenwatt-")]
        (victim,) = [x for x in names if x.endswith("-1")]
        cluster.kill(cluster.get_actor(victim), no_restart=True)
        killed.append(victim)

    run = _probe(_spec(2, ray="local"), 20.0, on_progress=kill_one)
    assert killed
    ids = [r.request_id for r in run.records]
    assert len(ids) == len(set(ids))  # nothing counted twice
    # none missing up to the window's end (later ones whose slot had not come are dropped)
    assert set(range(max(r.request_id for r in run.counted) + 1)) <= set(ids)
    lost = [r for r in run.records if r.error_kind == "worker_lost"]
    assert lost and all(r.failed and r.request_id % 2 == 1 for r in lost)
    assert all("Ray actor lost" in (r.error_message or "") for r in lost)
    # the survivor's requests completed; only actor 1 lost any
    assert not [r for r in run.records if r.request_id % 2 == 0 and r.failed]
    assert all(r.ok for r in run.counted if r.request_id % 2 == 0)
    dead = [w for w in run.keep_up if w.lost]
    assert [w.worker for w in dead] == [1] and dead[0].lost == len(lost)
    assert dead[0].cause is not None and "Ray actor lost" in dead[0].cause
    assert any("ended early (Ray actor lost" in p for p in keep_up_problems(dead[0]))
    assert run.metrics.errors_by_kind.get("worker_lost", 0) == sum(
        1 for r in run.counted if r.error_kind == "worker_lost"
    )
    # the client broke, not the server: "load generator failed", no SLO verdict
    verdict = probe_verdict(run, _spec(2, ray="local"), None)
    assert verdict.failed[0] == "load_generator_failed" and not verdict.passed
    assert verdict.reason is not None and verdict.reason.startswith("load generator failed:")
    assert f"worker 1 on node {dead[0].node_id[:12]} died (Ray actor lost" in verdict.reason


@pytest.mark.slow
def test_probe_cli_with_ray_writes_the_actors_offsets(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    args = [*_CLI, str(spec), "--rate", "20", "--ray", "local", "--workers", "2"]
    res = subprocess.run(
        [*args, "--out", str(out), "-q"], capture_output=True, text=True, timeout=200, check=False
    )
    assert res.returncode == 0, res.stderr[-3000:]
    result = orjson.loads((out / "result.json").read_bytes())
    (probe,) = result["probes"]
    lg = probe["load_generator"]
    assert lg["workers"] == 2 and len(lg["per_worker"]) == 2
    for w in lg["per_worker"]:
        assert w["node_id"] and w["lost"] == 0 and w["clock_samples"] >= 2
        assert abs(w["clock_offset_ns"]) <= w["clock_uncertainty_ns"] + 1_000
    recs = [orjson.loads(x) for x in (out / "requests.jsonl").read_bytes().splitlines()]
    assert sorted(r["request_id"] for r in recs) == list(range(len(recs)))


# ---------------------------------------------------------------------- no Ray needed
def _cli_error(*cmd: str) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    line = res.stderr.strip()
    assert "\n" not in line, line
    return line


def test_ray_flag_and_field_errors_are_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = str(tmp_path / "x")
    line = _cli_error(*_CLI, str(spec), "--rate", "5", "--ray", "my cluster", "--out", out)
    assert "--ray: must be local, auto or a Ray cluster address" in line
    bad = SPEC.replace("min_requests: 5}", "min_requests: 5, ray: nowhere}")
    spec.write_text(bad)
    line = _cli_error(*_CLI, str(spec), "--rate", "5", "--out", out)
    assert "search.probe.ray: must be local, auto" in line and "'nowhere'" in line
    for ok in ("local", "auto", "ray://head:10001", "10.0.0.1:6379"):
        assert _spec(2, ray=ok).search.probe.ray == ok


def test_ray_flag_without_ray_names_the_extra(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    argv = ["tokenwatt", "probe", str(spec), "--rate", "5", "--ray", "local", "--out", "x"]
    code = (
        "import sys; sys.modules['ray'] = None  # as if the extra were not installed\n"
        f"sys.argv = {argv!r}\n"
        "from tokenwatt.cli import main; main()"
    )
    line = _cli_error(sys.executable, "-c", code)
    assert "pip install 'tokenwatt[ray]'" in line


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_cancels_actor_requests(tmp_path: Path) -> None:
    """Ctrl-C reaches the CLI and the Ray processes it started alike: the probe ends the
    actors' requests as ``cancelled`` (not ``worker_lost``), writes what it measured, exits
    130 (the same truth as for local worker processes)."""
    pytest.importorskip("ray")
    ctrl_c_keeps_every_request(tmp_path, ["--ray", "local", "--workers", "2"])


@pytest.mark.slow
def test_sigterm_under_ray_keeps_every_record_and_exits_143(tmp_path: Path) -> None:
    """``ray.init`` installs a SIGTERM handler that exits at once (was: exit 130, no
    probe.json or result.json, 3-6 records lost); tokenwatt's handler is put back, so SIGTERM
    to the CLI ends the probe as Ctrl-C does: every record kept, the result written, 143."""
    pytest.importorskip("ray")
    args = ["--ray", "local", "--workers", "2"]
    ctrl_c_keeps_every_request(tmp_path, args, sig=signal.SIGTERM, group=False)
