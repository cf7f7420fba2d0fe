"""StreamClient against the fault-injecting server: the exact classification of every request, one
record per request, no late answer taken for another request's, no secret in any output."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from faultserver import EXPECTED, LATE_MODES, LATE_TOKENS, MODES, FaultServer, threaded
from tokenwatt.client import StreamClient
from tokenwatt.client import core as client_core
from tokenwatt.errors import TargetError
from tokenwatt.records import RequestRecord
from tokenwatt.spec.endpoint import Timeouts

N_TOKENS = 16
CUT = 3  # tokens a cut-short stream delivers (faultserver.script)
FAST = Timeouts(connect_s=2, first_token_s=0.6, idle_s=0.3, total_s=10)


def client(url: str, **kw: Any) -> StreamClient:
    return StreamClient(url, api="completions", model="m", timeouts=kw.pop("timeouts", FAST), **kw)


async def one(c: StreamClient, rid: int, prompt: list[int] | None = None) -> RequestRecord:
    return await c.stream(
        request_id=rid,
        scheduled_ns=0,
        prompt=prompt or [1, 2, 3],
        max_tokens=N_TOKENS,
        prompt_tokens_client=3,
    )


_LOOP = {"kind": "asyncio"}


@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def loop_kind(request: pytest.FixtureRequest) -> str:
    """Every test runs on the standard loop and on uvloop (their add_reader paths differ)."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    _LOOP["kind"] = request.param
    return str(request.param)


