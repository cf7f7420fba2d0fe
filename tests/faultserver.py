"""A fault-injecting OpenAI-compatible server for tests: real sockets on 127.0.0.1, scripted bytes.

Each mode is a way a server (or the network) can break; ``EXPECTED`` says how the client must
classify a request answered in that mode, so a test can assert the exact status and error kind of
every request and a probe-level test can reuse the same table. The mode of a request is, in order:
the ``fault`` field of its JSON body (send it with ``extra_body={"fault": mode}``); with
``by_prompt=True`` the first prompt token id as an index into ``MODES``; else
``modes[i % len(modes)]`` for the server's i-th request.

Streams are completions-shaped: ``max_tokens`` content chunks of one token each (``"x"``), the last
with ``finish_reason: "length"``, then ``[DONE]``; faulty modes cut or bend that.

Usage::

    async with FaultServer(modes=["truncated_chunked_end"]) as srv:
        client = StreamClient(srv.url, ...)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

Step = bytes | float | str  # bytes to write, seconds to pause, "close" / "reset" / "hang"

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)
UNFRAMED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
LATE_TOKENS = 2  # the stray second response of "late_second_response" carries this many tokens
HUGE_MODELS_BYTES = 5 << 20


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def event(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def token_events(n: int, *, finish: str | None = "length", rid: str = "") -> list[bytes]:
    """``n`` one-token content events; the last carries ``finish`` (None: no finish_reason).
    With ``rid`` every event carries it as its ``id``, as engines do (one id per answer)."""
    out = []
    for i in range(n):
        fr = finish if i == n - 1 else None
        obj: dict[str, Any] = {"choices": [{"index": 0, "text": "x", "finish_reason": fr}]}
        if rid:
            obj["id"] = rid
        out.append(event(obj))
    return out


def counted_events(cums: list[int], *, final: int | None = None, rid: str = "") -> list[bytes]:
    """Content events, one per entry of ``cums``, each carrying the running
    ``usage.completion_tokens`` it states (``continuous_usage_stats``), the last with
    ``finish_reason: "length"``; then, with ``final``, a usage-only event stating that count."""
    out = []
    for i, cum in enumerate(cums):
        fr = "length" if i == len(cums) - 1 else None
        obj: dict[str, Any] = {
            "choices": [{"index": 0, "text": "x", "finish_reason": fr}],
            "usage": {"prompt_tokens": 16, "completion_tokens": cum},
        }
        if rid:
            obj["id"] = rid
        out.append(event(obj))
    if final is not None:
        out.append(
            event({"choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": final}})
        )
    return out


def usage_script(mode: str, n: int, rid: str = "") -> list[Step] | None:
    """Streams whose token counts lie (None: not such a mode). Each has ``n`` tokens' worth
    of content chunks; only the counts the server states are wrong."""
    honest = list(range(1, n + 1))
    ce = functools.partial(counted_events, rid=rid)
    if mode == "usage_multi_token":  # an honest speculative stream: 2 tokens a chunk
        return chunked_stream(ce([*range(2, n, 2), n], final=n))
    if mode == "usage_past_max":  # the last chunk's count jumps 100,000 past max_tokens
        return chunked_stream(ce([*honest[:-1], n + 100_000], final=n + 100_000))
    if mode == "usage_huge_final":  # right while streaming, then a final count of 10⁹
        return chunked_stream(ce(honest, final=10**9))
    if mode == "usage_negative":  # no running counts, then a negative final count
        return chunked_stream([*token_events(n, rid=rid), event({"choices": [], "usage": {
            "prompt_tokens": 16, "completion_tokens": -5}})])  # fmt: skip
    if mode == "usage_falls":  # a running count that goes back
        return chunked_stream(ce([*honest[: n // 2], 1, *honest[n // 2 + 1 :]]))
    if mode == "text_without_tokens":  # 2 tokens a step, each step's text in two chunks, the
        # second adding no token: a step count from chunks would read acceptance 1, not 2
        return chunked_stream(ce([c for c in [*range(2, n, 2), n] for _ in (0, 1)], final=n))
    return None


def chunked_stream(events: list[bytes], *, done: bool = True, end: bool = True) -> list[Step]:
    steps: list[Step] = [SSE_HEAD, *(chunk(e) for e in events)]
    if done:
        steps.append(chunk(b"data: [DONE]\n\n"))
    if end:
        steps.append(b"0\r\n\r\n")
    return steps


def json_response(status: str, body: bytes, *, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def _stream_bytes(n: int, rid: str = "") -> bytes:
    return b"".join(s for s in chunked_stream(token_events(n, rid=rid)) if isinstance(s, bytes))


def script(mode: str, max_tokens: int, rid: str = "") -> list[Step]:
    """The bytes and actions that answer one request in ``mode`` (``rid``: the answer's id,
    used by the modes that answer twice)."""
    n = max_tokens
    cut = max(1, min(3, n - 1))  # tokens sent before a stream is cut short
    ev = functools.partial(token_events, rid=rid)  # every answer carries its id, as engines do
    if (counted := usage_script(mode, n, rid)) is not None:
        return counted
    if mode in ("ok", "instant"):
        return chunked_stream(ev(n))
    if mode == "ok_finish_no_done":
        return chunked_stream(ev(n), done=False)
    if mode == "short_output":
        return chunked_stream(ev(cut, finish="stop"))
    if mode == "http_500":
        return [json_response("500 Internal Server Error", b'{"error": {"message": "boom"}}')]
    if mode == "http_503_html":
        return [json_response("503 Service Unavailable", b"<html><b>down</b></html>")]
    if mode == "redirect_307":
        return [json_response("307 Temporary Redirect", b"", extra="Location: /v2/completions\r\n")]
    if mode == "reset_before_headers":
        return ["reset"]
    if mode == "reset_mid_stream":
        return [*chunked_stream(ev(cut, finish=None), done=False, end=False), "reset"]
    if mode == "stall":
        return [*chunked_stream(ev(cut, finish=None), done=False, end=False), "hang"]
    if mode == "no_first_token":
        return [SSE_HEAD, chunk(b": keep-alive\n\n"), "hang"]
    if mode == "malformed_sse":
        return chunked_stream([*ev(cut, finish=None), b"data: {not json\n\n"])
    if mode == "malformed_http":
        return [b"HTTP/1.1 two hundred\r\n\r\n", "close"]
    if mode == "stream_error":
        err = event({"error": {"message": "engine died", "type": "internal"}})
        return chunked_stream([*ev(cut, finish=None), err])
    if mode == "json_instead_of_stream":
        return [json_response("200 OK", b'{"choices": []}')]
    if mode == "truncated_close_unframed":
        return [UNFRAMED_HEAD, *ev(cut, finish=None), "close"]
    if mode == "truncated_chunked_end":
        return chunked_stream(ev(cut, finish=None), done=False)
    if mode == "truncated_close_chunked":
        return [*chunked_stream(ev(cut, finish=None), done=False, end=False), "close"]
    if mode == "truncated_content_length":
        body = b"".join(ev(cut, finish=None))
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            f"Content-Length: {len(body) + 500}\r\n\r\n"
        ).encode()
        return [head + body, "close"]
    if mode == "late_second_response":
        # a correct answer, then (after the client has moved on) a stray duplicate: the same
        # answer id again, as a proxy or engine that replays a response would send
        return [_stream_bytes(n, rid), 0.05, _stream_bytes(LATE_TOKENS, rid)]
    if mode == "constant_id":  # a server (or proxy) that puts one id on every answer
        return [_stream_bytes(n, "cmpl-constant")]
    if mode == "no_id":  # a server that gives its answers no id
        return chunked_stream(token_events(n))
    if mode == "late_second_no_id":  # a late duplicate from a server that sends no ids
        return [_stream_bytes(n), 0.05, _stream_bytes(LATE_TOKENS)]
    if mode == "late_second_constant":  # a late duplicate from a server with one constant id
        return [
            _stream_bytes(n, "cmpl-constant"),
            0.05,
            _stream_bytes(LATE_TOKENS, "cmpl-constant"),
        ]
    if mode == "double_response_one_write":
        return [_stream_bytes(n, rid) + _stream_bytes(LATE_TOKENS, rid)]
    raise ValueError(f"unknown fault mode {mode!r}")


# /metrics answers: a vLLM-named page, then the ways a /metrics endpoint can break
METRICS_MODES = ("ok", "trickle", "flood", "backwards", "nan", "negative", "replicas")
FLOOD_METRICS_BYTES = 64 << 20


def vllm_page(tokens: float, running: float = 1.0) -> bytes:
    """A minimal vLLM /metrics page with ``tokens`` generated so far."""
    return (
        "# TYPE vllm:generation_tokens_total counter\n"
        f"vllm:generation_tokens_total {tokens}\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        f"vllm:prompt_tokens_total {tokens}\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running {running}\n"
    ).encode()


def metrics_script(mode: str, scrape: int) -> list[Step]:
    """The answer to the ``scrape``-th GET /metrics (0-based) in ``mode``."""
    tokens = 1000.0 + 100.0 * scrape
    if mode == "trickle":  # a proxy that holds the connection: one byte a second
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
        return [head[:1], *[x for b in head[1:] for x in (1.0, bytes([b]))]]
    if mode == "flood":  # an endless body (no length, closed by nobody)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
        line = b"vllm:generation_tokens_total 1\n" * 32768
        return [head, *[line] * (FLOOD_METRICS_BYTES // len(line))]
    if mode == "backwards":  # a counter that falls once, as after an engine restart
        tokens = tokens if scrape < 2 else 10.0 + 100.0 * (scrape - 2)
    elif mode == "nan":
        return [json_response("200 OK", vllm_page(float("nan")))]
    elif mode == "negative":
        tokens = -tokens
    elif mode == "replicas":  # two engines behind one balancer, answering in turn
        tokens = tokens if scrape % 2 == 0 else 50.0 + 7.0 * scrape
    return [json_response("200 OK", vllm_page(tokens))]


def _echo(head: bytes) -> bytes:
    """A careless server: a 500 whose message repeats the request line and every header (the
    API key among them), and a Location naming the request's own URL with its credentials."""
    text = head.decode("latin-1").replace("\r\n", " | ")
    body = orjson.dumps({"error": {"message": f"cannot serve {text}"}})
    return json_response("500 Internal Server Error", body)


