"""StreamClient against small scripted HTTP servers on 127.0.0.1 (real sockets, real bytes).

Each server reads real HTTP requests and answers with a script: raw byte pieces, pauses, a close
or a reset. Everything runs in one asyncio loop per test (``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from tokenwatt.client import StreamClient
from tokenwatt.errors import TargetError
from tokenwatt.records import RequestRecord
from tokenwatt.spec.endpoint import Timeouts

Step = bytes | float | str  # bytes to write, seconds to pause, "close" / "reset" / "hang"
Responder = Callable[[int, bytes, bytes], list[Step]]

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def event(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def cmpl(text: str, fr: str | None = None, cum: int | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": fr}],
    }
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": cum}
    return obj


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def sse_stream(
    objs: list[Any], *, done: bool = True, gap_s: float = 0.0, end: bool = True
) -> list[Step]:
    steps: list[Step] = [SSE_HEAD]
    for o in objs:
        steps.append(chunk(event(o)))
        if gap_s:
            steps.append(gap_s)
    if done:
        steps.append(chunk(b"data: [DONE]\n\n"))
    if end:
        steps.append(b"0\r\n\r\n")
    return steps


def json_response(status: str, body: bytes, *, close: bool = False) -> list[Step]:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    ).encode()
    return [head + body]


@dataclass
class Server:
    """Scripted HTTP/1.1 server: ``responder(index, head, body) -> steps`` per request."""

    responder: Responder
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append((head, body))
                for step in self.responder(len(self.requests) - 1, head, body):
                    if isinstance(step, bytes):
                        writer.write(step)
                        await writer.drain()
                    elif isinstance(step, float):
                        await asyncio.sleep(step)
                    elif step == "close":
                        writer.close()
                        return
                    elif step == "reset":
                        sock = writer.get_extra_info("socket")
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        writer.transport.abort()
                        return
                    elif step == "hang":
                        await asyncio.sleep(3600)
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()


def client(url: str, **kw: Any) -> StreamClient:
    timeouts = kw.pop("timeouts", Timeouts(connect_s=2, first_token_s=5, idle_s=5, total_s=10))
    return StreamClient(url, api=kw.pop("api", "completions"), model="m", timeouts=timeouts, **kw)


async def one(c: StreamClient, rid: int = 1, **kw: Any) -> RequestRecord:
    return await c.stream(
        request_id=rid,
        scheduled_ns=0,
        prompt=kw.pop("prompt", [1, 2, 3]),
        max_tokens=kw.pop("max_tokens", 3),
        prompt_tokens_client=3,
        **kw,
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
        await asyncio.wait_for(coro(), 30)

    if _LOOP["kind"] == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(guarded())
    else:
        asyncio.run(guarded())


def assert_ordered(r: RequestRecord) -> None:
    assert r.sent_ns is not None and r.first_token_ns is not None
    assert r.end_ns is not None and r.done_ns is not None
    assert r.sent_ns <= r.first_token_ns <= r.end_ns <= r.done_ns
    assert list(r.chunk_ns) == sorted(r.chunk_ns)


# ---------------------------------------------------------------- normal streams


def test_normal_stream_and_request_shape() -> None:
    objs = [cmpl("a"), cmpl("b"), cmpl("c", "length"), usage(3, 3)]

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream(objs, gap_s=0.01)) as srv:
            c = client(srv.url, api_key="sk-secret-123")
            r = await one(c)
            await c.aclose()
        assert r.ok, r
        assert r.http_status == 200 and r.saw_done and r.finish_reason == "length"
        assert len(r.chunk_ns) == 3 and list(r.chunk_tokens) == [1, 1, 1]
        assert r.completion_tokens == 3 and r.prompt_tokens == 3 and r.usage_source == "server"
        assert r.timestamp_source == c.clock.timestamp_source
        assert_ordered(r)
        # the last chunk followed two 10 ms pauses (chunks read late may share a stamp, so
        # only the distance from the send is certain; uvloop's sleeps may end ~1 ms early)
        assert r.end_ns is not None and r.sent_ns is not None
        assert r.end_ns - r.sent_ns >= 15_000_000
        head, body = srv.requests[0]
        assert head.startswith(b"POST /v1/completions HTTP/1.1\r\n")
        assert b"\r\nAuthorization: Bearer sk-secret-123\r\n" in head
        sent = orjson.loads(body)
        assert sent["stream"] is True and sent["prompt"] == [1, 2, 3] and sent["max_tokens"] == 3
        assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}

    run(main)


def test_chat_stream_skips_role_chunk() -> None:
    objs = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hi"}}]},
        {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]},
        usage(4, 2),
    ]

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream(objs, gap_s=0.005)) as srv:
            c = client(srv.url, api="chat")
            r = await one(c, prompt="hello")
            await c.aclose()
        assert r.ok and len(r.chunk_ns) == 2 and r.completion_tokens == 2
        assert srv.requests[0][0].startswith(b"POST /v1/chat/completions ")
        assert orjson.loads(srv.requests[0][1])["messages"] == [
            {"role": "user", "content": "hello"}
        ]

    run(main)


def test_multi_token_chunks_with_continuous_usage() -> None:
    objs = [cmpl("a", cum=1), cmpl("bcd", cum=4), cmpl("ef", "length", cum=6), usage(3, 6)]

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream(objs)) as srv:
            c = client(srv.url)
            r = await one(c, max_tokens=6)
            await c.aclose()
        assert r.ok and list(r.chunk_tokens) == [1, 3, 2] and r.chunk_tokens_source == "usage"
        assert r.completion_tokens == 6

    run(main)


def test_bytes_split_at_awkward_places_give_the_same_record() -> None:
    text = "naïve 東京 🚀"
    objs = [cmpl(text), cmpl("x" * 70_000), cmpl("c", "length"), usage(3, 3)]
    whole = b"".join(s for s in sse_stream(objs) if isinstance(s, bytes))
    cuts = [1, 5, len(SSE_HEAD) - 2, len(SSE_HEAD) + 1, len(SSE_HEAD) + 3]
    cuts += [whole.index("🚀".encode()) + 2, whole.index(b"data:", 200) + 5]
    cuts += [len(whole) - 7, len(whole) - 3, len(whole) - 1]
    cuts = sorted(set(cuts))
    pieces: list[Step] = []
    for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True):
        pieces += [whole[a:b], 0.002]

    async def main() -> None:
        texts: list[str] = []

        def hook(obj: dict[str, Any], stamp: int) -> None:
            for ch in obj.get("choices") or []:
                texts.append(ch.get("text", ""))

        async with Server(lambda i, h, b: pieces) as srv:
            c = client(srv.url, event_hook=hook)
            r = await one(c)
            await c.aclose()
        assert r.ok, r
        assert len(r.chunk_ns) == 3 and r.saw_done and r.completion_tokens == 3
        assert texts == [text, "x" * 70_000, "c"]

    run(main)


def test_stream_without_done_ends_with_the_body() -> None:
    objs = [cmpl("a"), cmpl("b", "stop")]

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream(objs, done=False)) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.ok and not r.saw_done and len(r.chunk_ns) == 2
        assert r.usage_source == "fallback" and r.completion_tokens == 2

    run(main)


def test_read_until_close_body_and_connection_close() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    body = event(cmpl("a")) + event(cmpl("b", "length")) + event(usage(3, 2)) + b"data: [DONE]\n\n"

    async def main() -> None:
        async with Server(lambda i, h, b: [head, body[:30], 0.005, body[30:], "close"]) as srv:
            c = client(srv.url)
            r1 = await one(c, 1)
            r2 = await one(c, 2)
            await c.aclose()
        for r in (r1, r2):
            assert r.ok and len(r.chunk_ns) == 2 and r.completion_tokens == 2
        assert r2.connection_reused is False
        assert srv.connections == 2 and c.connections_opened == 2

    run(main)


def test_keep_alive_reuses_one_connection() -> None:
    objs = [cmpl("a"), cmpl("b", "length"), usage(3, 2)]

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream(objs)) as srv:
            c = client(srv.url)
            recs = [await one(c, i) for i in range(4)]
            await c.aclose()
        assert all(r.ok for r in recs)
        assert srv.connections == 1 and c.connections_opened == 1
        assert [r.connection_reused for r in recs] == [False, True, True, True]

    run(main)


def test_server_closing_an_idle_keep_alive_connection() -> None:
    objs = [cmpl("a", "length"), usage(3, 1)]

    async def main() -> None:
        # answers with keep-alive framing, then closes anyway
        async with Server(lambda i, h, b: [*sse_stream(objs), 0.02, "close"]) as srv:
            c = client(srv.url)
            r1 = await one(c, 1)
            await asyncio.sleep(0.1)
            r2 = await one(c, 2)
            await c.aclose()
        assert r1.ok and r2.ok, (r1, r2)
        assert srv.connections == 2

    run(main)


def test_concurrency_above_max_connections_waits_for_a_slot() -> None:
    objs = [cmpl("a"), cmpl("b", "length"), usage(3, 2)]

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream(objs, gap_s=0.01)) as srv:
            c = client(srv.url, max_connections=5)
            recs = await asyncio.gather(*(one(c, i) for i in range(40)))
            await c.aclose()
        assert all(r.ok for r in recs)
        assert srv.connections <= 5 and c.connections_opened <= 5

    run(main)


def test_large_request_body_is_sent_whole() -> None:
    prompt = "word " * 400_000  # 2 MB: more than one send() on a non-blocking socket

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream([cmpl("a", "length")])) as srv:
            c = client(srv.url)
            r = await one(c, prompt=prompt)
            await c.aclose()
        assert r.ok and len(r.chunk_ns) == 1
        assert orjson.loads(srv.requests[0][1])["prompt"] == prompt
        assert r.sent_ns is not None and r.first_token_ns is not None
        assert r.sent_ns <= r.first_token_ns

    run(main)


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (
            "400 Bad Request",
            b'{"error":{"message":"maximum context length is 8192 tokens","type":'
            b'"BadRequestError","param":null,"code":400}}',
            "HTTP 400: BadRequestError: maximum context length is 8192 tokens",
        ),
        ("500 Internal Server Error", b'{"object":"error","message":"engine dead"}', "HTTP 500"),
    ],
)
def test_http_error_status(status: str, body: bytes, message: str) -> None:
    async def main() -> None:
        async with Server(lambda i, h, b: json_response(status, body)) as srv:
            c = client(srv.url)
            r = await one(c)
            r2 = await one(c)  # the connection stays usable after an error answer
            await c.aclose()
        assert srv.connections == 1 and r2.connection_reused
        for rr in (r, r2):
            assert rr.status == "error" and rr.error_kind == "http_status"
            assert rr.http_status == int(status[:3])
            assert rr.error_message is not None and rr.error_message.startswith(message)
            assert list(rr.chunk_ns) == [] and rr.first_token_ns is None and rr.done_ns is not None

    run(main)


def test_api_key_never_reaches_the_error_message() -> None:
    body = b'{"error":{"message":"Incorrect API key provided: sk-secret-123","code":401}}'

    async def main() -> None:
        async with Server(lambda i, h, b: json_response("401 Unauthorized", body)) as srv:
            c = client(srv.url, api_key="sk-secret-123")
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "http_status" and r.error_message is not None
        assert "sk-secret-123" not in r.error_message and "***" in r.error_message
        assert "sk-secret-123" not in str(r.to_dict())

    run(main)


def test_reset_mid_stream_keeps_what_arrived() -> None:
    async def main() -> None:
        steps = [*sse_stream([cmpl("a"), cmpl("b")], done=False, end=False, gap_s=0.01), "reset"]
        async with Server(lambda i, h, b: steps) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.status == "error" and r.error_kind == "reset", r
        assert len(r.chunk_ns) == 2 and r.first_token_ns is not None
        assert r.done_ns is not None and r.done_ns >= r.chunk_ns[-1]

    run(main)


def test_clean_close_mid_chunked_stream_is_truncated() -> None:
    async def main() -> None:
        steps = [*sse_stream([cmpl("a")], done=False, end=False), "close"]
        async with Server(lambda i, h, b: steps) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "truncated" and len(r.chunk_ns) == 1
        assert r.error_message is not None and "framing ended" in r.error_message

    run(main)


def test_malformed_json_and_malformed_http() -> None:
    async def main() -> None:
        bad_json = sse_stream([cmpl("a"), b'{"choices": [{"text": "b"'])
        async with Server(lambda i, h, b: bad_json) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "protocol" and r.error_message is not None
        assert "malformed JSON" in r.error_message
        async with Server(
            lambda i, h, b: [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]
        ) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "protocol" and r.error_message is not None
        assert "malformed HTTP" in r.error_message

    run(main)


def test_json_error_inside_a_200_stream() -> None:
    err = {"error": {"message": "TimeoutError", "type": "GatewayTimeout", "code": 504}}

    async def main() -> None:
        async with Server(lambda i, h, b: sse_stream([err])) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.status == "error" and r.error_kind == "stream_error"
        assert r.http_status == 200 and r.error_message == "GatewayTimeout: TimeoutError"
        assert list(r.chunk_ns) == [] and r.saw_done

    run(main)


def test_200_with_a_json_body_instead_of_a_stream() -> None:
    async def main() -> None:
        async with Server(lambda i, h, b: json_response("200 OK", b'{"choices":[]}')) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "protocol" and r.error_message is not None
        assert "expected text/event-stream" in r.error_message

    run(main)


def test_stall_mid_stream() -> None:
    timeouts = Timeouts(connect_s=2, first_token_s=5, idle_s=0.3, total_s=10)

    async def main() -> None:
        steps = [*sse_stream([cmpl("a")], done=False, end=False), "hang"]
        async with Server(lambda i, h, b: steps) as srv:
            c = client(srv.url, timeouts=timeouts)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "stall" and len(r.chunk_ns) == 1, r
        assert r.done_ns is not None
        assert 300_000_000 <= r.done_ns - r.chunk_ns[0] < 2_000_000_000  # first_token_s is 5

    run(main)


def test_first_token_timeout_despite_keepalive_comments() -> None:
    timeouts = Timeouts(connect_s=2, first_token_s=0.4, idle_s=0.1, total_s=10)
    keepalives: list[Step] = [SSE_HEAD]
    for _ in range(20):
        keepalives += [chunk(b": keep-alive\n\n"), 0.05]
    keepalives.append("hang")

    async def main() -> None:
        async with Server(lambda i, h, b: keepalives) as srv:
            c = client(srv.url, timeouts=timeouts)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "timeout_first_token", r
        assert r.sent_ns is not None and r.done_ns is not None
        assert r.done_ns - r.sent_ns >= 400_000_000

    run(main)


def test_total_timeout() -> None:
    timeouts = Timeouts(connect_s=2, first_token_s=5, idle_s=5, total_s=0.4)

    async def main() -> None:
        steps = sse_stream([cmpl("x")] * 100, gap_s=0.02)
        async with Server(lambda i, h, b: steps) as srv:
            c = client(srv.url, timeouts=timeouts)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "timeout_total" and 5 < len(r.chunk_ns) < 100, r

    run(main)


def test_connect_refused_and_list_models_errors() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now

    async def main() -> None:
        c = client(f"http://127.0.0.1:{port}/v1")
        r = await one(c)
        assert r.error_kind == "connect" and r.error_message is not None
        assert "ECONNREFUSED" in r.error_message
        with pytest.raises(TargetError, match="cannot reach"):
            await c.list_models()
        await c.aclose()
        models = b'{"object":"list","data":[{"id":"sim-8b","object":"model"}]}'

        def responder(i: int, h: bytes, b: bytes) -> list[Step]:
            if h.startswith(b"GET /v1/models "):
                return json_response("200 OK", models)
            return json_response("404 Not Found", b'{"detail":"Not Found"}')

        async with Server(responder) as srv:
            c = client(srv.url)
            assert await c.list_models() == ["sim-8b"]
            await c.aclose()
            c = client(srv.url.replace("/v1", "/v2"))
            with pytest.raises(TargetError, match="HTTP 404"):
                await c.list_models()
            await c.aclose()

    run(main)


def test_cancellation_fills_the_record_then_raises() -> None:
    async def main() -> None:
        steps = sse_stream([cmpl("x")] * 100, gap_s=0.02)
        async with Server(lambda i, h, b: steps) as srv:
            c = client(srv.url)
            rec = RequestRecord(request_id=0, scheduled_ns=0, prompt_tokens_client=0, max_tokens=0)
            task = asyncio.ensure_future(one(c, 7, record=rec))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await c.aclose()
        assert rec.request_id == 7 and rec.status == "error" and rec.error_kind == "cancelled"
        assert 2 <= len(rec.chunk_ns) < 100 and rec.done_ns is not None

    run(main)


def test_oversized_event_is_a_protocol_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    import tokenwatt.client.conn as conn_mod

    small = functools.partial(conn_mod.SSEParser, max_event_bytes=10_000)
    monkeypatch.setattr(conn_mod, "SSEParser", small)

    async def main() -> None:
        whole = b"".join(
            s for s in sse_stream([cmpl("a"), cmpl("x" * 20_000)]) if isinstance(s, bytes)
        )
        cut = whole.index(b"xxxx")
        steps: list[Step] = [whole[:cut], 0.01]
        for i in range(cut, len(whole), 2000):  # the long line arrives in many reads
            steps += [whole[i : i + 2000], 0.002]
        async with Server(lambda i, h, b: steps) as srv:
            c = client(srv.url)
            r = await one(c)
            await c.aclose()
        assert r.error_kind == "protocol" and r.error_message is not None
        assert "longer than 10000 bytes" in r.error_message
        assert len(r.chunk_ns) == 1

    run(main)


def test_cancelled_while_connecting_frees_the_slot() -> None:
    async def main() -> None:
        objs = [cmpl("a", "length"), usage(3, 1)]
        async with Server(lambda i, h, b: sse_stream(objs)) as srv:
            c = client(srv.url, max_connections=1)
            task = asyncio.ensure_future(one(c, 1))
            await asyncio.sleep(0)  # the task reserved the only slot and is connecting
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            r = await asyncio.wait_for(one(c, 2), 5)  # would wait forever on a leaked slot
            await c.aclose()
        assert r.ok

    run(main)
