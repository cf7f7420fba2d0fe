"""Worker processes (load.workers) and their record batches (load.wire).

Pure parts (schedule, deal, wire, merge, keep-up judgement) are checked against independent
truths: the arrival and workload generators drawn directly, and records built by hand. The
pool itself runs real processes against the simulator over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
from array import array
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.arrivals import OpenLoopSchedule
from tokenwatt.load.keepup import KEEP_UP_LATENESS_P99_S, client_bound, keep_up_problems
from tokenwatt.load.send.figures import worker_stats
from tokenwatt.load.wire import WireError, pack_records, unpack_records
from tokenwatt.load.workers import (
    ClientConfig,
    PoolResult,
    ScheduledRequest,
    WorkerPool,
    deal,
    draw_schedule,
    merge_records,
)
from tokenwatt.load.workload import WorkloadGenerator
from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp
from tokenwatt.sim import RunningSim, SimConfig, start_sim_thread
from tokenwatt.spec.endpoint import Timeouts
from tokenwatt.spec.workload import Workload

WORKLOAD = {"input_tokens": {"kind": "uniform", "min": 8, "max": 64}, "output_tokens": 20}


def _schedule(seed: int, count: int, rate_rps: float = 50.0, **wl: Any) -> list[ScheduledRequest]:
    gen = WorkloadGenerator(
        Workload.model_validate({**WORKLOAD, **wl}), prompt_format="token_ids", seed=seed
    )
    return draw_schedule(OpenLoopSchedule("poisson", rate_rps, seed), gen, count)


# ---------------------------------------------------------------------- schedule
@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_same_seed_same_schedule_for_any_worker_count(n: int) -> None:
    sched = _schedule(11, 200)
    # independent truth: the arrival process and the workload generator drawn directly
    offsets = OpenLoopSchedule("poisson", 50.0, 11).first(200)
    gen = iter(
        WorkloadGenerator(Workload.model_validate(WORKLOAD), prompt_format="token_ids", seed=11)
    )
    plans = [next(gen) for _ in range(200)]
    assert [r.offset_ns for r in sched] == offsets
    assert [(r.index, r.prompt, r.max_tokens) for r in sched] == [
        (p.index, p.prompt, p.max_tokens) for p in plans
    ]
    shares = deal(sched, n)
    assert len(shares) == n
    dealt = sorted((r for s in shares for r in s), key=lambda r: r.index)
    assert dealt == sched  # every request once, unchanged
    for s in shares:
        assert [r.offset_ns for r in s] == sorted(r.offset_ns for r in s)
        assert max(len(x) for x in shares) - len(s) <= 1  # shares differ by one at most
    assert _schedule(12, 200) != sched  # the seed matters


def test_deal_refuses_zero_workers() -> None:
    with pytest.raises(ValueError, match="workers"):
        deal([], 0)


# ---------------------------------------------------------------------- wire
_int = st.integers(min_value=0, max_value=2**62)


def _fix_tokens(r: RequestRecord) -> RequestRecord:
    r.chunk_tokens = array("i", [1 + (t % 3) for t in r.chunk_ns])
    return r


_records = st.builds(
    RequestRecord,
    request_id=st.integers(min_value=0, max_value=10**9),
    scheduled_ns=_int,
    prompt_tokens_client=st.integers(min_value=1, max_value=10**6),
    max_tokens=st.integers(min_value=1, max_value=10**6),
    sent_ns=st.none() | _int,
    chunk_ns=st.lists(_int, max_size=10),
    status=st.sampled_from(["ok", "error"]),
    error_message=st.none() | st.text(max_size=40),
    coalesced_reads=st.integers(min_value=0, max_value=1000),
).map(_fix_tokens)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_records, max_size=8))
def test_wire_round_trip(recs: list[RequestRecord]) -> None:
    assert unpack_records(pack_records(recs)) == recs


def test_wire_refuses_foreign_or_truncated_batches() -> None:
    rec = RequestRecord(1, 2, 3, 4, chunk_ns=[5, 6], chunk_tokens=[1, 1])
    batch = pack_records([rec])
    with pytest.raises(WireError, match="truncated"):
        unpack_records(batch[:-8])
    with pytest.raises(WireError, match="version"):
        unpack_records(b"XXXX" + batch[4:])
    with pytest.raises(WireError, match="shorter"):
        unpack_records(b"TW")


# ---------------------------------------------------------------------- merge
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_workers=st.integers(min_value=1, max_value=5),
    n_requests=st.integers(min_value=0, max_value=60),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_merge_over_random_batches_and_interleavings(
    n_workers: int, n_requests: int, seed: int
) -> None:
    """Workers report their records in random batches, interleaved at random, some die early:
    every dealt request comes back exactly once, lost ones as worker_lost failures."""
    rnd = random.Random(seed)
    sched = [ScheduledRequest(i, 1000 * i, [1, 2], 2, 5) for i in range(n_requests)]
    shares = deal(sched, n_workers)
    truth: dict[int, RequestRecord] = {}
    streams: list[list[bytes]] = []
    for share in shares:
        recs = [
            RequestRecord(
                r.index,
                7 + r.offset_ns,
                2,
                5,
                sent_ns=8 + r.offset_ns,
                chunk_ns=[r.index, r.index + 1],
                chunk_tokens=[1, 1],
            )
            for r in share
        ]
        rnd.shuffle(recs)  # completion order is not schedule order
        reported = recs[: rnd.randint(0, len(recs))] if rnd.random() < 0.4 else recs
        truth.update({r.request_id: r for r in reported})
        batches, i = [], 0
        while i < len(reported):
            k = rnd.randint(1, 5)
            batches.append(pack_records(reported[i : i + k]))
            i += k
        streams.append(batches)
    # the coordinator sees the workers' batches interleaved in any order (per-worker order kept)
    arrival: list[tuple[int, bytes]] = []
    cursors = [0] * n_workers
    while any(c < len(s) for c, s in zip(cursors, streams, strict=True)):
        w = rnd.choice([j for j in range(n_workers) if cursors[j] < len(streams[j])])
        arrival.append((w, streams[w][cursors[w]]))
        cursors[w] += 1
    merged: list[RequestRecord] = []
    lost_total = 0
    for w, share in enumerate(shares):
        got = [r for ww, b in arrival if ww == w for r in unpack_records(b)]
        recs, lost = merge_records(
            share, got, start_ns=7, lost_message=f"worker {w} died", lost_at_ns=99
        )
        merged.extend(recs)
        lost_total += lost
    assert sorted(r.request_id for r in merged) == list(range(n_requests))
    assert lost_total == n_requests - len(truth)
    for r in merged:
        if r.request_id in truth:
            assert r == truth[r.request_id]
        else:
            assert r.error_kind == "worker_lost" and r.status == "error"
            assert r.scheduled_ns == 7 + 1000 * r.request_id
            assert r.error_message is not None and "died" in r.error_message


def test_merge_refuses_duplicates_and_strangers() -> None:
    sched = [ScheduledRequest(i, i, [1], 1, 1) for i in range(3)]
    rec = RequestRecord(1, 0, 1, 1)
    with pytest.raises(ValueError, match="two records for request 1"):
        merge_records(sched, [rec, rec], start_ns=0, lost_message="", lost_at_ns=0)
    with pytest.raises(ValueError, match="not dealt"):
        merge_records(sched, [RequestRecord(9, 0, 1, 1)], start_ns=0, lost_message="", lost_at_ns=0)


# ---------------------------------------------------------------------- keep-up
def test_worker_stats_by_hand() -> None:
    recs = [
        # stamps 10,10,20: two events shared a read, one alone
        RequestRecord(
            0,
            100,
            1,
            3,
            sent_ns=150,
            chunk_ns=[10, 10, 20],
            chunk_tokens=[1, 1, 1],
            coalesced_reads=1,
        ),
        RequestRecord(1, 200, 1, 2, sent_ns=6_000_300, chunk_ns=[30, 40], chunk_tokens=[1, 1]),
    ]
    s = worker_stats(0, recs, dealt=2, busy_fraction=0.5)
    assert (s.events, s.coalesced_reads) == (5, 1)
    assert s.exact_share == pytest.approx(3 / 5)  # 3 of the 5 events alone in their read
    # the lateness in the result's own unit (s), straight from the sender: 6_000_100 ns
    assert s.send_lateness_p50_s == s.send_lateness_p99_s == pytest.approx(6_000_100e-9)
    problems = keep_up_problems(s)
    assert len(problems) == 2  # lateness 6 ms > the 5 ms floor, exact share 60% < 80%
    # half a core used: the worker was held up by something else, more workers would not help
    assert not client_bound(s)
    assert all("CPU to spare" in p and "more workers" not in p for p in problems)
    busy = worker_stats(0, recs, dealt=2, busy_fraction=0.95)
    assert client_bound(busy) and len(keep_up_problems(busy)) == 3
    assert all("more workers" in p for p in keep_up_problems(busy))


def test_keep_up_verdict() -> None:
    def keep_up(
        worker: int, lost: int, p99_s: float | None, busy: float | None, **kw: Any
    ) -> WorkerKeepUp:
        return WorkerKeepUp(
            worker=worker, core=0, dealt=10, lost=lost, send_lateness_p99_s=p99_s,
            busy_fraction=busy, events=100, exact_share=kw.pop("exact_share", 1.0), **kw,
        )  # fmt: skip

    ok = keep_up(0, 0, KEEP_UP_LATENESS_P99_S, 0.5, exact_share=0.95)
    assert keep_up_problems(ok) == []
    busy = keep_up(1, 0, 1e-6, 0.97)
    dead = keep_up(2, 4, None, None, exact_share=None, exit_code=-9)
    res = PoolResult([], [ok, busy, dead], 0)
    assert not res.kept_up
    lines = res.keep_up_problems()
    assert len(lines) == 2
    assert "97% busy" in lines[0] and "more workers" in lines[0]
    assert "worker 2 ended early (exit status -9) with 4 requests" in lines[1]
    assert res.client_bound
    assert PoolResult([], [ok], 0).kept_up
    assert not PoolResult([], [ok, dead], 0).client_bound


# ---------------------------------------------------------------------- real processes
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


def _config(url: str) -> ClientConfig:
    return ClientConfig(
        url,
        api="completions",
        model="sim-8b",
        timeouts=Timeouts(connect_s=10, first_token_s=30, idle_s=20, total_s=120),
    )


def _itl_ms(res: PoolResult) -> float:
    gaps = [
        (b - a) / 1e6 for r in res.records for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)
    ]
    return statistics.median(gaps)


def test_one_and_two_workers_give_the_same_figures(sim: RunningSim) -> None:
    """At a rate one process handles, N=1 and N=2 send the same schedule and measure alike."""
    sched = _schedule(5, 40, rate_rps=20.0)
    results = {n: asyncio.run(WorkerPool(n, _config(sim.url)).run(sched)) for n in (1, 2)}
    for n, res in results.items():
        assert [r.request_id for r in res.records] == list(range(40)), n
        assert all(r.ok for r in res.records), [r.error_message for r in res.records]
        # each request was scheduled exactly at the common start + its drawn offset
        assert [r.scheduled_ns - res.start_ns for r in res.records] == [q.offset_ns for q in sched]
        assert [r.output_tokens for r in res.records] == [q.max_tokens for q in sched]
        assert len(res.workers) == n
        assert sum(w.dealt for w in res.workers) == 40
        assert all(w.busy_fraction is not None for w in res.workers)
    # the simulator's step time sets the inter-token latency; both runs see the same one
    itl1, itl2 = _itl_ms(results[1]), _itl_ms(results[2])
    assert itl2 == pytest.approx(itl1, rel=0.25)


def test_a_worker_killed_mid_run_counts_its_requests_as_failures(sim: RunningSim) -> None:
    sched = _schedule(3, 16, rate_rps=40.0, output_tokens=400)

    async def main() -> tuple[PoolResult, int]:
        pool = WorkerPool(2, _config(sim.url))
        task = asyncio.create_task(pool.run(sched))
        while len(pool.pids) < 2:
            await asyncio.sleep(0.05)
        victim = pool.pids[1]
        await asyncio.sleep(2.0)  # started, requests in flight (400 tokens take seconds)
        os.kill(victim, signal.SIGKILL)
        return await task, victim

    res, victim = asyncio.run(main())
    assert sorted(r.request_id for r in res.records) == list(range(16))  # none lost, none twice
    w0, w1 = res.workers
    assert w0.lost == 0 and all(r.ok for r in res.records if r.request_id % 2 == 0)
    assert w1.exit_code == -signal.SIGKILL and w1.lost >= 1
    lost = [r for r in res.records if r.error_kind == "worker_lost"]
    assert len(lost) == w1.lost
    assert all(r.request_id % 2 == 1 for r in lost)
    assert all(f"pid {victim}) exited with status -9" in (r.error_message or "") for r in lost)
    assert not res.kept_up
    assert any("worker 1 ended early (exit status -9)" in p for p in res.keep_up_problems())


def test_auto_is_one_worker_per_core_but_the_coordinators() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    pool = WorkerPool("auto", _config("http://127.0.0.1:1/v1"))
    assert pool.n == max(1, (cores or 1) - 1)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        WorkerPool(0, _config("http://127.0.0.1:1/v1"))
