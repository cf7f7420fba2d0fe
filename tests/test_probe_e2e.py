"""Probes end to end over real HTTP on 127.0.0.1: against the simulator, and against small
servers that error, reset and stall mid-stream (every failure counted, no request lost)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from tokenwatt.client import StreamClient
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.records import RequestRecord, read_requests
from tokenwatt.spec import BenchSpec, ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts

pytestmark = pytest.mark.timeout(120)

IN_TOKENS, OUT_TOKENS = 128, 16


def sim_spec(**probe: Any) -> BenchSpec:
    settings = {"warmup_s": 0.5, "min_duration_s": 2.0, "min_requests": 10, "max_duration_s": 10}
    settings.update(probe)
    return parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
            "endpoint": {"url": "sim"},
            "sim": {"efficiency": 0.5, "prefill_cost": False},
            "workload": {"input_tokens": IN_TOKENS, "output_tokens": OUT_TOKENS, "seed": 3},
            "slo": {"ttft_ms": 2000, "tpot_ms": 200},
            "search": {"probe": settings},
        }
    )


def assert_nothing_lost(run: ProbeRun) -> None:
    """Every request sent has exactly one record; ids are the send order 0..n−1."""
    ids = [r.request_id for r in run.records]
    assert ids == list(range(len(ids)))
    assert run.metrics.requests_total == len(ids)
    counted = run.counted
    assert run.metrics.requests_counted == len(counted)
    m = run.metrics
    assert m.requests_ok + m.requests_failed + m.requests_cancelled == len(counted)
    assert sum(m.errors_by_kind.values()) == m.requests_failed
    assert "cancelled" not in m.errors_by_kind  # cancellation is not failure
    for r in counted:
        assert r.done_ns is not None  # every counted request ended one way or another


# ---------------------------------------------------------------------------- the simulator
def test_open_loop_probe_against_the_simulator() -> None:
    spec = sim_spec()
    seen: list[str] = []

    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            assert target.kind == "sim" and target.sim_mode == "thread"
            assert target.model == "Llama-3.1-8B" and target.base_url.endswith("/v1")
            return await run_probe(
                spec,
                target.client,
                rate_rps=15.0,
                seed=1,
                on_progress=lambda p: seen.append(p.phase),
            )

    run = asyncio.run(main())
    m = run.metrics
    assert_nothing_lost(run)
    assert not run.interrupted and not run.stopped_early and run.drain_timeouts == 0
    assert {"warmup", "window"} <= set(seen)
    # the window: at least min_duration and min_requests, counted by schedule time
    assert m.window_s >= 2.0 and m.requests_counted >= 10
    assert all(run.window_start_ns <= r.scheduled_ns < run.window_end_ns for r in run.counted)
    assert run.window_start_ns - run.started_ns == 500_000_000
    assert m.requests_failed == 0 and m.errors_by_kind == {}
    # ignore_eos + min_tokens: exact lengths; the server's usage reports the prompt
    assert all(r.output_tokens == OUT_TOKENS for r in run.counted)
    assert all(r.prompt_tokens == IN_TOKENS for r in run.counted)
    assert m.output_tokens == OUT_TOKENS * m.requests_counted
    assert m.output_tokens_per_s == pytest.approx(OUT_TOKENS * m.counted_requests_per_s)
    # context per token for fixed L, n: L + (n − 1)/2 exactly
    assert m.mean_context_per_token == pytest.approx(IN_TOKENS + (OUT_TOKENS - 1) / 2)
    # τ against the roofline worked by hand: each step reads at least the weights at half the
    # rated bandwidth (KV adds a little at this load)
    geo = load_geometry("llama-3.1-8b")
    step_s = geo.dense_weight_bytes / (get_accelerator("h100-sxm").bandwidth_bytes_per_s * 0.5)
    assert m.itl_token_weighted_s is not None
    assert step_s * 0.97 < m.itl_token_weighted_s < step_s * 1.6
    assert m.tpot_s.p50 is not None and step_s * 0.97 < m.tpot_s.p50 < step_s * 1.6
    assert m.timestamp_source in ("kernel", "user")
    assert m.slo_attainment == 1.0
    assert run.clock is not None and run.clock["timestamp_source"] == m.timestamp_source
    assert m.send_lateness_s.count == m.requests_counted


def test_closed_loop_single_stream_and_reproducibility() -> None:
    spec = sim_spec(warmup_s=0.0, min_duration_s=0.1, min_requests=1)

    async def main() -> tuple[ProbeRun, ProbeRun, ProbeRun]:
        async with open_target(spec) as target:
            single = await run_probe(
                spec, target.client, rate_rps=None, concurrency=1, max_requests=5, seed=2
            )
            four = await run_probe(
                spec, target.client, rate_rps=None, concurrency=4, max_requests=16, seed=2
            )
            again = await run_probe(
                spec, target.client, rate_rps=None, concurrency=1, max_requests=5, seed=2
            )
            return single, four, again

    single, four, again = asyncio.run(main())
    for run in (single, four):
        assert_nothing_lost(run)
        assert run.rate_rps is None and run.arrival == "concurrency"
    assert single.concurrency == 1 and four.concurrency == 4
    # single stream: exactly five counted, one at a time, no load after the window
    assert single.metrics.requests_counted == 5 == len(single.records)
    recs = single.records
    for prev, nxt in itertools.pairwise(recs):
        assert prev.done_ns is not None and nxt.sent_ns is not None
        assert nxt.sent_ns >= prev.done_ns
    assert single.metrics.mean_concurrency is not None
    assert 0.8 < single.metrics.mean_concurrency <= 1.0
    assert four.metrics.requests_counted == 16
    # max_requests is exactly that many with several streams too: no request after the window
    # (a 17th, cancelled at the end, once leaked its tokens into the engine's counters)
    assert len(four.records) == 16 and not [r for r in four.records if r.cancelled]
    # Little's law over a finite window has edge effects (counted requests run past w1, earlier
    # ones are not counted), so it estimates 4 rather than bounding it.
    assert four.metrics.mean_concurrency is not None
    assert 3.0 < four.metrics.mean_concurrency < 4.5
    # the same seed sends the same requests in the same order
    assert [r.prompt_tokens_client for r in again.records] == [
        r.prompt_tokens_client for r in single.records
    ]
    assert [r.max_tokens for r in again.records] == [r.max_tokens for r in single.records]


def test_same_seed_same_open_loop_schedule() -> None:
    spec = sim_spec(warmup_s=0.2, min_duration_s=0.5, min_requests=5)

    async def main() -> list[ProbeRun]:
        async with open_target(spec) as target:
            return [await run_probe(spec, target.client, rate_rps=30.0, seed=s) for s in (9, 9, 10)]

    a, b, c = asyncio.run(main())

    def offsets(run: ProbeRun) -> list[int]:
        return [r.scheduled_ns - run.started_ns for r in run.counted]

    assert offsets(a) == offsets(b)
    assert offsets(a) != offsets(c)


def test_should_stop_ends_the_window_early() -> None:
    spec = sim_spec(min_duration_s=30.0, max_duration_s=60.0)

    def enough(done: Any) -> bool:
        return len(done) >= 3

    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            return await run_probe(spec, target.client, rate_rps=20.0, seed=4, should_stop=enough)

    run = asyncio.run(main())
    assert run.stopped_early and not run.interrupted
    assert run.metrics.window_s < 10
    assert_nothing_lost(run)
    assert run.metrics.requests_counted >= 3


def test_cancelling_keeps_what_was_measured() -> None:
    """Ctrl-C under asyncio.run cancels the awaiting task: the probe returns its partial run."""
    spec = sim_spec(min_duration_s=30.0, max_duration_s=60.0)

    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            task = asyncio.create_task(run_probe(spec, target.client, rate_rps=40.0, seed=5))
            await asyncio.sleep(1.5)
            task.cancel()
            return await task

    run = asyncio.run(main())
    assert run.interrupted
    assert_nothing_lost(run)
    assert run.window_end_ns <= run.ended_ns
    cancelled = [r for r in run.records if r.error_kind == "cancelled"]
    assert cancelled, "requests in flight at the interrupt are recorded as cancelled"
    assert all(r.status == "cancelled" for r in cancelled)
    assert any(r.chunk_ns for r in cancelled), "cancelled streams keep the chunks they received"
    assert run.metrics.requests_ok > 0


# ---------------------------------------------------------------------------- misbehaving servers
Behaviour = Callable[[int], str]


class MisbehavingServer:
    """An OpenAI-style streaming server whose n-th completion request misbehaves as told."""

    def __init__(self, behaviour: Behaviour, itl_s: float = 0.002) -> None:
        self.behaviour = behaviour
        self.itl_s = itl_s
        self.requests = 0
        self.server: asyncio.AbstractServer | None = None
        self.url = ""

    async def __aenter__(self) -> MisbehavingServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = orjson.loads(await reader.readexactly(length)) if length else {}
                if method == "GET" and path.endswith("/models"):
                    self._json(writer, 200, {"object": "list", "data": [{"id": "m"}]})
                    await writer.drain()
                    continue
                if not await self._complete(writer, body):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    def _json(writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        data = orjson.dumps(obj)
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )

    @staticmethod
    def _event(writer: asyncio.StreamWriter, payload: bytes) -> None:
        ev = b"data: " + payload + b"\n\n"
        writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))

    async def _complete(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> bool:
        """Serve one completion; False when the connection must not be reused."""
        mode = self.behaviour(self.requests)
        self.requests += 1
        n = int(body.get("max_tokens", 1))
        prompt = body.get("prompt", [])
        if mode == "http500":
            self._json(writer, 500, {"error": {"message": "internal error", "code": 500}})
            await writer.drain()
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for i in range(n):
            if mode in ("reset", "stall") and i == 2:
                break
            if mode == "stream_error" and i == 1:
                break
            chunk = {"choices": [{"index": 0, "text": " a", "finish_reason": None}]}
            self._event(writer, orjson.dumps(chunk))
            await writer.drain()
            await asyncio.sleep(self.itl_s)
        if mode == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if mode == "stall":
            await asyncio.sleep(3600)
            return False
        if mode == "stream_error":
            self._event(writer, orjson.dumps({"error": {"message": "overloaded", "code": 503}}))
            self._event(writer, b"[DONE]")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": n}
        self._event(writer, orjson.dumps({"choices": [], "usage": usage}))
        self._event(writer, b"[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def remote_spec(url: str, **probe: Any) -> BenchSpec:
    settings = {"warmup_s": 0.0, "min_duration_s": 0.1, "min_requests": 1, "drain_timeout_s": 5}
    settings.update(probe)
    return parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
            "endpoint": {
                "url": url,
                "prompt_format": "token_ids",
                "timeouts": {"connect_s": 2, "first_token_s": 2, "idle_s": 0.3, "total_s": 10},
            },
            "workload": {"input_tokens": 8, "output_tokens": 6},
            "search": {"probe": settings},
        }
    )


@contextlib.asynccontextmanager
async def client_for(url: str, timeouts: Timeouts) -> AsyncIterator[StreamClient]:
    client = StreamClient(url, api="completions", model="m", timeouts=timeouts)
    try:
        yield client
    finally:
        await client.aclose()


CYCLE = ["ok", "http500", "reset", "stall", "stream_error"]


def test_errors_resets_and_stalls_are_counted_failures() -> None:
    async def main() -> ProbeRun:
        async with MisbehavingServer(lambda i: CYCLE[i % len(CYCLE)]) as srv:
            spec = remote_spec(srv.url)
            async with open_target(spec) as target:
                assert target.kind == "remote" and target.model == "m"
                # one at a time, so request i meets behaviour i
                return await run_probe(
                    spec, target.client, rate_rps=None, concurrency=1, max_requests=10, seed=0
                )

    run = asyncio.run(main())
    m = run.metrics
    assert_nothing_lost(run)
    assert m.requests_counted == 10 and len(run.records) == 10
    assert m.requests_ok == 2 and m.requests_failed == 8
    assert m.errors_by_kind == {"http_status": 2, "reset": 2, "stall": 2, "stream_error": 2}
    by_id = {r.request_id: r for r in run.records}
    assert by_id[1].http_status == 500
    assert len(by_id[2].chunk_ns) == 2 and len(by_id[3].chunk_ns) == 2  # partial data kept
    # failures count against attainment and carry their delivered tokens into T
    assert m.slo_attainment == pytest.approx(0.2)
    assert m.output_tokens == 2 * 6 + 2 * 2 + 2 * 2 + 2 * 1


def test_open_loop_against_a_flaky_server_loses_nothing() -> None:
    async def main() -> ProbeRun:
        async with MisbehavingServer(lambda i: CYCLE[i % len(CYCLE)]) as srv:
            spec = remote_spec(srv.url, warmup_s=0.2, min_duration_s=1.0, min_requests=10)
            async with open_target(spec) as target:
                return await run_probe(spec, target.client, rate_rps=25.0, seed=0)

    run = asyncio.run(main())
    assert_nothing_lost(run)
    kinds = set(run.metrics.errors_by_kind)
    assert kinds <= {"http_status", "reset", "stall", "stream_error", "connect"}
    assert run.metrics.requests_failed >= 3 and run.metrics.requests_ok >= 1


def test_drain_timeout_cuts_counted_requests() -> None:
    async def main() -> ProbeRun:
        async with MisbehavingServer(lambda i: "ok", itl_s=0.25) as srv:
            spec = remote_spec(srv.url, min_duration_s=0.3, min_requests=2, drain_timeout_s=0.4)
            async with open_target(spec) as target:
                return await run_probe(spec, target.client, rate_rps=20.0, seed=0)

    run = asyncio.run(main())
    assert_nothing_lost(run)
    assert run.drain_timeouts > 0
    cut = [r for r in run.counted if r.error_kind == "timeout_total"]
    assert len(cut) == run.drain_timeouts
    assert all("drain_timeout_s" in (r.error_message or "") for r in cut)
    assert (run.ended_ns - run.window_end_ns) / 1e9 < 2.0


def test_unreachable_target_is_one_line() -> None:
    from tokenwatt.errors import TargetError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens

    async def main() -> None:
        async with open_target(remote_spec(f"http://127.0.0.1:{port}/v1")):
            pass

    with pytest.raises(TargetError) as err:
        asyncio.run(main())
    assert "\n" not in str(err.value) and f"127.0.0.1:{port}" in str(err.value)


def test_unknown_model_and_missing_key_are_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenwatt.errors import SpecError, TargetError

    async def with_model(url: str, model: str) -> None:
        spec = parse_spec(
            {**remote_spec(url).model_dump(mode="json"), "endpoint": {"url": url, "model": model}}
        )
        async with open_target(spec):
            pass

    async def main() -> None:
        async with MisbehavingServer(lambda i: "ok") as srv:
            with pytest.raises(TargetError, match=r"'nope' is not served .* lists: m"):
                await with_model(srv.url, "nope")

    asyncio.run(main())
    monkeypatch.delenv("TW_TEST_KEY", raising=False)
    spec = parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
            "endpoint": {"url": "sim", "api_key_env": "TW_TEST_KEY"},
        }
    )

    async def open_it() -> None:
        async with open_target(spec):
            pass

    with pytest.raises(SpecError, match="TW_TEST_KEY is not set"):
        asyncio.run(open_it())


def test_records_round_trip_through_requests_jsonl(tmp_path: Any) -> None:
    spec = sim_spec(warmup_s=0.2, min_duration_s=0.5, min_requests=3)

    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            return await run_probe(spec, target.client, rate_rps=20.0, seed=6)

    run = asyncio.run(main())
    path = run.write_requests(tmp_path / "requests.jsonl")
    back = read_requests(path)  # what was written, read back without edits
    assert [rec for _, rec in back] == run.records
    phases = [phase for phase, _ in back]
    assert phases == [run.phase_of(r) for r in run.records]
    assert phases.count("window") == run.metrics.requests_counted
    assert set(phases) <= {"warmup", "window", "after"}


def test_probe_settings_default_from_spec() -> None:
    assert sim_spec().search.probe == ProbeSettings(
        warmup_s=0.5, min_duration_s=2.0, min_requests=10, max_duration_s=10
    )


def test_request_cancelled_before_its_first_step_is_recorded() -> None:
    """A send task cancelled before it ever ran (Ctrl-C in the same loop turn) still leaves a
    cancelled record, so the scheduled request is not lost from the count (the in-process
    sender, ``send.local``)."""
    from tokenwatt.send.local import LocalSender
    from tokenwatt.traffic.workload import RequestPlan

    class NeverRuns:
        async def stream(self, **kw: Any) -> RequestRecord:
            raise AssertionError("the task must be cancelled before it runs")

    got: list[RequestRecord] = []

    async def main() -> LocalSender:
        sender = LocalSender(NeverRuns(), ignore_eos=True)
        await sender.start(got.append, lambda: None)
        sender.send(RequestPlan(0, [1000], 1, 2), 123)
        assert sender.in_flight() == 1
        keep_up = await sender.finish(cancel=True)
        assert [w.dealt for w in keep_up] == [0]  # never sent: no send to time
        return sender

    sender = asyncio.run(main())
    assert [(r.request_id, r.scheduled_ns, r.status, r.error_kind) for r in got] == [
        (0, 123, "cancelled", "cancelled")
    ]
    assert sender.in_flight() == 0
