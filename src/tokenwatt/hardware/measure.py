"""This machine's streaming-read memory bandwidth, measured: the denominator of MBU where no
rated figure applies (a CPU engine, an unlisted part).

Why a plain numpy sum: decode streams every weight once per step, a sequential read; a sum
over an array far larger than any cache is the same access pattern, needs no compiler, and
runs anywhere the package does. One thread, like an engine pinned to one core (llama.cpp's
``-t 1``): the figure is the bandwidth one core can draw, not the socket's. The best of a few
runs is taken, since interference only ever slows a run down; how far the slowest run fell
below it (``spread``) and when the runs were made travel with the figure, because a figure
measured on this machine, unlike a datasheet's, is only as good as that moment was quiet.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_MEASURE_BYTES", "ReadBandwidth", "measure_read_bandwidth"]

DEFAULT_MEASURE_BYTES = 256 * 2**20  # larger than any last-level cache of today's CPUs


@dataclass(frozen=True, slots=True)
class ReadBandwidth:
    """A measured streaming-read bandwidth and how it was measured: when (UTC), over how
    many bytes, the best of how many runs, and every run's time."""

    bandwidth_bytes_per_s: float
    nbytes: int
    repeats: int
    best_s: float
    times_s: tuple[float, ...] = ()
    measured_at: str = ""  # ISO 8601 UTC, to the second

    @property
    def spread(self) -> float:
        """How much the runs varied: 1 − best time ÷ slowest time, the fraction the slowest
        run's bandwidth fell below the figure (0: every run alike)."""
        return 1.0 - self.best_s / max(self.times_s) if self.times_s else 0.0

    @property
    def method(self) -> str:
        """How, in words: what was read, how many times, on how many threads."""
        return (
            f"numpy sum over {self.nbytes / 2**20:.0f} MiB of float64, best of {self.repeats}, "
            "one thread"
        )


def measure_read_bandwidth(nbytes: int = DEFAULT_MEASURE_BYTES, repeats: int = 5) -> ReadBandwidth:
    """Best of ``repeats`` numpy sums over ``nbytes`` of float64 (one thread)."""
    if nbytes < 8 or repeats < 1:
        raise ValueError(f"need nbytes >= 8 and repeats >= 1, got {nbytes}, {repeats}")
    a = np.ones(nbytes // 8)
    at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    times: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        a.sum()
        times.append((time.perf_counter_ns() - t0) / 1e9)
    best = max(min(times), 1e-9)  # a clock tick, never a division by zero
    size = a.nbytes
    return ReadBandwidth(size / best, int(size), repeats, best, tuple(times), at)
