"""How the SLO boundary is searched and how long each probe runs."""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from tokenwatt.spec._base import MAX_COUNT, MAX_RATE_RPS, MAX_SECONDS, Section

MAX_WORKERS = 256  # sending processes per probe
_RAY_ADDRESS = re.compile(r"(auto|local|(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5})")


class ProbeSettings(Section):
    warmup_s: float = Field(
        10.0, ge=0, le=MAX_SECONDS, description="requests sent before the window opens, s"
    )
    min_duration_s: float = Field(
        60.0, gt=0, le=MAX_SECONDS, description="shortest measurement window, s"
    )
    min_requests: int = Field(
        200, ge=1, le=MAX_COUNT, description="fewest requests that must start inside the window"
    )
    max_duration_s: float = Field(
        600.0, gt=0, le=MAX_SECONDS, description="longest measurement window, s"
    )
    drain_timeout_s: float = Field(
        120.0,
        ge=0,
        le=MAX_SECONDS,
        description="after the window, wait this long for counted requests to end",
    )
    early_stop: bool = Field(True, description="stop a probe as soon as it has clearly failed")
    workers: int | Literal["auto"] = Field(
        1,
        description="processes that send an open-loop probe's requests (auto: one per free "
        "core); 1 sends from the benchmark's own process",
    )
    ray: str | None = Field(
        None,
        description="send from Ray actors instead of local processes (extra tokenwatt[ray]): "
        "local (a Ray instance on this machine), auto (the cluster this machine belongs to) "
        "or ray://HOST:PORT; workers is then the number of actors (auto: the cluster's CPUs "
        "minus one)",
    )

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= MAX_WORKERS:
            raise ValueError(
                f"must be 1 to {MAX_WORKERS} or auto; more workers than cores only share them"
            )
        return v

    @field_validator("ray")
    @classmethod
    def _ray(cls, v: str | None) -> str | None:
        if v is not None and not _RAY_ADDRESS.fullmatch(v):
            raise ValueError(
                "must be local, auto or a Ray cluster address (ray://HOST:PORT or HOST:PORT)"
            )
        return v

    @model_validator(mode="after")
    def _order(self) -> Self:
        if self.max_duration_s < self.min_duration_s:
            raise ValueError("max_duration_s must be >= min_duration_s")
        return self


class SearchSettings(Section):
    start_rate_rps: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE_RPS,
        description="first rate; None: derived from the single-stream point",
    )
    growth: float = Field(
        2.0, gt=1, le=1000, description="factor between rates until the SLO fails"
    )
    precision: float = Field(
        0.10,
        gt=0,
        lt=1,
        description="stop when the boundary's 95 % interval, closed at both ends, has a half "
        "width within this fraction of its point (without search.sequential: when "
        "(hi − lo) / lo is below this)",
    )
    max_time_s: float | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="stop probing after this many seconds of search (None: no limit); the "
        "result names the interval's end left open",
    )
    max_rate_rps: float = Field(
        10_000.0, gt=0, le=MAX_RATE_RPS, description="give up growing past this rate"
    )
    max_probes: int = Field(20, ge=1, le=10_000, description="most probes in one search")
    sequential: bool = Field(
        True,
        description="end each probe at its sequential verdict, start from closed-loop "
        "stages, choose rates by the boundary fit and stop at its interval's width",
    )
    single_stream_requests: int = Field(
        10,
        ge=0,
        le=MAX_COUNT,
        description="requests sent one at a time for the latency floor (0 to skip)",
    )
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
