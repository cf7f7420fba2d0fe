"""The one clock: monotonic nanoseconds for every measurement, wall time for display only.

Request timing, kernel receive timestamps (converted) and power samples all live on
``time.perf_counter_ns``; on Linux it is CLOCK_MONOTONIC, the same in every process,
so a server on this machine and the client can compare stamps directly.
"""

from __future__ import annotations

import time

now_ns = time.perf_counter_ns
