"""The engine's own Prometheus counters, scraped beside every probe (``tokenwatt.engine``)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from tokenwatt.spec._base import Section
from tokenwatt.spec.endpoint import check_url_parts

__all__ = ["ServerMetricsSection"]


class ServerMetricsSection(Section):
    enabled: bool = Field(True, description="scrape the engine's /metrics during every probe")
    url: str | None = Field(
        None,
        description="Prometheus text endpoint of the engine; None: /metrics next to "
        "endpoint.url (http://h:p/v1 → http://h:p/metrics)",
    )
    engine: Literal["auto", "vllm", "sglang", "tgi", "llamacpp", "trtllm"] = Field(
        "auto", description="whose metric names to read; auto: detected from the names served"
    )
    interval_s: float = Field(
        1.0, gt=0, description="seconds between scrapes inside a window (plus start and end)"
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL such as http://127.0.0.1:8000/metrics")
        check_url_parts(v)
        return v
