"""What the worker senders share: record batches (send.wire), each worker's keep-up figures
and their verdict (send.figures, load.keepup), and how many workers ``auto`` means.

Checked against independent truths: records built by hand and round-tripped, figures worked
out by hand. The live senders themselves run real processes against the simulator in
tests/test_probe_workers.py (Ray actors: tests/test_probe_ray.py).
"""

from __future__ import annotations

import os
from array import array
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwatt.load.keepup import KEEP_UP_LATENESS_P99_S, client_bound, keep_up_problems
from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp
from tokenwatt.send.figures import worker_stats
from tokenwatt.send.wire import WireError, pack_records, unpack_records
from tokenwatt.send.workers import worker_count

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
    lines = [p for w in (ok, busy, dead) for p in keep_up_problems(w)]
    assert len(lines) == 2
    assert "97% busy" in lines[0] and "more workers" in lines[0]
    assert "worker 2 ended early (exit status -9) with 4 requests" in lines[1]
    assert client_bound(busy)
    assert not client_bound(ok) and not client_bound(dead)


def test_auto_is_one_worker_per_core_but_the_coordinators() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert worker_count("auto") == max(1, (cores or 1) - 1)
    assert worker_count(3) == 3
    with pytest.raises(ValueError, match="workers must be >= 1"):
        worker_count(0)