# mode → (status, error_kind) the client must record for a request answered in that mode
EXPECTED: dict[str, tuple[str, str | None]] = {
    "ok": ("ok", None),
    "instant": ("ok", None),
    "ok_finish_no_done": ("ok", None),
    "short_output": ("ok", None),
    "http_500": ("error", "http_status"),
    "http_503_html": ("error", "http_status"),
    "redirect_307": ("error", "http_status"),
    "reset_before_headers": ("error", "reset"),
    "reset_mid_stream": ("error", "reset"),
    "stall": ("error", "stall"),
    "no_first_token": ("error", "timeout_first_token"),
    "malformed_sse": ("error", "protocol"),
    "malformed_http": ("error", "protocol"),
    "stream_error": ("error", "stream_error"),
    "json_instead_of_stream": ("error", "protocol"),
    "truncated_close_unframed": ("error", "truncated"),
    "truncated_chunked_end": ("error", "truncated"),
    "truncated_close_chunked": ("error", "truncated"),
    "truncated_content_length": ("error", "truncated"),
    "late_second_response": ("ok", None),
    "double_response_one_write": ("ok", None),
    "constant_id": ("ok", None),
    "no_id": ("ok", None),
    "late_second_constant": ("ok", None),
    "late_second_no_id": ("ok", None),
    "echo_secrets": ("error", "http_status"),
    "usage_multi_token": ("ok", None),
    "usage_past_max": ("error", "protocol"),
    "usage_huge_final": ("error", "protocol"),
    "usage_negative": ("error", "protocol"),
    "usage_falls": ("error", "protocol"),
    "text_without_tokens": ("error", "protocol"),
}
MODES: tuple[str, ...] = tuple(EXPECTED)
# modes whose late copy of the answer reaches the next request sent on the connection
LATE_MODES = ("late_second_response", "late_second_constant", "late_second_no_id")


