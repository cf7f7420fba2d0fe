"""The one redaction: what every URL, spec, message, log line and report passes through before
it is printed or written.

Why one: a secret leaks by whichever path redacts differently. A URL can carry a secret in two
places: its userinfo (``http://user:pass@host/``, which the HTTP GET turns into basic auth)
and its query (``?k=TOKEN``, ``?api_key=...``, a signed URL's ``sig=``); a query parameter's
name says nothing about whether its value is secret, so in a URL *every* query and fragment
value is replaced, the names kept (``?k=***&query=***``) so the reader still sees which URL it
was. Outside URLs, secret-looking ``name=value`` pairs, values under secret-looking keys of a
mapping, and literal secrets the caller names (an API key, a password) are replaced too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

__all__ = ["redact", "redact_text", "secrets_in"]

# Secret-looking keys: api_key, password, authorization, ...; "token" only as a whole word at
# the end (auth_token, token), never the token counts a spec is full of (input_tokens, ...).
_SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|passw(or)?d|authorization|cookie|credential|(^|[_-])token$)", re.I
)
# A URL in free text: scheme://authority, then path, query and fragment up to whitespace or a
# quote (repr, JSON and HTML attributes end a URL there).
_URL = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<authority>[^/?#\s'\"<>]*)(?P<rest>[^\s'\"<>]*)", re.I
)
# one item of a query or fragment: name=value, or a bare value (?TOKEN)
_QUERY_ITEM = re.compile(r"(?P<sep>[?&;#])(?P<name>[^=&;#]*=)?(?P<value>[^&;#]*)")
# outside URLs: secret-looking parameters such as api_key=, token=, password=, sig=, ...
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;][^=&;#\s]*(?:key|token|secret|passw(?:or)?d|auth|sig(?:nature)?|credential)"
    r"[^=&;#\s]*=)[^&;#\s]*",
    re.I,
)
_SHOWN_SECRET_MIN = 4  # shorter "secrets" would blank ordinary words
_HIDDEN = "***"
_QUERY_SECRET_MIN = 8  # a query value this long is hidden wherever it appears (secrets_in)


def _item(m: re.Match[str]) -> str:
    if not m.group("value"):
        return m.group(0)  # nothing to hide: "?", "&&", "name="
    return f"{m.group('sep')}{m.group('name') or ''}{_HIDDEN}"


def _url(m: re.Match[str]) -> str:
    authority = m.group("authority")
    if "@" in authority:  # user:password@ (to the last @: a password may hold one)
        authority = f"{_HIDDEN}@{authority.rpartition('@')[2]}"
    rest = m.group("rest")
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    rest = rest[:cut] + _QUERY_ITEM.sub(_item, rest[cut:])
    return f"{m.group('scheme')}{authority}{rest}"


def redact_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with credentials removed: in every URL its userinfo and every query and
    fragment value; elsewhere secret-looking ``name=value`` parameters; and every literal value
    in ``secrets`` (an API key, a BMC password)."""
    for secret in secrets:
        if secret and len(secret) >= _SHOWN_SECRET_MIN and secret in text:
            text = text.replace(secret, _HIDDEN)
    if "://" in text:
        text = _URL.sub(_url, text)
    if "=" in text:
        text = _QUERY_SECRET.sub(rf"\g<name>{_HIDDEN}", text)
    return text


def redact(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """A copy with secrets removed: values under secret-looking keys (keys ending in ``_env``
    name environment variables and are kept) and, in every string, what ``redact_text``
    removes (with the literal ``secrets``)."""
    secrets = tuple(secrets)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            secret = _SECRET_KEY.search(key) and not key.lower().endswith("_env")
            out[k] = _HIDDEN if secret and v is not None else redact(v, secrets)
        return out
    if isinstance(value, list | tuple):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value


def secrets_in(value: Any) -> list[str]:
    """The literal secrets ``value`` (a spec, a URL, nested) carries, for ``redact_text`` to
    hide wherever else they turn up (a server's log tail echoing its launch line): every URL's
    password (or a lone user name: a token), raw and percent-decoded, its query values of at
    least ``_QUERY_SECRET_MIN`` characters (shorter ones are words like ``up`` or ``json``),
    and values under secret-looking keys."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            key = str(k)
            if isinstance(v, str) and _SECRET_KEY.search(key) and not key.lower().endswith("_env"):
                found.append(v)
            else:
                found += secrets_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            found += secrets_in(v)
    elif isinstance(value, str) and "://" in value:
        for m in _URL.finditer(value):
            authority, rest = m.group("authority"), m.group("rest")
            if "@" in authority:  # the password; a lone user name is a token (TOKEN@host)
                raw = authority.rpartition("@")[0].rpartition(":")[2]
                found += [raw, unquote(raw)]
            for item in _QUERY_ITEM.finditer(rest[rest.find("?") :] if "?" in rest else ""):
                if len(raw := item.group("value")) >= _QUERY_SECRET_MIN:
                    found += [raw, unquote(raw)]
    return [f for f in dict.fromkeys(found) if len(f) >= _SHOWN_SECRET_MIN]
