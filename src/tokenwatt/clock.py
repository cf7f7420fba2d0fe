"""The one clock: monotonic nanoseconds for every measurement, wall time for display only.

Request timing, kernel receive timestamps (converted) and power samples all live on
``time.perf_counter_ns``; on Linux it is CLOCK_MONOTONIC, the same in every process,
so a server on this machine and the client can compare stamps directly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

now_ns = time.perf_counter_ns


@dataclass(frozen=True, slots=True)
class ClockAnchor:
    """One (wall, monotonic) pair taken at the start of a run, to display monotonic stamps."""

    wall_ns: int
    mono_ns: int

    @classmethod
    def take(cls) -> ClockAnchor:
        mono = time.perf_counter_ns()
        wall = time.time_ns()
        return cls(wall_ns=wall, mono_ns=mono)

    def to_wall_s(self, mono_ns: int) -> float:
        return (self.wall_ns + (mono_ns - self.mono_ns)) / 1e9
