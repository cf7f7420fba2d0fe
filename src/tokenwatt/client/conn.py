"""One HTTP/1.1 connection on a non-blocking socket, read with ``recvmsg`` from the event loop.

Why not asyncio transports: a transport reads first and calls Python later, so any timestamp
taken in Python includes the loop's backlog. Here the loop only says "readable" (``add_reader``);
the callback calls ``recvmsg`` itself and gets the kernel's receive time of those bytes with
them. Everything per read stays in plain callbacks (httptools → SSE parser → list appends); the
waiting coroutine is woken once, when the exchange ends. TLS runs through ``ssl.MemoryBIO`` so that
the socket reads, and their stamps, stay ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

import httptools
import orjson

from tokenwatt.client.openai import (
    DONE,
    StreamInterpreter,
    error_of,
    message_from_body,
    shorten,
)
from tokenwatt.client.sse import SSEError, SSEParser
from tokenwatt.client.stamps import (
    ANC_BUFSIZE,
    SCM_TIMESTAMPNS,
    TIMESPEC,
    RealtimeOffset,
    enable_kernel_stamps,
)
from tokenwatt.records import ErrorKind, RequestRecord

RECV_SIZE = 256 * 1024  # one read can catch up on a long backlog
_ERROR_BODY_MAX = 64 * 1024
_FLUSH_EVERY = 32  # decode SSE payloads in batches of this many
_perf = time.perf_counter_ns
_unpack = TIMESPEC.unpack
_STRAY_PEEK = 4096  # bytes of an unsolicited answer looked at for its id
# unverified answers a connection remembers (a stale answer's shift that no unsolicited answer
# has shown after this many exchanges is not plausible; the bound keeps a soak's memory flat)
_SUSPECTS_MAX = 1024
# an SSE event's top-level answer id, as engines write it first in each event
_ID_RE = re.compile(rb'"id"\s*:\s*"([^"\\]{1,200})"')


def _first_id(data: bytes) -> str | None:
    m = _ID_RE.search(data, 0, _STRAY_PEEK * 4)
    return m.group(1).decode("utf-8", "replace") if m else None


class Exchange:
    """One request/response on a connection; what the waiting coroutine reads when it ends."""

    __slots__ = (
        "body_limit",
        "bytes_in",
        "content_type",
        "done_ns",
        "error_body",
        "error_kind",
        "error_message",
        "first_read_ns",
        "future",
        "headers_done",
        "http_status",
        "interp",
        "last_read_ns",
        "location",
        "mode",
        "raw_body",
        "reason",
        "saw_done",
        "sent_ns",
        "stale",
        "unverified",
        "user_stamps",
    )

    def __init__(
        self,
        future: asyncio.Future[None],
        interp: StreamInterpreter | None,
        body_limit: int = _ERROR_BODY_MAX,
    ) -> None:
        self.future = future
        self.interp = interp  # None: a plain (non-streaming) request such as GET /models
        self.mode: Literal["sse", "body"] = "sse" if interp is not None else "body"
        self.sent_ns: int | None = None
        self.first_read_ns: int | None = None
        self.last_read_ns: int | None = None
        self.bytes_in = 0
        self.headers_done = False
        self.http_status: int | None = None
        self.reason = ""
        self.raw_body = bytearray()  # body kept for non-SSE answers (errors, /models)
        self.content_type = b""
        self.location = ""  # a redirect's Location header, for the error line
        # a plain body (GET /models) beyond this is a failure, not a memory blow-up
        self.body_limit = body_limit
        self.done_ns: int | None = None  # stamp of the read that ended it, or when it failed
        self.error_body = False
        self.saw_done = False
        self.user_stamps = False
        # its answer came on a reused connection where ids could not show it was not an
        # earlier request's (``Connection._check_not_stale``)
        self.unverified = False
        self.stale = False  # refused: its answer repeated the previous answer's id
        self.error_kind: ErrorKind | None = None
        self.error_message: str | None = None

    @property
    def finished(self) -> bool:
        return self.future.done()


class AnswerIds:
    """Whether this server gives each answer its own id, shared by a pool's connections.

    A repeated id means a stale answer only where ids are known to differ per answer: some
    servers and proxies send one constant id (or none) on every answer, and there a repeat
    is every healthy answer. Until two different ids have been seen, no answer is refused."""

    __slots__ = ("first", "vary")

    def __init__(self) -> None:
        self.first: str | None = None
        self.vary = False

    def saw(self, rid: str) -> None:
        if self.first is None:
            self.first = rid
        elif rid != self.first:
            self.vary = True


class Connection:
    """A socket plus its HTTP parser state; ``Pool`` owns it between exchanges."""

    __slots__ = (
        "_ex",
        "_framed",
        "_ids",
        "_in_bio",
        "_interp",
        "_kernel",
        "_loop",
        "_message_complete",
        "_offset",
        "_on_closed",
        "_on_idle",
        "_out_bio",
        "_parser",
        "_rbuf",
        "_read_no",
        "_rview",
        "_sse",
        "_ssl",
        "_stamp",
        "_wbuf",
        "_write_done",
        "closed",
        "exchanges",
        "fd",
        "last_response_id",
        "sock",
        "stray",
        "stray_id",
        "suspects",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        *,
        kernel_stamps: bool,
        offset: RealtimeOffset,
        on_idle: Callable[[Connection], None],
        on_closed: Callable[[Connection], None],
        rbuf: memoryview,
        ids: AnswerIds | None = None,
    ) -> None:
        self._loop = loop
        self._ids = ids if ids is not None else AnswerIds()
        self.sock = sock
        self.fd = sock.fileno()
        self._kernel = kernel_stamps
        self._offset = offset
        self._on_idle = on_idle  # an exchange ended and the connection can be reused
        self._on_closed = on_closed  # called once, when the socket is closed
        self._ssl: ssl.SSLObject | None = None
        self._in_bio: ssl.MemoryBIO | None = None
        self._out_bio: ssl.MemoryBIO | None = None
        self._ex: Exchange | None = None
        self._interp: StreamInterpreter | None = None
        self._sse: SSEParser | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._read_no = 0
        self._rbuf = [rbuf]
        self._rview = rbuf
        self._stamp = 0
        self._message_complete = False
        self._framed = False  # the answer has Content-Length or chunked encoding
        self._wbuf = bytearray()
        self._write_done: Callable[[int], None] | None = None
        self.closed = False
        self.stray = False  # closed because an answer came with no request outstanding
        self.last_response_id: str | None = None  # the previous answer's id on this socket
        self.exchanges = 0
        # records of answers taken here that ids could not verify: if an answer nobody asked
        # for shows up on this socket later, one of them may have taken an earlier one's
        self.suspects: deque[RequestRecord] = deque(maxlen=_SUSPECTS_MAX)
        self.stray_id: str | None = None  # the id an answer nobody asked for carried, if seen

    # ------------------------------------------------------------------ setup
    @classmethod
    async def open(
        cls,
        loop: asyncio.AbstractEventLoop,
        addr: tuple[int, tuple[object, ...]],
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
        kernel_stamps: bool,
        offset: RealtimeOffset,
        on_idle: Callable[[Connection], None],
        on_closed: Callable[[Connection], None],
        rbuf: memoryview,
        ids: AnswerIds | None = None,
    ) -> Connection:
        family, sockaddr = addr
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kernel = kernel_stamps and enable_kernel_stamps(sock)
            await loop.sock_connect(sock, sockaddr)
            conn = cls(
                loop,
                sock,
                kernel_stamps=kernel,
                offset=offset,
                on_idle=on_idle,
                on_closed=on_closed,
                rbuf=rbuf,
                ids=ids,
            )
            if ssl_context is not None:
                await conn._handshake(ssl_context, server_hostname)
        except BaseException:
            sock.close()
            raise
        loop.add_reader(conn.fd, conn._on_readable)
        return conn

    async def _handshake(self, ctx: ssl.SSLContext, server_hostname: str | None) -> None:
        self._in_bio = ssl.MemoryBIO()
        self._out_bio = ssl.MemoryBIO()
        sslobj = ctx.wrap_bio(self._in_bio, self._out_bio, server_hostname=server_hostname)
        loop = self._loop
        while True:
            try:
                sslobj.do_handshake()
                break
            except ssl.SSLWantReadError:
                out = self._out_bio.read()
                if out:
                    await loop.sock_sendall(self.sock, out)
                data = await loop.sock_recv(self.sock, 65536)
                if not data:
                    raise ConnectionResetError(
                        "connection closed during the TLS handshake"
                    ) from None
                self._in_bio.write(data)
        out = self._out_bio.read()
        if out:
            await loop.sock_sendall(self.sock, out)
        self._ssl = sslobj

    # ------------------------------------------------------------------ exchange
    def start(
        self, ex: Exchange, request: bytes, on_sent: Callable[[], None] | None = None
    ) -> None:
        """Send ``request`` and route the answer into ``ex``; ``ex.sent_ns`` is the stamp taken
        just before the ``send()`` call that handed the last request byte to the kernel (taken
        after it, a server answering within the call's own time gave a negative TTFT)."""
        self._ex = ex
        self._interp = ex.interp
        self._sse = SSEParser() if ex.interp is not None else None
        self._parser = httptools.HttpResponseParser(self)
        self._message_complete = False
        self._framed = False
        self.exchanges += 1

        def sent(stamp: int) -> None:
            ex.sent_ns = stamp
            if on_sent is not None:
                on_sent()

        if self._ssl is not None:
            self._ssl.write(request)
            assert self._out_bio is not None
            request = self._out_bio.read()
        self._write(request, sent)

    def _write(self, data: bytes, done: Callable[[int], None] | None) -> None:
        if self._wbuf:
            self._wbuf += data
        else:
            stamp = _perf()
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._fail("connect", f"sending the request failed: {_oserror(exc)}")
                return
            if n == len(data):
                if done is not None:
                    done(stamp)
                return
            self._wbuf += data[n:]
            self._loop.add_writer(self.fd, self._on_writable)
        if done is not None:
            self._write_done = done

    def _on_writable(self) -> None:
        stamp = _perf()
        try:
            n = self.sock.send(self._wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._loop.remove_writer(self.fd)
            self._fail("connect", f"sending the request failed: {_oserror(exc)}")
            return
        del self._wbuf[:n]
        if not self._wbuf:
            self._loop.remove_writer(self.fd)
            done, self._write_done = self._write_done, None
            if done is not None:
                done(stamp)

    # ------------------------------------------------------------------ the read path
    def _on_readable(self) -> None:
        try:
            n, anc, _flags, _addr = self.sock.recvmsg_into(self._rbuf, ANC_BUFSIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._on_eof(_perf(), exc)
            return
        # recvmsg(size) would allocate `size` bytes per call (an mmap at 256 KiB); reading into
        # one shared buffer and copying out what arrived costs a tenth of that
        data = self._rview[:n].tobytes()
        if anc and anc[0][1] == SCM_TIMESTAMPNS:
            sec, nsec = _unpack(anc[0][2])
            ex = self._ex
            first = ex.sent_ns if ex is not None and ex.first_read_ns is None else None
            stamp = self._offset.to_monotonic(sec * 1_000_000_000 + nsec, _perf(), first)
        else:
            stamp = _perf()
            ex = self._ex
            if ex is not None and data:
                ex.user_stamps = True
        if not data:
            self._on_eof(stamp, None)
            return
        if self._ssl is not None:
            data = self._decrypt(data, stamp)
            if not data:
                return
        ex = self._ex
        if ex is None or self._message_complete:
            # bytes while idle or after a complete answer: a late or extra answer
            self._stray_seen(data, plain=True)
            self.close()
            return
        self._stamp = stamp
        self._read_no += 1
        if ex.first_read_ns is None:
            ex.first_read_ns = stamp
        ex.last_read_ns = stamp
        ex.bytes_in += len(data)
        parser = self._parser
        assert parser is not None
        try:
            parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__ or exc
            if isinstance(cause, SSEError):
                self._fail("protocol", str(cause))
            else:
                raise
        except httptools.HttpParserError as exc:
            self._fail("protocol", shorten(f"malformed HTTP response: {exc}"))
        if self.stray:
            # a second answer to one request (a late or duplicated response): the next request
            # on this socket would read it as its own, so the socket goes
            self.close()

    def _decrypt(self, data: bytes, stamp: int) -> bytes:
        assert self._in_bio is not None and self._ssl is not None and self._out_bio is not None
        self._in_bio.write(data)
        parts: list[bytes] = []
        eof = False
        while True:
            try:
                chunk = self._ssl.read(RECV_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                eof = True
                break
            except ssl.SSLError as exc:
                self._fail("protocol", shorten(f"TLS error: {exc}"))
                return b""
            if not chunk:
                eof = True
                break
            parts.append(chunk)
        out = self._out_bio.read()  # e.g. a TLS 1.3 key update answer
        if out:
            self._write(out, None)
        plain = b"".join(parts)
        if eof:
            if plain:
                self._feed_plain_then_eof(plain, stamp)
                return b""
            self._on_eof(stamp, None)
            return b""
        return plain

    def _feed_plain_then_eof(self, plain: bytes, stamp: int) -> None:
        ex = self._ex
        if ex is not None and self._parser is not None and not self._message_complete:
            self._stamp = stamp
            self._read_no += 1
            ex.last_read_ns = stamp
            ex.bytes_in += len(plain)
            try:
                self._parser.feed_data(plain)
            except httptools.HttpParserError as exc:
                self._fail("protocol", shorten(f"malformed HTTP response: {exc}"))
                return
        self._on_eof(stamp, None)

    # httptools callbacks -------------------------------------------------
    def on_message_begin(self) -> None:
        if self._ex is None or self._message_complete:
            self.stray = True

    def on_header(self, name: bytes, value: bytes) -> None:
        ex = self._ex
        if ex is None:
            return
        lname = name.lower()
        if lname == b"content-type":
            ex.content_type = value.lower()
            if ex.interp is not None and not ex.content_type.startswith(b"text/event-stream"):
                ex.mode = "body"  # a streaming request answered with something else
        elif lname == b"location":
            ex.location = value.decode("latin-1")
        elif lname == b"content-length" or (
            lname == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self._framed = True

    def on_headers_complete(self) -> None:
        ex = self._ex
        parser = self._parser
        if ex is None or parser is None:
            return
        status = parser.get_status_code()
        ex.http_status = status
        ex.headers_done = True
        if not 200 <= status < 300:
            ex.mode = "body"
            ex.error_body = True

    def on_body(self, body: bytes) -> None:
        ex = self._ex
        if ex is None:
            if self.stray and self.stray_id is None:
                self.stray_id = _first_id(body)  # a second answer in the same read
            return
        if ex.mode == "body":
            if len(ex.raw_body) + len(body) <= ex.body_limit:
                ex.raw_body += body
            elif ex.interp is None and not ex.future.done():
                self._fail("protocol", f"answer larger than {ex.body_limit} bytes")
            return
        sse = self._sse
        interp = self._interp
        if sse is None or interp is None or ex.future.done():
            return
        events = sse.feed(body)
        if not events:
            return
        stamp = self._stamp
        read_no = self._read_no
        pp = interp.pending_payloads
        ps = interp.pending_stamps
        pr = interp.pending_reads
        for ev in events:
            if ev == DONE:
                ex.saw_done = True
                self._check_not_stale(ex, interp)
                self._settle(ex)
                return
            pp.append(ev)
            ps.append(stamp)
            pr.append(read_no)
        if len(pp) >= _FLUSH_EVERY:
            interp.flush()

    def on_message_complete(self) -> None:
        self._message_complete = True
        ex = self._ex
        if ex is None:
            return
        if not ex.future.done():
            self._finish_message(ex, self._stamp)
        self._release()

    # ------------------------------------------------------------------ endings
    def _finish_message(self, ex: Exchange, stamp: int) -> None:
        """The whole HTTP body arrived (or the server closed a read-until-close body)."""
        body = bytes(ex.raw_body)
        if ex.error_body:
            ex.error_kind = "http_status"
            ex.error_message = message_from_body(ex.http_status or 0, "", body, ex.location)
        elif ex.mode == "body" and ex.interp is not None:
            try:
                msg = error_of(orjson.loads(body))
            except orjson.JSONDecodeError:
                msg = None
            if msg is not None:
                ex.error_kind = "stream_error"
                ex.error_message = shorten(msg)
            else:
                ctype = ex.content_type.decode("latin-1") or "no Content-Type"
                ex.error_kind = "protocol"
                ex.error_message = shorten(f"expected text/event-stream, got {ctype}")
        elif self._sse is not None and self._interp is not None:
            try:
                tail = self._sse.finish()
            except SSEError as exc:
                self._fail("protocol", str(exc), stamp)
                return
            for ev in tail:
                if ev == DONE:
                    ex.saw_done = True
                    break
                self._interp.add(ev, stamp, self._read_no)
            self._check_not_stale(ex, self._interp)
        self._stamp = stamp
        self._settle(ex)

    def _check_not_stale(self, ex: Exchange, interp: StreamInterpreter) -> None:
        """An answer whose id is the previous answer's on this socket is that answer again,
        written late by the server and read as this request's: it is not this request's
        answer (its timing would be the previous one's), the socket goes (``stray``), and the
        request fails as a protocol error (a server that answers twice is broken). Only where
        the server's ids were seen to differ per answer before this one (``AnswerIds``).

        An answer on a reused socket that this cannot clear (ids not yet seen to differ, no
        id, or an earlier answer here already uncleared: a stale answer shifts every later
        one by one) is ``unverified``; the client fails it if an answer nobody asked for
        shows up on this socket later (``StreamClient``)."""
        interp.flush()
        rid = interp.response_id
        vary_before = self._ids.vary
        if rid is not None:
            self._ids.saw(rid)
        if rid is not None and rid == self.last_response_id and self._ids.vary:
            self.stray = True
            self.stray_id = rid
            ex.stale = True
            ex.error_kind = "protocol"
            ex.error_message = shorten(
                f"stale answer: the previous request's response (id {rid}) arrived as this "
                "one's on a reused connection"
            )
            return
        if rid is not None:
            self.last_response_id = rid
        if self.exchanges > 1 and (not vary_before or rid is None or self.suspects):
            ex.unverified = True

    def _settle(self, ex: Exchange) -> None:
        if not ex.future.done():
            ex.done_ns = self._stamp
            ex.future.set_result(None)

    def _fail(self, kind: ErrorKind, message: str, stamp: int | None = None) -> None:
        ex = self._ex
        if ex is not None and not ex.future.done():
            ex.error_kind = kind
            ex.error_message = message
            ex.done_ns = stamp if stamp is not None else _perf()
            ex.future.set_result(None)
        self.close()

    def _on_eof(self, stamp: int, exc: OSError | None) -> None:
        ex = self._ex
        if ex is None or ex.future.done():
            self.close()
            return
        if exc is None and ex.headers_done and not self._framed:
            # no Content-Length, not chunked: the body ends when the server closes
            self._message_complete = True
            self._finish_message(ex, stamp)
            self.close()
            return
        if exc is None and ex.headers_done and ex.mode == "sse":
            # a clean close inside a framed 200 stream: cut short, not a transport failure
            self._fail("truncated", "connection closed before the stream's framing ended", stamp)
            return
        how = "reset" if exc is not None else "closed"
        detail = f": {_oserror(exc)}" if exc is not None else ""
        where = "before the answer" if not ex.headers_done else "before the stream ended"
        self._fail("reset", f"connection {how} {where}{detail}", stamp)

    def _release(self) -> None:
        """The HTTP answer is complete: hand the connection back for reuse, or close it."""
        parser = self._parser
        ex = self._ex
        reusable = (
            parser is not None
            and parser.should_keep_alive()
            and not self._wbuf
            and not self.closed
            and ex is not None
            and ex.future.done()
            and ex.error_kind not in ("timeout_first_token", "stall", "timeout_total")
            and not self.stray
        )  # an error answer that ended cleanly (HTTP 4xx/5xx, in-band error) leaves it usable
        self._ex = None
        self._interp = None
        self._sse = None
        self._parser = None
        if reusable:
            self._on_idle(self)
        else:
            self.close()

    def holds(self, ex: Exchange) -> bool:
        return self._ex is ex

    def stale(self) -> bool:
        """Whether an idle connection has unread bytes (a late answer) or was closed by the
        server; either way it must not carry the next request."""
        try:
            data = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        if data:
            with contextlib.suppress(OSError):  # an answer nobody asked for is waiting
                data = self.sock.recv(_STRAY_PEEK, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            self._stray_seen(data, plain=self._ssl is None)
        return True

    def _stray_seen(self, data: bytes, *, plain: bool) -> None:
        """An answer nobody asked for: note it and the id it carries (``plain``: ``data`` is
        the answer's bytes, not TLS records)."""
        self.stray = True
        if self.stray_id is None and plain:
            self.stray_id = _first_id(data)

    def verified_by_stray(self, ids_vary: bool) -> bool:
        """Whether the answer nobody asked for shows that the answers taken here were each
        request's own: it repeats the last answer's id, where ids differ per answer, so it is
        a late copy of that answer and no answer here was shifted onto a later request."""
        return ids_vary and self.stray_id is not None and self.stray_id == self.last_response_id

    def has_unread(self) -> bool:
        """Whether bytes (or the peer's close) wait on the socket, not yet read by the loop
        (one non-blocking peek; an error counts as waiting: the loop will read it)."""
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True

    def abandon(self) -> None:
        """The waiting side gave up (timeout, cancel): the stream cannot continue on this socket."""
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        loop = self._loop
        with contextlib.suppress(ValueError, OSError, RuntimeError):
            loop.remove_reader(self.fd)
            if self._wbuf:
                loop.remove_writer(self.fd)
        self._wbuf.clear()
        with contextlib.suppress(OSError):
            self.sock.close()
        ex = self._ex
        self._ex = None
        if ex is not None and not ex.future.done():
            ex.error_kind = ex.error_kind or "reset"
            ex.error_message = ex.error_message or "connection closed"
            ex.done_ns = _perf()
            ex.future.set_result(None)
        self._on_closed(self)


def _oserror(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{name} ({exc.strerror})" if exc.strerror else name
    return str(exc) or type(exc).__name__
