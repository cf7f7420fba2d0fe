"""Machine facts recorded in every result, so runs can be reproduced and compared."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time

from tokenwatt.report.schema import MachineInfo

__all__ = ["collect_machine"]


def collect_machine(*, timestamp_source: str = "user") -> MachineInfo:
    """Facts about this client machine; ``timestamp_source`` is what the client used
    (``kernel`` for SO_TIMESTAMP receive stamps, ``user`` for perf_counter at read time)."""
    mono = time.perf_counter_ns()
    wall = time.time_ns()
    try:
        clock = time.get_clock_info("perf_counter").implementation
    except (ValueError, OSError):  # pragma: no cover - every CPython has perf_counter
        clock = "perf_counter"
    return MachineInfo(
        hostname=socket.gethostname(),
        os=f"{platform.system()} {platform.release()}",
        python=f"{platform.python_implementation()} {sys.version.split()[0]}",
        cpu_count=os.cpu_count(),
        clock=f"time.perf_counter_ns ({clock})",
        timestamp_source=timestamp_source,
        realtime_minus_monotonic_s=(wall - mono) / 1e9,
    )
