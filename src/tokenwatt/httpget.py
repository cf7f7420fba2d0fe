"""The one blocking HTTP GET of the scraping threads, bounded in total time and in bytes, with
its guards.

Why bounded: urllib's ``timeout`` bounds each socket operation, not the request. A server that
trickles one byte a second never trips it, and a scrape that waits on it holds the thread
that a probe's start and end wait for (and, at interpreter exit, the executor that Ctrl-C
waits for). Here a timer shuts the request's socket down at the deadline, whatever phase it
is in (status line, headers, body), so the GET returns within ``timeout_s`` plus one socket
operation; the body is read in pieces and refused past ``max_bytes``, never buffered whole.

Why the guards (``get``): redirects are followed only within the same origin (scheme, host
and port), since urllib would otherwise replay the ``Authorization`` header, a BMC's login, to
whatever host a redirect names, even from https to plain http; a loopback URL never goes
through a proxy; every failure is one ``HttpError`` whose reason never carries credentials.

Used by the engine's ``/metrics`` scrape and the power sources' HTTP (Redfish, Prometheus),
through ``tokenwatt.promscrape`` for Prometheus pages, and the sweep's health checks. A URL's
``user:password@`` is sent as basic auth (every one of those surfaces accepts such a URL) and
never appears in a message; imports only ``tokenwatt.spec``'s redaction, so ``engine`` and
``power`` may both use it.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from http.client import HTTPMessage
from typing import IO, Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from tokenwatt.spec import redact_text

__all__ = [
    "MAX_BODY_BYTES",
    "BoundError",
    "HttpError",
    "basic_auth",
    "get",
    "get_bounded",
    "split_credentials",
]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# a metrics page or a Redfish document is kilobytes (dcgm-exporter on 8 GPUs: ~100 KB); a
# scraping thread must not buffer whatever a misbehaving endpoint sends
MAX_BODY_BYTES = 16 << 20

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


class HttpError(Exception):
    """The URL did not answer, or answered with an error status."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


def basic_auth(user: str, password: str) -> str:
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    default = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), parts.port or default


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to the same origin; anywhere else is a one-line error."""

    def redirect_request(  # noqa: PLR0917 (urllib's signature)
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        target = urljoin(req.full_url, newurl)
        if _origin(target) != _origin(req.full_url):
            raise HttpError(
                f"HTTP {code}: redirects to {redact_text(target)}, another origin, where "
                "credentials are never sent; use that URL in the spec if you trust it",
                status=code,
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _handlers(url: str) -> list[urllib.request.BaseHandler]:
    handlers: list[urllib.request.BaseHandler] = [_SameOriginRedirects()]
    if (urlsplit(url).hostname or "") in _LOOPBACK:
        handlers.append(urllib.request.ProxyHandler({}))  # never send loopback via a proxy
    return handlers


def _context(url: str, verify_tls: bool) -> ssl.SSLContext | None:
    if not url.startswith("https://"):
        return None
    ctx = ssl.create_default_context()
    if not verify_tls:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@`` and the basic-auth header value it stood for
    (None without userinfo). urllib would send the userinfo as part of the host name and fail
    as "Name or service not known"; percent-escapes in it are decoded, as RFC 3986 says."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    bare = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return bare, basic_auth(unquote(user), unquote(password))


def get(
    url: str,
    *,
    timeout_s: float,
    max_bytes: int | None = None,
    headers: dict[str, str] | None = None,
    verify_tls: bool = True,
) -> bytes:
    """GET ``url`` with the guards (module doc) and return the body; raise ``HttpError`` on
    anything but a complete 2xx answer within ``timeout_s`` (the whole answer, not each socket
    read) and ``max_bytes`` (default ``MAX_BODY_BYTES``). A ``user:password@`` in the URL is
    sent as HTTP basic auth, unless ``headers`` already hold an ``Authorization``."""
    url, auth = split_credentials(url)
    if auth is not None and not any(k.lower() == "authorization" for k in headers or {}):
        headers = {**(headers or {}), "Authorization": auth}
    try:
        return get_bounded(
            url,
            timeout_s=timeout_s,
            max_bytes=MAX_BODY_BYTES if max_bytes is None else max_bytes,
            headers=headers,
            handlers=_handlers(url),
            ssl_context=_context(url, verify_tls),
        )
    except urllib.error.HTTPError as exc:
        raise HttpError(f"HTTP {exc.code} {exc.reason}", status=exc.code) from None
    except BoundError as exc:
        raise HttpError(str(exc)) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = getattr(reason, "strerror", None) or str(reason)
        raise HttpError(redact_text(text)) from None
    except TimeoutError:
        raise HttpError(f"no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise HttpError(redact_text(exc.strerror or str(exc))) from None
