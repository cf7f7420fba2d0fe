"""One blocking HTTP GET bounded in total time and in bytes, for the scraping threads.

Why: urllib's ``timeout`` bounds each socket operation, not the request. A server that
trickles one byte a second never trips it, and a scrape that waits on it holds the thread
that a probe's start and end wait for (and, at interpreter exit, the executor that Ctrl-C
waits for). Here a timer shuts the request's socket down at the deadline, whatever phase it
is in (status line, headers, body), so the GET returns within ``timeout_s`` plus one socket
operation; the body is read in pieces and refused past ``max_bytes``, never buffered whole.

Used by the engine's ``/metrics`` scrape and the power sources' HTTP (Redfish, Prometheus);
imports nothing of tokenwatt, so both may use it.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import urllib.request
from collections.abc import Sequence
from typing import Any

__all__ = ["BoundError", "get_bounded"]

_PIECE_BYTES = 1 << 16


class BoundError(OSError):
    """The answer did not complete within the time bound, or was larger than the byte bound."""


class _Watch:
    """The sockets of one GET; ``expire`` (the deadline) and ``close`` shut them down, so a
    blocked recv returns at once."""

    def __init__(self) -> None:
        self.socks: list[socket.socket] = []
        self.expired = False
        self._closed = False
        self._lock = threading.Lock()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self.socks.append(sock)
            closed = self._closed
        if closed:
            _shut(sock)

    def expire(self) -> None:
        self.expired = True
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = list(self.socks)
        for sock in socks:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _watched(base: type[http.client.HTTPConnection], watch: _Watch) -> Any:
    class Watched(base):  # type: ignore[valid-type,misc]
        def connect(self) -> None:
            super().connect()
            watch.add(self.sock)

    return Watched


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self._cls = _watched(http.client.HTTPConnection, watch)

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._cls, req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, watch: _Watch, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self._cls = _watched(http.client.HTTPSConnection, watch)
        self._ctx = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._cls, req, context=self._ctx)


def get_bounded(
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
    handlers: Sequence[urllib.request.BaseHandler] = (),
    ssl_context: ssl.SSLContext | None = None,
) -> bytes:
    """The body of ``GET url``, complete within ``timeout_s`` and at most ``max_bytes`` long.

    Raises ``BoundError`` (an OSError) past either bound, urllib's ``HTTPError`` for a
    non-2xx answer and ``URLError``/``OSError`` for anything else, as ``urlopen`` does.
    ``handlers`` go to the opener (proxy choice, redirect policy); HTTP and HTTPS are opened
    by this module's own handlers so that the deadline reaches their sockets.
    """
    watch = _Watch()
    opener = urllib.request.build_opener(*handlers, _HTTP(watch), _HTTPS(watch, ssl_context))
    timer = threading.Timer(timeout_s, watch.expire)
    timer.daemon = True
    timer.start()
    late = BoundError(f"no complete answer within {timeout_s:g} s")
    body = bytearray()
    try:
        req = urllib.request.Request(url, headers=headers or {}, method="GET")
        with opener.open(req, timeout=timeout_s) as resp:
            while len(body) <= max_bytes and (piece := resp.read(_PIECE_BYTES)):
                body += piece
    except OSError as exc:
        # a socket's own timeout (the same number) may fire first: the same bound, one message
        timed_out = isinstance(exc, TimeoutError) or isinstance(
            getattr(exc, "reason", None), TimeoutError
        )
        if watch.expired or timed_out:
            raise late from None
        raise
    except http.client.HTTPException as exc:  # a cut answer reads as IncompleteRead
        if watch.expired:
            raise late from None
        raise BoundError(f"broken answer ({type(exc).__name__})") from None
    finally:
        timer.cancel()
        watch.close()  # no socket of this GET outlives it
    if watch.expired:  # the deadline cut an answer without a length: it looked complete
        raise late
    if len(body) > max_bytes:
        raise BoundError(f"answer larger than {max_bytes} bytes")
    return bytes(body)
