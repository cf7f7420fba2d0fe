"""Where requests go and how they are shaped on the wire."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from tokenwatt.spec._base import MAX_SECONDS, Section


class Timeouts(Section):
    connect_s: float = Field(
        10.0, gt=0, le=MAX_SECONDS, description="TCP/TLS connect and request write, seconds"
    )
    first_token_s: float = Field(
        60.0,
        gt=0,
        le=MAX_SECONDS,
        description="from send to the first content chunk, seconds; a probe also ends the "
        "wait at 10 x the SLO's TTFT limit (bounded), where the request is a known miss",
    )
    idle_s: float = Field(
        60.0,
        gt=0,
        le=MAX_SECONDS,
        description="longest silence between two reads of a stream (a stall), seconds",
    )
    total_s: float = Field(1800.0, gt=0, le=MAX_SECONDS, description="whole request, seconds")


def check_url_parts(url: str) -> None:
    """A port the URL can have and no query string or fragment: a port past 65535 was a
    traceback, and a query was dropped without a word (with ``--base-url 'http://h:p?x=y'``
    the ``/v1`` even landed inside it). ValueError, one line, for the validator."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - urllib checks the range when the port is read
    except ValueError:
        raise ValueError(
            f"port {parts.netloc.rpartition(':')[2]!r} is not a port (1..65535)"
        ) from None
    if parts.query or parts.fragment or url.rstrip("/").endswith(("?", "#")):
        raise ValueError(
            "must not carry a query string or fragment (?...#...): it would not reach the "
            "server; put extra request fields in endpoint.extra_body"
        )


class Endpoint(Section):
    url: str = Field(
        description="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 "
        "(without /v1 it is added), or 'sim' to start the built-in simulator"
    )
    api: Literal["completions", "chat"] = Field("completions", description="which OpenAI API")
    model: str | None = Field(None, description="served model name; None: the first of /v1/models")
    api_key_env: str | None = Field(
        None, description="name of the environment variable holding the API key (never the key)"
    )
    prompt_format: Literal["auto", "token_ids", "text"] = Field(
        "auto",
        description="completions prompts as token-id lists (vLLM, SGLang, the simulator) or "
        "as text; auto: token ids for the simulator, text otherwise",
    )
    stream_usage: bool = Field(
        True,
        description="ask for stream_options.include_usage and continuous_usage_stats so token "
        "counts come from the server",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="extra JSON fields merged into every request body"
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        if v == "sim":
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be 'sim' or an http(s) URL such as http://127.0.0.1:8000/v1")
        check_url_parts(v)
        v = v.rstrip("/")
        # The peers' form (http://localhost:8000) gave "HTTP 404 ... GET /models": add /v1.
        return v if parts.path.rstrip("/") else v + "/v1"

    @property
    def is_sim(self) -> bool:
        return self.url == "sim"
