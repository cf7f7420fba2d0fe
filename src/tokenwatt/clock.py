"""The one clock: monotonic nanoseconds for every measurement, wall time for display only.

Request timing, kernel receive timestamps (converted) and power samples all live on
``time.perf_counter_ns``; on Linux it is CLOCK_MONOTONIC, the same in every process,
so a server on this machine and the client can compare stamps directly.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

now_ns = time.perf_counter_ns


def stamp_between(t0_ns: int, t1_ns: int) -> int:
    """The stamp of a reading taken by a call that ran from t0 to t1: its midpoint (power
    sources and Prometheus scrapes alike)."""
    return (t0_ns + t1_ns) // 2


class ClientClock(BaseModel):
    """How a client's receive times were taken, recorded with every run (``client.stamps``
    measures it, ``result.ProbeDetail.clock`` keeps it): one type for both, here at the base
    because ``client`` may not import ``result``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timestamp_source: Literal["kernel", "user"]
    realtime_minus_monotonic_ns: int = Field(description="subtract from a kernel stamp → mono")
    offset_uncertainty_ns: int = Field(description="half the narrowest clock-pair bracket")
    pairs: int = Field(description="clock-pair readings the offset was chosen from")
    method: str
    drift_ns: int | None = Field(None, description="offset at close − at start")
    realtime_steps: int = Field(
        0,
        description="steps of the realtime clock seen (a kernel stamp later than its read or "
        "before its send): each time the offset was measured again",
    )

    def to_dict(self) -> dict[str, object]:
        return self.model_dump()
