"""A small blocking HTTP GET for the scraping threads (urllib: the threads have no event loop).

Failures come back as ``HttpError`` with a short reason that never contains credentials.
"""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

__all__ = ["HttpError", "basic_auth", "get", "safe_url"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class HttpError(Exception):
    """The URL did not answer, or answered with an error status."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


def safe_url(url: str) -> str:
    """The URL with any user:password@ removed, for messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def basic_auth(user: str, password: str) -> str:
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def _opener(url: str, verify_tls: bool) -> urllib.request.OpenerDirector:
    handlers: list[urllib.request.BaseHandler] = []
    if (urlsplit(url).hostname or "") in _LOOPBACK:
        handlers.append(urllib.request.ProxyHandler({}))  # never send loopback via a proxy
    if url.startswith("https://"):
        ctx = ssl.create_default_context()
        if not verify_tls:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    return urllib.request.build_opener(*handlers)


def get(
    url: str,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    verify_tls: bool = True,
) -> bytes:
    """GET ``url`` and return the body; raise ``HttpError`` on anything but a 2xx answer."""
    req = urllib.request.Request(url, headers=headers or {}, method="GET")
    try:
        with _opener(url, verify_tls).open(req, timeout=timeout_s) as resp:
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as exc:
        raise HttpError(f"HTTP {exc.code} {exc.reason}", status=exc.code) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = getattr(reason, "strerror", None) or str(reason)
        raise HttpError(text) from None
    except TimeoutError:
        raise HttpError(f"no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise HttpError(exc.strerror or str(exc)) from None