def run(coro: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        await asyncio.wait_for(coro(), 60)

    if _LOOP["kind"] == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(guarded())
    else:
        asyncio.run(guarded())


def classify(r: RequestRecord) -> tuple[str, str | None]:
    return r.status, r.error_kind


SCRIPTED = [m for m in MODES if m not in (*LATE_MODES, "echo_secrets")]


@pytest.mark.parametrize("mode", SCRIPTED)
def test_each_fault_is_classified_exactly_and_recorded_once(mode: str) -> None:
    """Two requests in a row (the second may reuse the connection the fault left behind)."""

    async def main() -> None:
        async with FaultServer(modes=[mode]) as srv:
            c = client(srv.url)
            recs = [await one(c, 1), await one(c, 2)]
            await c.aclose()
        assert [classify(r) for r in recs] == [EXPECTED[mode]] * 2, [r.error_message for r in recs]
        assert [r.request_id for r in recs] == [1, 2]
        # after the first answer nobody asked for no connection is reused: the second
        # request's own connection is closed as its answer ends, before the duplicate is read
        assert c.stray_answers == (1 if mode == "double_response_one_write" else 0)
        assert srv.total_posts == 2  # each request sent once, no hidden retry
        for r in recs:
            assert r.sent_ns is not None and r.done_ns is not None
            if r.first_token_ns is not None:
                assert r.sent_ns <= r.first_token_ns <= r.done_ns
        if mode.startswith("truncated"):
            # cut short: failed, with the tokens that did arrive kept
            assert all(len(r.chunk_ns) == CUT and r.completion_tokens == CUT for r in recs)
        if mode == "short_output":
            assert all(r.short_output and r.completion_tokens == CUT for r in recs)
        elif EXPECTED[mode][0] == "ok":
            assert all(not r.short_output and r.completion_tokens == N_TOKENS for r in recs)

    run(main)


def test_a_late_answer_on_an_idle_connection_is_never_taken_for_the_next_request() -> None:
    async def main() -> None:
        async with FaultServer(modes=["late_second_response", "ok"]) as srv:
            c = client(srv.url)
            r1 = await one(c, 1)
            await asyncio.sleep(0.3)  # the stray answer lands while the connection is idle
            r2 = await one(c, 2)
            await c.aclose()
        assert r1.ok and r2.ok
        assert r1.completion_tokens == r2.completion_tokens == N_TOKENS  # never LATE_TOKENS
        assert r2.connection_reused is False and c.connections_opened == 2
        assert c.stray_answers == 1

    run(main)


def test_a_late_answer_already_waiting_in_the_kernel_is_seen_before_reuse() -> None:
    """The stray answer sits unread in the socket (this loop was busy) when the next request
    takes the idle connection: the client must look before it writes."""

    async def main() -> None:
        with threaded(FaultServer(modes=["late_second_response", "ok"])) as srv:
            c = client(srv.url)
            r1 = await one(c, 1)
            time.sleep(0.3)  # block this loop: the stray lands in the kernel, unread
            r2 = await one(c, 2)
            await c.aclose()
        assert r1.ok and r2.ok
        assert r2.completion_tokens == N_TOKENS  # not the stray's LATE_TOKENS
        assert r2.connection_reused is False and c.connections_opened == 2
        assert c.stray_answers == 1

    run(main)


def test_two_answers_in_one_read_close_the_connection() -> None:
    async def main() -> None:
        async with FaultServer(modes=["double_response_one_write", "ok"]) as srv:
            c = client(srv.url)
            r1 = await one(c, 1)
            r2 = await one(c, 2)  # at once: the stray bytes are already in the socket
            await c.aclose()
        assert r1.ok and r2.ok and LATE_TOKENS != N_TOKENS
        assert r1.completion_tokens == r2.completion_tokens == N_TOKENS
        assert r2.connection_reused is False and c.connections_opened == 2
        assert c.stray_answers == 1

    run(main)


def test_sub_millisecond_answers_never_give_a_negative_ttft() -> None:
    async def main() -> None:
        async with FaultServer(modes=["instant"]) as srv:
            c = client(srv.url)
            recs = [await one(c, i) for i in range(100)]
            await c.aclose()
        assert all(r.ok for r in recs)
        for r in recs:
            assert r.sent_ns is not None and r.first_token_ns is not None
            assert r.first_token_ns >= r.sent_ns

    run(main)


def test_every_mode_at_once_each_request_recorded_once_with_its_own_kind() -> None:
    """All modes interleaved on shared connections, two requests each, concurrently."""
    modes = [m for m in MODES if m not in LATE_MODES]

    async def main() -> None:
        async with FaultServer(by_prompt=True) as srv:
            c = client(srv.url, max_connections=8)
            jobs = [one(c, i, prompt=[MODES.index(m), 7, 7]) for i, m in enumerate(modes * 2)]
            recs = await asyncio.gather(*jobs)
            await c.aclose()
        assert sorted(r.request_id for r in recs) == list(range(2 * len(modes)))
        for r, m in zip(recs, modes * 2, strict=True):
            assert classify(r) == EXPECTED[m], (m, r.error_message)
        # one POST per request, plus at most one retry for a reused connection reset before
        # any byte came back (the only retry the client makes)
        retried = srv.total_posts - len(recs)
        assert 0 <= retried <= srv.posts.get("reset_before_headers", 0) // 2 + 2

    run(main)


def test_a_dead_server_is_a_connect_failure_for_every_request() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connection refused

    async def main() -> None:
        c = client(f"http://127.0.0.1:{port}/v1")
        recs = await asyncio.gather(*(one(c, i) for i in range(5)))
        await c.aclose()
        assert sorted(r.request_id for r in recs) == list(range(5))
        assert all(classify(r) == ("error", "connect") for r in recs)
        assert all(r.error_message and "ECONNREFUSED" in r.error_message for r in recs)
        assert all(r.sent_ns is None and r.done_ns is not None for r in recs)

    run(main)


def test_redirect_line_names_the_target_and_the_fix() -> None:
    async def main() -> None:
        async with FaultServer(modes=["redirect_307"]) as srv:
            c = client(srv.url)
            r = await one(c, 1)
            await c.aclose()
        assert r.error_kind == "http_status" and r.http_status == 307
        assert r.error_message == (
            "HTTP 307: the endpoint redirects to /v2/completions; "
            "use that URL as endpoint.url (ending in /v1)"
        )

    run(main)


def test_models_list_is_bounded_in_size_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with FaultServer(huge_models=True) as srv:
            c = client(srv.url)
            with pytest.raises(TargetError, match=r"answer larger than 1048576 bytes"):
                await c.list_models()
            await c.aclose()
        # a server that never answers GET /models: the short start-up limit, not first_token_s
        monkeypatch.setattr(client_core, "MODELS_TIMEOUT_S", 0.3)
        with socket.socket() as lsock:
            lsock.bind(("127.0.0.1", 0))
            lsock.listen()
            port = lsock.getsockname()[1]
            slow = Timeouts(connect_s=2, first_token_s=600, idle_s=600, total_s=600)
            c = client(f"http://127.0.0.1:{port}/v1", timeouts=slow)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(TargetError, match=r"no complete answer within 0.3 s"):
                await c.list_models()
            assert loop.time() - t0 < 5
            await c.aclose()

    run(main)


def test_no_secret_in_any_output(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Distinctive secrets in the URL's userinfo, its query and the API key; a server that
    echoes every header back; every record, exception text, log line and output is searched."""
    password = "pw-Zq81xSECRET"
    api_key = "sk-Kp47wSECRET"
    query_token = "tk-Mm22vSECRET"
    caplog.set_level(logging.DEBUG)
    outputs: list[str] = []

    async def main() -> None:
        async with FaultServer(modes=["echo_secrets", "redirect_307", "http_500"]) as srv:
            url = f"http://bob:{password}@127.0.0.1:{srv.port}/v1?token={query_token}"
            c = client(url, api_key=api_key)
            recs = [await one(c, i) for i in range(3)]
            assert recs[0].error_message is not None and "Authorization" in recs[0].error_message
            outputs.extend(json.dumps(r.to_dict()) for r in recs)
            outputs.append(c.safe_url)
            await c.aclose()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]  # closed: connection refused
        c = client(
            f"http://bob:{password}@127.0.0.1:{dead}/v1?api_key={query_token}", api_key=api_key
        )
        r = await one(c, 9)
        outputs.append(json.dumps(r.to_dict()))
        with pytest.raises(TargetError) as err:
            await c.list_models()
        outputs.append(str(err.value))
        await c.aclose()
        assert r.error_kind == "connect"

    run(main)
    captured = capsys.readouterr()
    outputs += [captured.out, captured.err, caplog.text]
    for secret in (password, api_key, query_token):
        assert not [o for o in outputs if secret in o], secret
    assert any("***" in o for o in outputs)  # the secrets were there, and were redacted
