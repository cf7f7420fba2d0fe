"""Workers as Ray actors (load.ray_workers) on a local Ray cluster started by the test.

Marked slow (Ray takes seconds to start); skipped where the ``ray`` extra is not installed.
The simulator serves over real HTTP on 127.0.0.1. On one machine every actor shares the
coordinator's monotonic clock, so the true clock offset is 0: the measured offset must lie
within its own reported uncertainty of 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.arrivals import OpenLoopSchedule
from tokenwatt.load.workers import ClientConfig, ScheduledRequest, draw_schedule
from tokenwatt.load.workload import WorkloadGenerator
from tokenwatt.sim import RunningSim, SimConfig, start_sim_thread
from tokenwatt.spec.endpoint import Timeouts
from tokenwatt.spec.workload import Workload

ray = pytest.importorskip("ray")

from tokenwatt.load.ray_workers import RayPoolResult, RayWorkerPool  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    cfg = SimConfig(
        geometry=load_geometry("llama-3.1-8b"),
        accelerator=get_accelerator("h100-sxm"),
        served_model_name="sim-8b",
        max_model_len=4096,
        prefill_cost=False,
    )
    with start_sim_thread(cfg) as running:
        yield running


def _schedule(count: int, rate_rps: float, out: int) -> list[ScheduledRequest]:
    wl = {"input_tokens": 32, "output_tokens": out}
    gen = WorkloadGenerator(Workload.model_validate(wl), prompt_format="token_ids", seed=4)
    return draw_schedule(OpenLoopSchedule("poisson", rate_rps, 4), gen, count)


def _config(url: str) -> ClientConfig:
    t = Timeouts(connect_s=10, first_token_s=30, idle_s=20, total_s=120)
    return ClientConfig(url, api="completions", model="sim-8b", timeouts=t)


def test_two_actors_send_the_schedule(cluster: Any, sim: RunningSim) -> None:
    sched = _schedule(30, 20.0, 20)
    res = asyncio.run(RayWorkerPool(2, _config(sim.url)).run(sched))
    assert isinstance(res, RayPoolResult)
    assert [r.request_id for r in res.records] == list(range(30))
    assert all(r.ok for r in res.records), [r.error_message for r in res.records]
    assert [r.output_tokens for r in res.records] == [20] * 30
    assert len(res.offsets) == 2
    for off in res.offsets:
        # one machine: the true offset is 0
        assert abs(off.offset_ns) <= off.uncertainty_ns + 1_000
        assert off.uncertainty_ns < 1_000_000_000
    worst = max(o.uncertainty_ns for o in res.offsets) + 1_000
    for r, q in zip(res.records, sched, strict=True):
        # scheduled where the schedule said, on the coordinator's clock, within the uncertainty
        assert abs(r.scheduled_ns - res.start_ns - q.offset_ns) <= worst
        assert r.sent_ns is not None and r.first_token_ns is not None
        assert r.scheduled_ns <= r.sent_ns + worst and r.sent_ns < r.first_token_ns
    assert [w.dealt for w in res.workers] == [15, 15]
    assert all(w.lost == 0 and w.busy_fraction is not None for w in res.workers)


def test_an_actor_killed_mid_probe_counts_its_requests_as_failures(
    cluster: Any, sim: RunningSim
) -> None:
    sched = _schedule(16, 40.0, 400)

    async def main() -> RayPoolResult:
        pool = RayWorkerPool(2, _config(sim.url))
        task = asyncio.create_task(pool.run(sched))
        while len(pool.actors) < 2:
            await asyncio.sleep(0.05)
        victim = pool.actors[1]
        await asyncio.sleep(4.0)  # offsets measured, requests in flight (400 tokens take s)
        ray.kill(victim, no_restart=True)
        return await task

    res = asyncio.run(main())
    assert sorted(r.request_id for r in res.records) == list(range(16))  # none lost or doubled
    w0, w1 = res.workers
    assert w0.lost == 0 and all(r.ok for r in res.records if r.request_id % 2 == 0)
    assert w1.lost >= 1 and w1.cause is not None and "Ray actor lost" in w1.cause
    lost = [r for r in res.records if r.error_kind == "worker_lost"]
    assert len(lost) == w1.lost and all(r.request_id % 2 == 1 for r in lost)
    assert any("worker 1 ended early (Ray actor lost" in p for p in res.keep_up_problems())
