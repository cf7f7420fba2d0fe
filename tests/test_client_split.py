"""Property: however the server's bytes are framed and split, the connection reads the same stream.

Drives one ``Connection`` over a socket pair without an event loop running: the test writes each
piece to the peer and calls the read callback itself, so each piece is exactly one read. HTTP
chunk boundaries are drawn independently of SSE event boundaries, and TCP pieces independently of
both, so events, UTF-8 characters and chunk-size lines are cut everywhere.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwatt.client.conn import RECV_SIZE, Connection, Exchange
from tokenwatt.client.openai import StreamInterpreter
from tokenwatt.client.stamps import RealtimeOffset
from tokenwatt.records import RequestRecord

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

_text = st.text(alphabet=st.sampled_from(list('ab \n"\\é東🚀')), min_size=1, max_size=6)


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, list[str], list[int]]:
    texts = draw(st.lists(_text, min_size=1, max_size=8))
    per_chunk = [draw(st.integers(1, 3)) for _ in texts]
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    body = b""
    cum = 0
    for t, n in zip(texts, per_chunk, strict=True):
        cum += n
        obj = {"choices": [{"index": 0, "text": t}], "usage": {"completion_tokens": cum}}
        body += b"data:" + draw(st.sampled_from([b"", b" "])) + orjson.dumps(obj) + eol + eol
        if draw(st.booleans()):
            body += b": keep-alive" + eol + eol
    body += b"data: [DONE]" + eol + eol
    # HTTP chunks of arbitrary sizes, unrelated to the events
    sizes = draw(st.lists(st.integers(1, 40), min_size=1, max_size=60))
    framed = b""
    i = k = 0
    while i < len(body):
        piece = body[i : i + sizes[k % len(sizes)]]
        framed += b"%x\r\n" % len(piece) + piece + b"\r\n"
        i += len(piece)
        k += 1
    return HEAD + framed + b"0\r\n\r\n", texts, per_chunk


def _drive(raw: bytes, cuts: list[int]) -> tuple[RequestRecord, Exchange, list[str]]:
    loop = asyncio.new_event_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    texts: list[str] = []

    def hook(obj: dict[str, Any], stamp: int) -> None:
        texts.extend(c["text"] for c in obj.get("choices") or [])

    try:
        conn = Connection(
            loop,
            a,
            kernel_stamps=False,
            offset=RealtimeOffset(0),
            on_idle=lambda c: None,
            on_closed=lambda c: None,
            rbuf=memoryview(bytearray(RECV_SIZE)),
        )
        ex = Exchange(loop.create_future(), StreamInterpreter("completions", hook))
        conn.start(ex, b"GET / HTTP/1.1\r\n\r\n")
        points = sorted({c % (len(raw) + 1) for c in cuts})
        for lo, hi in zip([0, *points], [*points, len(raw)], strict=True):
            if hi > lo:
                b.sendall(raw[lo:hi])
                conn._on_readable()
        rec = RequestRecord(request_id=0, scheduled_ns=0, prompt_tokens_client=0, max_tokens=0)
        assert ex.interp is not None
        ex.interp.fill(rec)
        conn.close()
        return rec, ex, texts
    finally:
        b.close()
        a.close()
        loop.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(resp=responses(), cuts=st.lists(st.integers(0, 100_000), max_size=25))
def test_any_framing_and_split_reads_the_same_stream(
    resp: tuple[bytes, list[str], list[int]], cuts: list[int]
) -> None:
    raw, texts, per_chunk = resp
    rec, ex, seen = _drive(raw, cuts)
    assert ex.error_kind is None and ex.future.done() and ex.saw_done
    assert ex.http_status == 200
    assert seen == texts  # every character intact, in order
    assert list(rec.chunk_tokens) == per_chunk and rec.chunk_tokens_source == "usage"
    assert rec.completion_tokens == sum(per_chunk)
    assert len(rec.chunk_ns) == len(texts) and list(rec.chunk_ns) == sorted(rec.chunk_ns)
    # the reads that returned several events are counted exactly
    by_stamp: dict[int, int] = {}
    for s in rec.chunk_ns:
        by_stamp[s] = by_stamp.get(s, 0) + 1
    assert rec.coalesced_reads == sum(1 for n in by_stamp.values() if n > 1)
