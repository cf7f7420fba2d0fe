"""The one clock: monotonic nanoseconds for every measurement, wall time for display only.

Request timing, kernel receive timestamps (converted) and power samples all live on
``time.perf_counter_ns``; on Linux it is CLOCK_MONOTONIC, the same in every process,
so a server on this machine and the client can compare stamps directly.
"""

from __future__ import annotations

import time

now_ns = time.perf_counter_ns


def stamp_between(t0_ns: int, t1_ns: int) -> int:
    """The stamp of a reading taken by a call that ran from t0 to t1: its midpoint (power
    sources and Prometheus scrapes alike)."""
    return (t0_ns + t1_ns) // 2
