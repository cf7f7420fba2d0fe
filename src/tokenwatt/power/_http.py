"""A small blocking HTTP GET for the scraping threads (urllib: the threads have no event loop).

Failures come back as ``HttpError`` with a short reason that never contains credentials.
Redirects are followed only within the same origin (scheme, host and port): urllib would
otherwise replay the ``Authorization`` header, a BMC's login, to whatever host a redirect names,
even from https to plain http.
"""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from http.client import HTTPMessage
from typing import IO
from urllib.parse import urljoin, urlsplit

from tokenwatt.httpget import BoundError, get_bounded
from tokenwatt.spec import redact_text

__all__ = ["HttpError", "basic_auth", "get", "safe_url"]

# the one redaction of free text (tokenwatt.spec), under the name the power sources use
safe_url = redact_text

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# a metrics page or a Redfish document is kilobytes (dcgm-exporter on 8 GPUs: ~100 KB); a
# scraping thread must not buffer whatever a misbehaving endpoint sends
MAX_BODY_BYTES = 16 << 20


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


def get(
    url: str,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    verify_tls: bool = True,
) -> bytes:
    """GET ``url`` and return the body; raise ``HttpError`` on anything but a 2xx answer.

    ``timeout_s`` bounds the whole answer, not each socket read (``tokenwatt.httpget``)."""
    try:
        return get_bounded(
            url,
            timeout_s=timeout_s,
            max_bytes=MAX_BODY_BYTES,
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
