"""This machine's streaming-read memory bandwidth, measured: the denominator of MBU where no
rated figure applies (a CPU engine, an unlisted part).

Why a plain numpy sum: decode streams every weight once per step, a sequential read; a sum
over an array far larger than any cache is the same access pattern, needs no compiler, and
runs anywhere the package does. One thread, like an engine pinned to one core (llama.cpp's
``-t 1``): the figure is the bandwidth one core can draw, not the socket's. The best of a few
runs is taken, since interference only ever slows a run down.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_MEASURE_BYTES", "ReadBandwidth", "measure_read_bandwidth"]

DEFAULT_MEASURE_BYTES = 256 * 2**20  # larger than any last-level cache of today's CPUs


@dataclass(frozen=True, slots=True)
class ReadBandwidth:
    """A measured streaming-read bandwidth and how it was measured."""

    bandwidth_bytes_per_s: float
    nbytes: int
    repeats: int
    best_s: float


def measure_read_bandwidth(nbytes: int = DEFAULT_MEASURE_BYTES, repeats: int = 5) -> ReadBandwidth:
    """Best of ``repeats`` numpy sums over ``nbytes`` of float64 (one thread)."""
    if nbytes < 8 or repeats < 1:
        raise ValueError(f"need nbytes >= 8 and repeats >= 1, got {nbytes}, {repeats}")
    a = np.ones(nbytes // 8)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t0)
    size = a.nbytes
    return ReadBandwidth(size / best, int(size), repeats, best)
