"""``StreamClient``: one OpenAI-compatible endpoint, streamed requests in, ``RequestRecord`` out.

No policy: the caller decides what to send and when (``load``); this module sends it, times it
and reports what happened. Every per-request failure ends up in the record, never as an exception;
only cancellation propagates (after the record is filled, so Ctrl-C keeps what was measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import ssl
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from tokenwatt.client.conn import RECV_SIZE, AnswerIds, Connection, Exchange, _oserror
from tokenwatt.client.openai import (
    PATHS,
    Api,
    EventHook,
    Prompt,
    StreamInterpreter,
    build_body,
    drop_counts,
    is_messages,
    model_ids,
    sent_token_limit,
    shorten,
)
from tokenwatt.client.stamps import (
    RealtimeOffset,
    open_stamp_holder,
    take_clock_info,
    with_drift,
)
from tokenwatt.clock import ClientClock
from tokenwatt.errors import SpecError, TargetError
from tokenwatt.records import ErrorKind, RequestRecord
from tokenwatt.spec import redact_text
from tokenwatt.spec.endpoint import Timeouts

_perf = time.perf_counter_ns
_NS = 1_000_000_000
_DRAIN_GRACE_S = 2.0  # after [DONE], how long the terminating HTTP chunk may take
# GET /models is a start-up check: a short wait and a small answer, whatever the run's timeouts
MODELS_TIMEOUT_S = 10.0
MODELS_MAX_BYTES = 1 << 20


class _ConnectError(Exception):
    pass


class StreamClient:
    """Streams completions from one base URL (which includes ``/v1``) over its own sockets.

    Connections are kept alive and reused when the server allows it, up to ``max_connections``
    open at once (further requests wait for one; that wait counts as send lateness, not TTFT).
    ``kernel_timestamps``: None uses kernel receive stamps where the host provides them, False
    forces user-space stamps. ``event_hook(event, stamp_ns)`` sees every decoded SSE event
    (benchmarks, tests); ``ssl_context`` replaces the default verifying context for https.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api: Literal["completions", "chat"],
        model: str,
        api_key: str | None = None,
        timeouts: Timeouts,
        extra_body: Mapping[str, Any] | None = None,
        stream_usage: bool = True,
        max_connections: int = 4096,
        kernel_timestamps: bool | None = None,
        ssl_context: ssl.SSLContext | None = None,
        event_hook: EventHook | None = None,
    ) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpecError(
                f"endpoint.url: {redact_text(base_url)[:200]!r} is not an http(s) URL; "
                "use e.g. http://127.0.0.1:8000/v1"
            )
        if api not in PATHS:
            raise SpecError(f"endpoint.api: {api!r} is not one of completions, chat")
        if max_connections < 1:
            raise SpecError("max_connections: must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.safe_url = redact_text(self.base_url)  # for every printed line and log
        self._secrets = (api_key, parts.password)  # literal values no message may carry
        self.api: Api = api
        self.model = model
        self.timeouts = timeouts
        self.extra_body = dict(extra_body or {})
        self.stream_usage = stream_usage
        self.max_connections = max_connections
        self._api_key = api_key or None
        self._hook = event_hook
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path  # e.g. /v1
        host_header = parts.netloc.rpartition("@")[2]
        self._ssl_context: ssl.SSLContext | None = None
        if self._tls:
            self._ssl_context = ssl_context or ssl.create_default_context()
        head = [f"Host: {host_header}", "User-Agent: tokenwatt", "Accept: text/event-stream"]
        if self._api_key:
            head.append(f"Authorization: Bearer {self._api_key}")
        self._common_head = ("\r\n".join(head) + "\r\n").encode("latin-1")
        self._post_line = f"POST {self._prefix}{PATHS[api]} HTTP/1.1\r\n".encode("latin-1")
        # holds host-wide receive stamping on (see open_stamp_holder); None: user stamps
        self._stamp_holder = open_stamp_holder() if kernel_timestamps is not False else None
        self._clock = take_clock_info(kernel=self._stamp_holder is not None)
        self._offset = RealtimeOffset(self._clock.realtime_minus_monotonic_ns)
        self._kernel = self._clock.timestamp_source == "kernel"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._addr: tuple[int, tuple[Any, ...]] | None = None
        self._idle: deque[Connection] = deque()
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._rbuf = memoryview(bytearray(RECV_SIZE))  # shared: reads never overlap in a loop
        self._ids = AnswerIds()  # whether the server's answer ids differ (stale-answer check)
        # streams on the wire, by request id: what ``late_first_tokens`` reads at a probe's poll
        self._live: dict[int, tuple[Exchange, Connection]] = {}
        self.connections_opened = 0
        self.connections_reused = 0
        # connections closed because an answer arrived with no request outstanding on them
        self.stray_answers = 0
        _raise_nofile(max_connections + 64)

    # ------------------------------------------------------------------ public
    @property
    def clock(self) -> ClientClock:
        """How receive timestamps are taken (kernel or user), the realtime→monotonic offset,
        and the realtime clock's steps seen so far (each one measured the offset again)."""
        return self._clock.model_copy(update={"realtime_steps": self._offset.steps})

    async def stream(
        self,
        *,
        request_id: int,
        scheduled_ns: int,
        prompt: Prompt,
        max_tokens: int,
        prompt_tokens_client: int,
        ignore_eos: bool = True,
        record: RequestRecord | None = None,
        graded: bool = False,
    ) -> RequestRecord:
        """Send one streaming request and return its record (failures included, never raised).

        A chat history (``prompt`` a list of role/content dicts) is sent as ``messages`` and
        the answer's text is kept on ``record.answer_text`` (the next turn resends it). A
        ``graded`` request is sent greedy (``temperature: 0``) and its text is kept too, for
        the grader to read once the stream has ended.

        On cancellation the record is filled (``error_kind="cancelled"``, with whatever arrived)
        before CancelledError propagates; pass ``record`` to keep a reference to it.
        """
        source: Literal["kernel", "user"] = "kernel" if self._kernel else "user"
        if record is None:
            rec = RequestRecord(
                request_id=request_id,
                scheduled_ns=scheduled_ns,
                prompt_tokens_client=prompt_tokens_client,
                max_tokens=max_tokens,
                timestamp_source=source,
            )
        else:
            rec = record
            rec.request_id = request_id
            rec.scheduled_ns = scheduled_ns
            rec.prompt_tokens_client = prompt_tokens_client
            rec.max_tokens = max_tokens
            rec.timestamp_source = source
        fields = build_body(
            api=self.api,
            model=self.model,
            prompt=prompt,
            max_tokens=max_tokens,
            stream_usage=self.stream_usage,
            ignore_eos=ignore_eos,
            extra_body=self.extra_body,
        )
        if graded:
            fields["temperature"] = 0
        exact = bool(fields.get("ignore_eos")) and fields.get("max_tokens") == max_tokens
        limit = sent_token_limit(fields)
        request = self._post_request(orjson.dumps(fields))
        t0 = _perf()
        fresh = False
        keep_text = graded or is_messages(prompt)
        for attempt in range(2):
            interp = StreamInterpreter(
                self.api, self._hook, collect_text=keep_text, max_tokens=limit
            )
            ex = Exchange(self._get_loop().create_future(), interp)
            conn = await self._exchange(rec, ex, request, t0, fresh=fresh)
            if conn is None:
                return rec  # connect failure, recorded
            if (
                attempt == 0
                and rec.connection_reused
                and ex.bytes_in == 0
                and ex.error_kind in ("reset", "connect")
            ):
                # a kept-alive connection the server had already closed: once more on a new one
                fresh = True
                continue
            break
        assert conn is not None  # (a failed connect returned above)
        self._finish_record(rec, ex)
        _judge_end(rec, exact_length=exact)
        self._judge_stale(rec, ex, conn)
        return rec

    def _judge_stale(self, rec: RequestRecord, ex: Exchange, conn: Connection) -> None:
        """A refused stale answer is no figure; an answer its ids could not verify fails at
        once if an answer nobody asked for already came on its connection (and does not
        clear it), else waits on the connection's list (``_on_closed``)."""
        if ex.stale:
            drop_counts(rec)  # the previous request's answer: its tokens are no figure
        elif ex.unverified and rec.ok:
            if conn.stray:
                if not conn.verified_by_stray(self._ids.vary):
                    _fail_unverified(rec)
            elif not conn.closed:
                conn.suspects.append(rec)

    def late_first_tokens(self, limit_ns: int) -> list[int]:
        """The requests in flight whose first token is certain to come more than ``limit_ns``
        after their send: sent longer ago than that, no content chunk decoded yet, and no
        unread byte waiting on their socket. Any content still to come is then stamped after
        this call (a kernel receive stamp of bytes not yet received, or a user stamp taken
        later), so its TTFT, as ``metrics.request.ttft_s`` will read it, exceeds the limit; a
        request that fails instead is a miss of every limit. A socket with unread bytes is
        left for a later call (those bytes may hold a first token stamped in time). Read at a
        probe's poll (``load.probe``), not per chunk: the read path is untouched."""
        now = _perf()
        late: list[int] = []
        for rid, (ex, conn) in self._live.items():
            sent = ex.sent_ns
            interp = ex.interp
            if sent is None or now - sent <= limit_ns or interp is None or ex.future.done():
                continue
            if ex.first_read_ns is not None:
                interp.flush()  # headers or non-content events may have arrived
                if interp.first_ns is not None:
                    continue
            if not conn.has_unread():
                late.append(rid)
        return late

    async def list_models(self) -> list[str]:
        """GET {base_url}/models. TargetError (one line) if unreachable or not OpenAI-shaped.

        A start-up check, so it waits at most ``MODELS_TIMEOUT_S`` and reads at most
        ``MODELS_MAX_BYTES`` (a 300 MB answer once took 1.44 GB of memory).
        """
        url = f"{self.safe_url}/models"
        request = (
            f"GET {self._prefix}/models HTTP/1.1\r\n".encode("latin-1")
            + self._common_head.replace(b"Accept: text/event-stream", b"Accept: application/json")
            + b"\r\n"
        )
        rec = RequestRecord(request_id=-1, scheduled_ns=0, prompt_tokens_client=0, max_tokens=0)
        ex = Exchange(self._get_loop().create_future(), None, body_limit=MODELS_MAX_BYTES)
        t = self.timeouts
        limit = min(MODELS_TIMEOUT_S, t.total_s)
        short = Timeouts(
            connect_s=min(t.connect_s, limit), first_token_s=limit, idle_s=limit, total_s=limit
        )
        conn = await self._exchange(rec, ex, request, _perf(), fresh=False, timeouts=short)
        if conn is not None and ex.error_kind in ("timeout_first_token", "stall", "timeout_total"):
            raise TargetError(f"GET {url}: no complete answer within {limit:g} s")
        if conn is None or ex.error_kind is not None:
            if ex.error_kind == "http_status":
                raise TargetError(self._scrub(f"GET {url} answered {ex.error_message}"))
            why = rec.error_message or ex.error_message or "no answer"
            raise TargetError(self._scrub(f"cannot reach {url}: {why}"))
        try:
            return model_ids(bytes(ex.raw_body))
        except (ValueError, TypeError, AttributeError) as exc:
            raise TargetError(
                self._scrub(
                    f"{url} is not an OpenAI-compatible /models endpoint ({shorten(str(exc))}); "
                    "check that endpoint.url ends with /v1"
                )
            ) from None

    async def aclose(self) -> None:
        """Close every connection; record the clock drift over the client's life."""
        self._closed = True
        while self._idle:
            self._idle.popleft().close()
        for w in self._waiters:
            if not w.done():
                w.cancel()
        self._waiters.clear()
        self._clock = with_drift(self._clock)
        if self._stamp_holder is not None:
            self._stamp_holder.close()
            self._stamp_holder = None

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ one exchange
    def _post_request(self, body: bytes) -> bytes:
        return b"".join(
            (
                self._post_line,
                self._common_head,
                b"Content-Type: application/json\r\nContent-Length: ",
                str(len(body)).encode(),
                b"\r\n\r\n",
                body,
            )
        )

    async def _exchange(
        self,
        rec: RequestRecord,
        ex: Exchange,
        request: bytes,
        t0: int,
        *,
        fresh: bool,
        timeouts: Timeouts | None = None,
    ) -> Connection | None:
        """Run one request on a pooled or new connection; the outcome lands in ``ex``/``rec``."""
        loop = self._get_loop()
        t = timeouts or self.timeouts
        try:
            conn = await self._acquire(fresh)
            reused = conn is not None
            if conn is None:  # a slot is reserved: open a new connection
                try:
                    conn = await asyncio.wait_for(self._connect(), t.connect_s)
                except TimeoutError:
                    self._fail(rec, "connect", f"no connection within {t.connect_s:g} s", _perf())
                    return None
                except _ConnectError as exc:
                    self._fail(rec, "connect", str(exc), _perf())
                    return None
                finally:
                    if conn is None:  # failed or cancelled: give the slot back
                        self._slot_freed()
        except asyncio.CancelledError:
            self._fail(rec, "cancelled", "cancelled before the request was sent", _perf())
            raise
        rec.connection_reused = reused
        if reused:
            self.connections_reused += 1
        timer = _Timer(loop, t, ex, t0)
        live = self._live
        rid = rec.request_id
        live[rid] = (ex, conn)
        conn.start(ex, request)
        timer.arm()
        try:
            await ex.future
        except asyncio.CancelledError:
            if live.get(rid, (None,))[0] is ex:
                del live[rid]
            timer.cancel()
            conn.abandon()
            rec.sent_ns = ex.sent_ns
            self._fill_from(rec, ex)
            self._fail(rec, "cancelled", "the run was interrupted", _perf())
            raise
        if live.get(rid, (None,))[0] is ex:
            del live[rid]
        timer.cancel()
        if timer.fired is not None:
            conn.abandon()
        elif not ex.saw_done or conn.closed:
            pass
        elif conn.holds(ex):
            # [DONE] came; the HTTP body's end has not yet: give it a moment, then close
            loop.call_later(_DRAIN_GRACE_S, _drop_if_holding, conn, ex)
        rec.sent_ns = ex.sent_ns
        return conn

    def _finish_record(self, rec: RequestRecord, ex: Exchange) -> None:
        """The exchange's own failure (transport, timeout, HTTP) is the reason where there is
        one; what the stream's content shows (in-band error, bad counts) comes after it."""
        if ex.error_kind is not None and rec.status == "ok":
            rec.status = "error"
            rec.error_kind = ex.error_kind
            rec.error_message = ex.error_message or ex.error_kind
        self._fill_from(rec, ex)
        if rec.error_message is not None:
            rec.error_message = self._scrub(rec.error_message)
        if rec.done_ns is None:
            rec.done_ns = ex.done_ns if ex.done_ns is not None else _perf()

    def _fill_from(self, rec: RequestRecord, ex: Exchange) -> None:
        rec.http_status = ex.http_status
        rec.saw_done = ex.saw_done
        if ex.user_stamps:
            rec.timestamp_source = "user"
        if ex.interp is not None:
            ex.interp.fill(rec)
        rec.done_ns = ex.done_ns

    def _fail(self, rec: RequestRecord, kind: ErrorKind, message: str, now_ns: int) -> None:
        rec.status = "error"
        rec.error_kind = kind
        rec.error_message = self._scrub(message)
        rec.done_ns = now_ns

    def _scrub(self, text: str) -> str:
        return redact_text(text, self._secrets)

    # ------------------------------------------------------------------ pool
    def _get_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    async def _acquire(self, fresh: bool) -> Connection | None:
        """An idle kept-alive connection, or None after reserving a slot for a new one."""
        if self._closed:
            raise _ConnectError("the client is closed")
        while True:
            if not fresh and self._idle:
                conn = self._idle.pop()
                if conn.stale():  # a late answer waits on it, or the server closed it
                    conn.close()
                    continue
                return conn
            if self._open < self.max_connections:
                self._open += 1
                return None
            if fresh and self._idle:
                self._idle.popleft().close()  # make room for a fresh connection
                continue
            waiter = self._get_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    async def _connect(self) -> Connection:
        loop = self._get_loop()
        if self._addr is None:
            try:
                infos = await loop.getaddrinfo(
                    self._host, self._port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
            except OSError as exc:
                raise _ConnectError(f"cannot resolve {self._host}: {exc}") from None
            if not infos:
                raise _ConnectError(f"cannot resolve {self._host}")
            family, _type, _proto, _name, sockaddr = infos[0]
            self._addr = (int(family), tuple(sockaddr))
        try:
            conn = await Connection.open(
                loop,
                self._addr,
                ssl_context=self._ssl_context,
                server_hostname=self._host if self._tls else None,
                kernel_stamps=self._kernel,
                offset=self._offset,
                on_idle=self._on_idle,
                on_closed=self._on_closed,
                rbuf=self._rbuf,
                ids=self._ids,
            )
        except ssl.SSLError as exc:
            raise _ConnectError(shorten(f"TLS handshake with {self._host} failed: {exc}")) from None
        except OSError as exc:
            where = f"{self._host}:{self._port}"
            raise _ConnectError(f"cannot connect to {where}: {_oserror(exc)}") from None
        self.connections_opened += 1
        return conn

    def _on_idle(self, conn: Connection) -> None:
        """A connection finished an exchange and may be reused (called from the read path);
        after a first answer nobody asked for, none is (each request gets its own)."""
        if self._closed or self.stray_answers:
            conn.close()
            return
        self._idle.append(conn)
        self._wake_one()

    def _on_closed(self, conn: Connection) -> None:
        if conn.stray:
            self.stray_answers += 1
            while self._idle:  # from now on no connection is reused
                self._idle.popleft().close()
            if not conn.verified_by_stray(self._ids.vary):
                for rec in conn.suspects:
                    if rec.ok:
                        _fail_unverified(rec)
        conn.suspects.clear()
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
        self._slot_freed()

    def _slot_freed(self) -> None:
        self._open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return


def _judge_end(rec: RequestRecord, *, exact_length: bool) -> None:
    """Complete or failed: a stream that carried no error is ``ok`` only if it ended properly,
    with ``[DONE]`` or with a ``finish_reason`` and its HTTP framing complete (a body that ends
    without either is ``truncated``, its tokens kept). With ``ignore_eos`` and ``max_tokens``
    sent, a proper end with fewer tokens than asked is flagged ``short_output``."""
    if rec.status != "ok":
        return
    if not rec.saw_done and rec.finish_reason is None:
        rec.status = "error"
        rec.error_kind = "truncated"
        rec.error_message = (
            f"the stream ended without [DONE] or a finish_reason after {rec.output_tokens} tokens"
        )
        return
    if exact_length and rec.output_tokens < rec.max_tokens:
        rec.short_output = True


_UNVERIFIED = (
    "stale answer possible: an answer no request was waiting for came later on this "
    "request's reused connection, so the answer it took may be an earlier request's (the "
    "server's answer ids cannot tell them apart)"
)


def _fail_unverified(rec: RequestRecord) -> None:
    """A request whose answer may be an earlier one's: a protocol failure, no figure. Called
    once the record is complete, possibly after ``stream`` returned it (the record object is
    the one the run holds)."""
    rec.status = "error"
    rec.error_kind = "protocol"
    rec.error_message = _UNVERIFIED
    drop_counts(rec)


def _drop_if_holding(conn: Connection, ex: Exchange) -> None:
    if conn.holds(ex):
        conn.abandon()


class _Timer:
    """One lazily re-armed timer per request for the first-token, stall and total limits.

    Reads never touch it: when it fires it compares the latest read stamp with the limits and
    either fails the request or re-arms for the next possible deadline. A stall is therefore
    reported between idle_s and 1.5 × idle_s after the last read.
    """

    __slots__ = ("_ex", "_handle", "_loop", "_t0", "_timeouts", "fired")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, timeouts: Timeouts, ex: Exchange, t0: int
    ) -> None:
        self._loop = loop
        self._timeouts = timeouts
        self._ex = ex
        self._t0 = t0
        self._handle: asyncio.TimerHandle | None = None
        self.fired: ErrorKind | None = None

    def arm(self) -> None:
        if self._ex.future.done():
            return
        now = _perf()
        kind, deadline = self._next_deadline()
        if kind == "timeout_first_token":
            # content may arrive meanwhile; look again within idle_s/2 so that a stall after
            # it is caught within 1.5 × idle_s
            deadline = min(deadline, now + int(self._timeouts.idle_s * _NS) // 2)
        delay = max(0.0, (deadline - now) / _NS)
        self._handle = self._loop.call_later(delay + 0.0005, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _next_deadline(self) -> tuple[ErrorKind, int]:
        t = self._timeouts
        ex = self._ex
        total: tuple[ErrorKind, int] = ("timeout_total", self._t0 + int(t.total_s * _NS))
        interp = ex.interp
        first = interp.first_ns if interp is not None else None
        if first is None and interp is not None and interp.pending_payloads:
            interp.flush()
            first = interp.first_ns
        start = ex.sent_ns if ex.sent_ns is not None else self._t0
        if first is None:
            cand: tuple[ErrorKind, int] = (
                "timeout_first_token",
                start + int(t.first_token_s * _NS),
            )
        else:
            last = ex.last_read_ns if ex.last_read_ns is not None else first
            cand = ("stall", last + int(t.idle_s * _NS))
        return total if total[1] <= cand[1] else cand

    def _check(self) -> None:
        self._handle = None
        ex = self._ex
        if ex.future.done():
            return
        kind, deadline = self._next_deadline()
        now = _perf()
        if now < deadline:
            self.arm()
            return
        t = self._timeouts
        limit = {
            "timeout_total": f"no end within total_s={t.total_s:g} s",
            "timeout_first_token": f"no content within first_token_s={t.first_token_s:g} s",
            "stall": f"no bytes for idle_s={t.idle_s:g} s mid-stream",
        }[kind]
        self.fired = kind
        ex.error_kind = kind
        ex.error_message = limit
        ex.done_ns = now
        ex.future.set_result(None)


def _raise_nofile(want: int) -> None:
    """Lift the soft open-files limit toward ``want`` (one socket per concurrent stream)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ValueError, OSError):
        pass