@dataclass
class FaultServer:
    """The scripted server; ``posts`` counts streaming requests received, per mode."""

    modes: list[str] = field(default_factory=lambda: ["ok"])
    by_prompt: bool = False
    huge_models: bool = False
    metrics: str | None = None  # GET /metrics: one of METRICS_MODES; None: no metrics there
    scrapes: int = 0
    posts: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _index: int = 0

    async def __aenter__(self) -> FaultServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def total_posts(self) -> int:
        return sum(self.posts.values())

    def _mode_of(self, body: dict[str, Any]) -> str:
        if isinstance(body.get("fault"), str):
            return str(body["fault"])
        prompt = body.get("prompt")
        if self.by_prompt and isinstance(prompt, list) and prompt:
            return MODES[int(prompt[0]) % len(MODES)]
        mode = self.modes[self._index % len(self.modes)]
        self._index += 1
        return mode

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.connections += 1
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            raw = await reader.readexactly(length) if length else b""
            if self.metrics is not None and head.startswith(b"GET /metrics"):
                steps: list[Step] = metrics_script(self.metrics, self.scrapes)
                self.scrapes += 1
            elif head.startswith(b"GET "):
                steps = [self._models()]
            else:
                body = orjson.loads(raw)
                mode = self._mode_of(body)
                self.posts[mode] = self.posts.get(mode, 0) + 1
                if mode == "echo_secrets":
                    steps = [_echo(head)]
                else:
                    rid = f"cmpl-{self.total_posts}"
                    steps = script(mode, int(body.get("max_tokens", 16)), rid)
            if not await self._play(steps, writer):
                return

    def _models(self) -> bytes:
        if self.huge_models:
            ids = b",".join(b'{"id": "m%d"}' % i for i in range(HUGE_MODELS_BYTES // 12))
            return json_response("200 OK", b'{"data": [' + ids + b"]}")
        return json_response("200 OK", b'{"object": "list", "data": [{"id": "m"}]}')

    async def _play(self, steps: list[Step], writer: asyncio.StreamWriter) -> bool:
        """Write one answer; False when the connection is gone afterwards."""
        for step in steps:
            if isinstance(step, bytes):
                writer.write(step)
                await writer.drain()
            elif isinstance(step, float):
                await asyncio.sleep(step)
            elif step == "close":
                writer.close()
                return False
            elif step == "reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return False
            elif step == "hang":
                await asyncio.sleep(3600)
        return True


@contextlib.contextmanager
def threaded(server: FaultServer) -> Iterator[FaultServer]:
    """Run ``server`` on its own event loop in a thread: for a client in a subprocess (the CLI)
    or a test that blocks its own loop on purpose."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.__aenter__())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
