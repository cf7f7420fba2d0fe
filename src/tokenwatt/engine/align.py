"""The client's tokens counted the way the engine's counter counts them: on its clock.

Why: the engine's window delta is its counter at the scrapes, linearly interpolated to the
client's window edges (``engine.window.clip_samples``). Where the load is not steady across a
straddling scrape interval (a single-stream point, a closed loop's first and last request) or
where the counter adds a request's tokens only when it ends (llama.cpp), that delta differs
from the tokens the client received inside the window — not because either side is wrong but
because of *when* the counter counts. Widening the tolerance by the scrape interval hid real
differences (±20 % on 70 s windows). Instead the client's own token stamps are
counted the same way — cumulative at each scrape time, interpolated at the edges — and the
engine is compared with that; the gap between this and the client's window count is the
measured size of the edge effect.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["count_on_engine_clock"]


def count_on_engine_clock(
    events: Sequence[tuple[int, float]],
    scrape_ns: Sequence[int],
    window_start_ns: int,
    window_end_ns: int,
) -> float | None:
    """What the engine's window delta shows for ``events`` — (time the counter adds them,
    amount) — scraped at ``scrape_ns``; None when the scrapes do not bracket the window."""
    times = sorted(scrape_ns)
    if not times or times[0] > window_start_ns or times[-1] < window_end_ns:
        return None
    ordered = sorted(events)
    stamps = [t for t, _ in ordered]
    cumulative = [0.0]
    for _, amount in ordered:
        cumulative.append(cumulative[-1] + amount)

    def count_at(t_ns: int) -> float:  # the counter's value at a scrape at t_ns
        return cumulative[bisect.bisect_right(stamps, t_ns)]

    def at_edge(edge: int) -> float:
        i = bisect.bisect_right(times, edge) - 1
        a = times[i]
        b = times[min(i + 1, len(times) - 1)] if a < edge else a
        if b <= a:
            return count_at(a)
        f = (edge - a) / (b - a)
        return count_at(a) + f * (count_at(b) - count_at(a))

    return at_edge(window_end_ns) - at_edge(window_start_ns)
