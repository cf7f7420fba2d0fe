"""Energy over a window from one channel's de-duplicated readings.

Both kinds integrate a piecewise-linear function between the points:

    energy counter E(t):  segment i adds ΔE_i × overlap_i / Δt_i      (E interpolated linearly)
    power sampler  P(t):  segment i adds ½ (P(lo) + P(hi)) × overlap_i (P interpolated at lo, hi)

where overlap_i = [max(t_i, a), min(t_i+1, b)]. A window edge inside a segment is therefore
interpolated, never rounded to the nearest reading. A counter that goes down wrapped (if its
modulus is known and the drop is more than half of it) or was reset (driver reload, exporter
restart): a wrap is added back, a reset segment is dropped and counted so the caller can
flag it. Pure functions; the monitor feeds them snapshots.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

__all__ = ["Integral", "integrate", "observed_period_ns"]


@dataclass(slots=True)
class Integral:
    """What one channel contributed over [a, b]."""

    energy_j: float = 0.0
    covered_ns: int = 0  # time inside [a, b] between readings that was integrated
    points: int = 0  # readings used (inside the window plus the two that bracket it)
    wraps: int = 0
    resets: int = 0
    dropped_ns: int = 0  # time inside [a, b] lost to reset segments
    max_step_ns: int = 0  # longest reading-to-reading step that touched the window


def integrate(
    t_ns: Sequence[int],
    values: Sequence[float],
    a_ns: int,
    b_ns: int,
    *,
    counter: bool,
    wrap: float | None = None,
) -> Integral:
    """Integrate one channel over [a_ns, b_ns].

    Args:
        t_ns: strictly increasing stamps.
        values: cumulative joules (counter) or watts (sampler), same length.
        counter: True for an energy counter, False for a power sampler.
        wrap: the counter's modulus in joules, None if it never wraps.
    """
    out = Integral()
    n = len(t_ns)
    if n < 2 or b_ns <= a_ns or t_ns[-1] <= a_ns or t_ns[0] >= b_ns:
        return out
    first = max(bisect_right(t_ns, a_ns) - 1, 0)
    i = first
    last = first
    while i < n - 1 and t_ns[i] < b_ns:
        t0, t1 = t_ns[i], t_ns[i + 1]
        lo, hi = max(t0, a_ns), min(t1, b_ns)
        if hi > lo:
            last = i + 1
            dt = t1 - t0
            out.max_step_ns = max(out.max_step_ns, dt)
            v0, v1 = values[i], values[i + 1]
            if counter:
                delta = v1 - v0
                if delta < 0:
                    if wrap is not None and v0 - v1 > wrap / 2:
                        delta += wrap
                        out.wraps += 1
                    else:
                        out.resets += 1
                        out.dropped_ns += hi - lo
                        i += 1
                        continue
                out.energy_j += delta * (hi - lo) / dt
            else:
                slope = (v1 - v0) / dt
                p_lo = v0 + slope * (lo - t0)
                p_hi = v0 + slope * (hi - t0)
                out.energy_j += 0.5 * (p_lo + p_hi) * (hi - lo) / 1e9
            out.covered_ns += hi - lo
        i += 1
    out.points = last - first + 1 if last > first else 0
    return out


def observed_period_ns(t_ns: Sequence[int], *, last: int = 200) -> int | None:
    """Median step between the last ``last`` distinct readings: how often the figure really
    changed (a stale exporter shows up here). None with fewer than four readings."""
    if len(t_ns) < 4:
        return None
    tail = t_ns[-last:]
    return int(median(tail[k + 1] - tail[k] for k in range(len(tail) - 1)))
