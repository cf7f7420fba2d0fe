"""A probe fails as soon as requests still in flight are known TTFT misses.

The server is a real HTTP server on 127.0.0.1 (aiohttp in its own thread, OpenAI completions
streaming) with one slot: a request waits for the slot after its headers went out, then gets a
token every ``token_s``. Above its capacity the queue grows and every waiting request is
already a TTFT miss, while the finished ones trickle out one per service time.

* ``StreamClient.late_first_tokens`` names a request as late only when its first token cannot
  come in time: sent longer ago than the limit, no content decoded, no unread byte waiting.
  A first token that reached the socket in time but was not read yet (the loop was blocked)
  is not named.
* A probe at a failing rate stops on those in-flight misses, with fewer settled misses than
  the finished requests alone would need; the reason and the record say how many were in
  flight, and those requests are still recorded (cancelled, marked). A passing rate is not
  affected.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from test_drift import SlowingServer
from tokenwatt.client import StreamClient
from tokenwatt.load.bench import outcome_of, run_bench
from tokenwatt.load.probe import LateFirstTokens, ProbeRun, run_probe
from tokenwatt.metrics.boundary import Evidence, fit_boundary
from tokenwatt.metrics.sequential import SequentialStop, decide_probe, miss_counts
from tokenwatt.metrics.slo import Limits, latencies
from tokenwatt.records import RequestRecord, read_requests
from tokenwatt.spec import BenchSpec
from tokenwatt.spec.endpoint import Timeouts

pytestmark = pytest.mark.timeout(120)


class OneSlotServer:
    """``test_drift.SlowingServer`` (headers at once, then ``slots`` streams at a time,
    ``token_s`` per token) in its own thread: the client's loop may block without stopping
    it."""

    def __init__(self, slots: int = 1, token_s: float = 0.05) -> None:
        self.url = ""
        self._inner = SlowingServer(slots=slots, token_s=token_s)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> OneSlotServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._inner.__aenter__(), self._loop).result(10)
        self.url = self._inner.url
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._inner.__aexit__(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _client(url: str) -> StreamClient:
    t = Timeouts(connect_s=5, first_token_s=60, idle_s=30, total_s=120)
    return StreamClient(url, api="completions", model="toy", timeouts=t)


# ----------------------------------------------------------------------- the client's answer
@pytest.mark.exclusive
def test_late_first_tokens_names_only_requests_whose_first_token_cannot_be_in_time() -> None:
    """One slot, 0.15 s a token, 3 tokens: request 0 holds the slot for 0.45 s, request 1
    waits behind it. At 0.3 s after the sends, with a 0.2 s limit: request 0's first token
    came at 0.15 s (read), request 1 has none and nothing waits on its socket: only 1 is late.
    Then the loop is blocked while request 0's second token and nothing of request 1's arrive:
    request 0 still has content, and at a limit of 0.1 s request 1 alone is named again."""

    async def main(url: str) -> tuple[list[int], list[int], list[int]]:
        async with _client(url) as c:
            kw = {"scheduled_ns": 0, "prompt": "hi", "prompt_tokens_client": 2}
            t0 = asyncio.create_task(c.stream(request_id=0, max_tokens=3, **kw))
            await asyncio.sleep(0.02)  # request 0 takes the slot first
            t1 = asyncio.create_task(c.stream(request_id=1, max_tokens=3, **kw))
            await asyncio.sleep(0.3)
            at_300ms = c.late_first_tokens(200_000_000)
            time.sleep(0.1)  # the loop blocked: request 0's next token waits unread
            blocked = c.late_first_tokens(100_000_000)
            none_yet = c.late_first_tokens(10_000_000_000)  # nobody waited 10 s
            r0, r1 = await t0, await t1
            assert r0.ok and r1.ok
            assert r1.first_token_ns is not None and r1.sent_ns is not None
            assert (r1.first_token_ns - r1.sent_ns) / 1e9 > 0.2  # it did miss a 0.2 s limit
            assert c.late_first_tokens(0) == []  # nothing in flight
            return at_300ms, blocked, none_yet

    with OneSlotServer(token_s=0.15) as srv:
        at_300ms, blocked, none_yet = asyncio.run(main(srv.url))
    assert at_300ms == [1]
    assert blocked == [1]
    assert none_yet == []


@pytest.mark.exclusive
def test_a_first_token_waiting_unread_on_the_socket_is_not_late() -> None:
    """The first token reaches the socket in time (0.05 s, up to 0.2 s with a delayed ACK)
    while the client's loop is blocked past the limit (0.4 s): unread bytes wait, so the
    request is not named (its kernel stamp may be in time), and once read its TTFT is under
    the limit indeed."""

    async def main(url: str) -> tuple[list[int], RequestRecord]:
        async with _client(url) as c:
            kw = {"scheduled_ns": 0, "prompt": "hi", "prompt_tokens_client": 2}
            task = asyncio.create_task(c.stream(request_id=7, max_tokens=4, **kw))
            for _ in range(100):  # until the request is on the wire
                await asyncio.sleep(0.001)
                if c._live and next(iter(c._live.values()))[0].sent_ns is not None:
                    break
            time.sleep(0.6)  # blocked: the first token waits in the socket
            late = c.late_first_tokens(400_000_000)
            return late, await task

    with OneSlotServer(token_s=0.05) as srv:
        late, rec = asyncio.run(main(srv.url))
    assert late == []
    assert rec.ok and rec.first_token_ns is not None and rec.sent_ns is not None
    if rec.timestamp_source == "kernel":  # the stamp is the kernel's: in time
        assert (rec.first_token_ns - rec.sent_ns) / 1e9 < 0.4


# ----------------------------------------------------------------------- the probe
def _spec(url: str, rate: float, **probe: Any) -> BenchSpec:
    settings = {"warmup_s": 0.2, "min_duration_s": 15.0, "min_requests": 4, "max_duration_s": 20,
                "drain_timeout_s": 60}  # fmt: skip
    settings.update(probe)
    return BenchSpec.model_validate(
        {
            "name": "late",
            "endpoint": {"url": url, "model": "toy"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
            "power": {"sources": []},
            "workload": {
                "input_tokens": 8,
                "output_tokens": 20,
                "seed": 5,
                "arrival": {"kind": "constant"},
            },
            "slo": {"ttft_ms": 250, "tpot_ms": 500},
            "search": {"probe": settings},
        }
    )


async def _probe(spec: BenchSpec, rate: float, *, late: bool) -> tuple[ProbeRun, SequentialStop]:
    stop = SequentialStop(Limits.from_spec(spec.slo))
    hook = LateFirstTokens(250_000_000, stop) if late else None
    async with _client(spec.endpoint.url) as c:
        run = await run_probe(
            spec, c, rate_rps=rate, seed=1, should_stop=stop.should_stop, late=hook
        )
    return run, stop


def _settled(run: ProbeRun) -> tuple[int, dict[str, int]]:
    lats = latencies(run.counted)
    return len(lats), miss_counts(Limits.from_spec(_spec("http://x/v1", 1).slo), lats)


def test_a_failing_rate_stops_on_requests_in_flight_past_the_ttft_limit() -> None:
    """One slot, 20 tokens × 50 ms: 1 req/s. At 8 req/s the queue grows by 7 a second and a
    request finishes once a second, so three finished misses take seconds; requests waiting
    past 0.25 s without a first token decide the failure first."""
    with OneSlotServer(token_s=0.05) as srv:
        spec = _spec(srv.url, 8.0)
        run, stop = asyncio.run(_probe(spec, 8.0, late=True))
    assert run.stopped_early and stop.decision == "fail"
    k = run.late_first_tokens_at_stop
    assert k >= 1 and stop.in_flight_misses == {"ttft_p99": k}
    assert stop.reason is not None and f"({k} of them still in flight" in stop.reason
    # the finished requests alone had not decided it (else should_stop would have stopped it)
    n, misses = _settled(run)
    assert decide_probe(stop.test, misses, n) != "fail"
    assert stop.test.decide(misses["ttft_p99"] + k, n + k) == "fail"
    # the requests it counted are still recorded: cancelled, each marked
    marked = [r for r in run.counted if r.error_message and "known miss" in r.error_message]
    assert len(marked) == k and all(r.cancelled and r.sent_ns is not None for r in marked)
    for r in marked:  # a first token that came while the stop cancelled them came late too
        assert r.first_token_ns is None or r.first_token_ns - (r.sent_ns or 0) > 250_000_000
    assert run.window_dict()["late_first_tokens_at_stop"] == k


def test_the_same_rate_without_the_rule_waits_for_finished_misses() -> None:
    """Without ``late`` the same probe stops only once finished requests decide: on at least
    three finished misses (a request finishes once a second), and no request is marked."""
    with OneSlotServer(token_s=0.05) as srv:
        run, stop = asyncio.run(_probe(_spec(srv.url, 8.0), 8.0, late=False))
    assert run.stopped_early and run.late_first_tokens_at_stop == 0
    n, misses = _settled(run)
    assert max(misses.values()) >= 3 and decide_probe(stop.test, misses, n) == "fail"
    assert not any(r.error_message and "known miss" in r.error_message for r in run.records)


@pytest.mark.exclusive
def test_a_passing_rate_is_not_affected() -> None:
    """At 0.5 req/s (constant) the slot is free at every arrival: TTFT ≈ 50 ms, nothing is
    ever late, the window runs its length and every counted request finishes."""
    with OneSlotServer(token_s=0.05) as srv:
        spec = _spec(srv.url, 0.5, min_duration_s=2.0, min_requests=2)
        run, stop = asyncio.run(_probe(spec, 0.5, late=True))
    assert not run.stopped_early and run.late_first_tokens_at_stop == 0
    assert stop.in_flight_misses == {}
    assert run.counted and all(r.ok for r in run.counted)
    n, misses = _settled(run)
    assert n == len(run.counted) and misses == {"ttft_p99": 0, "tpot_p99": 0}


def test_the_fit_reads_known_misses_in_flight_for_their_own_limit() -> None:
    """A probe stopped on 0 of 5 finished misses and 3 requests in flight past the TTFT limit
    reads, for the TTFT limit, as 3 misses of 8: the same fit as 3 of 8 finished."""
    below = Evidence(2.0, 400, {"ttft_p99": 0})
    cut = Evidence(6.0, 5, {"ttft_p99": 0}, {"ttft_p99": 3})
    assert cut.counts("ttft_p99") == (8, 3) and cut.counts("tpot_p99") == (5, 0)
    settled = Evidence(6.0, 8, {"ttft_p99": 3})
    assert fit_boundary([below, cut], 0.01) == fit_boundary([below, settled], 0.01)
    assert fit_boundary([below, cut], 0.01).high_rps is not None


def test_a_bench_probe_records_the_misses_it_counted_in_flight(tmp_path: Path) -> None:
    """``bench`` wires the rule into its search probes: the failing probe's ``slo_detail``
    says how many known misses in flight the stop counted, its reason says so too, the
    requests file keeps those requests (cancelled, marked), and the fit's evidence has them."""
    with OneSlotServer(token_s=0.05) as srv:
        d = _spec(srv.url, 8.0).model_dump(mode="json")
        d["hardware"] = {"accelerator": None, "custom": {"bandwidth_bytes_per_s": 1e12,
                         "memory_bytes": 80e9, "bf16_dense_flops": 1e15, "tdp_w": 700}}  # fmt: skip
        d["search"].update(start_rate_rps=8.0, max_probes=1, single_stream_requests=2)
        result = asyncio.run(run_bench(BenchSpec.model_validate(d), tmp_path / "out"))
    probe = result.probes[0]
    late = probe.slo_detail.in_flight_misses
    assert late is not None and late["ttft_p99"] >= 1
    k = late["ttft_p99"]
    assert probe.slo_detail.sequential == "fail" and not probe.slo_passed
    assert f"({k} of them still in flight" in (probe.slo_detail.reason or "")
    rows = read_requests(tmp_path / "out" / (probe.requests_file or ""))
    marked = [
        r for phase, r in rows if phase == "window" and "known miss" in (r.error_message or "")
    ]
    assert len(marked) == k and all(r.cancelled for r in marked)
    ev = outcome_of(probe).evidence
    assert ev is not None and ev.counts("ttft_p99") == (
        (probe.slo_detail.judged or 0) + k,
        probe.slo_detail.misses["ttft_p99"] + k,
    )
