"""Did the server change during the run? Two checks after the search, read by latency level.

A search reads probes taken minutes apart as one curve. A server that slows down halfway (a
neighbour on the GPU, thermal throttling, a cache that filled) leaves the passes from before
the change standing, and the boundary they imply is stale. So after the search the run probes
again, a **re-test** at the highest rate that passed and a **confirmation** at the fitted
boundary, and asks of each one question: is this window slower than one server can be?

For one server the median latency does not fall as the offered rate rises: more load means a
larger batch (each decode step longer) and a longer queue (each first token later). So each
check is compared with its neighbours on the search's curve, the nearest probe at or below its
rate and the nearest at or above (the re-test's neighbour on both sides is the earlier probe at
its own rate), and the server changed when the check's median TTFT or median TPOT exceeds
``DRIFT_LATENCY_FACTOR`` × the higher of their medians. Only the neighbours: a probe far above
the boundary (the search's first overloaded guesses) has medians many times the boundary's and
would let a slowed server through; a failing probe cut short after its first few requests
finished has medians biased low (the first to finish are the fast ones), which is why the
neighbour below, a full passing window, is taken with it.

The checks do not read the p99 verdict. The misses near the boundary come in bursts (a queue
that builds fails its neighbours together: about 65 requests to a burst on the simulator), so
a verdict flips between windows of one healthy server, and counts read as binomial draws, even
through a design effect of 4, called a change on an unchanged simulator in 31 of 100 dense
searches. The median moves with the whole window, not with its worst 1 %.

A server that got *faster* is not caught (nothing about the boundary's safety depends on it);
one that got slower by the factor is, at either check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DRIFT_LATENCY_FACTOR", "Level", "neighbours", "slower_than_search"]

# A healthy server's check stays within this of its neighbours' medians: measured in virtual
# time over dense, MoE and prefill-heavy searches, the largest ratio was 2.04 (prefill-heavy:
# a confirmation window that met a congested spell beside a failing probe cut short); its
# check on held-out cases is in docs/methodology.md, "A server that changed".
DRIFT_LATENCY_FACTOR = 2.5


@dataclass(frozen=True, slots=True)
class Level:
    """One probe's latency level: its offered rate and the medians of its judged requests
    (``metrics.slo.judged_medians``; +inf: over half failed; None: nothing judged)."""

    rate_rps: float
    ttft_p50_s: float | None
    tpot_p50_s: float | None

    def median(self, name: str) -> float | None:
        """``ttft`` or ``tpot``."""
        return self.ttft_p50_s if name == "ttft" else self.tpot_p50_s


def _ms(x: float) -> str:
    """A median for a person: milliseconds below a second, seconds above."""
    return f"{x * 1e3:.3g} ms" if x < 1.0 else f"{x:.3g} s"


def neighbours(search: Sequence[Level], rate_rps: float, name: str) -> float | None:
    """The higher median of the nearest probes at or below and at or above ``rate_rps``
    (every probe at that nearest rate: a rate measured twice counts both); None: no probe
    measured that median (zero, a one-token TPOT, counts as none)."""
    have = [(s.rate_rps, m) for s in search if (m := s.median(name))]
    below = [r for r, _ in have if r <= rate_rps]
    above = [r for r, _ in have if r >= rate_rps]
    near = {max(below)} if below else set()
    near |= {min(above)} if above else set()
    found = [m for r, m in have if r in near]
    return max(found) if found else None


def slower_than_search(
    check: Level,
    search: Sequence[Level],
    where: str,
    factor: float = DRIFT_LATENCY_FACTOR,
) -> str | None:
    """A line when ``check``'s median TTFT or TPOT exceeds ``factor`` × its neighbours' on
    the search's curve (``neighbours``); None when it does not, or nothing compares."""
    for name in ("ttft", "tpot"):
        v = check.median(name)
        top = neighbours(search, check.rate_rps, name)
        if v is None or top is None:
            continue
        if v > factor * top and math.isinf(v):
            return (
                f"over half of the requests {where} failed (median {name.upper()} beyond "
                f"every finite value), where the search measured {_ms(top)} beside "
                f"{check.rate_rps:.3g} req/s"
            )
        if v > factor * top:
            return (
                f"median {name.upper()} {_ms(v)} {where}, {v / top:.3g}× the "
                f"{_ms(top)} the search measured beside {check.rate_rps:.3g} req/s (a healthy "
                f"server stays within {factor:g}×)"
            )
    return None
