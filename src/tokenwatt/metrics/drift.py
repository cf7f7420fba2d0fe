"""Did the server change during the run? Two checks after the search, read by median TPOT.

A search reads probes taken minutes apart as one curve. A server that slows down halfway (a
neighbour on the GPU, thermal throttling, a cache that filled) leaves the passes from before
the change standing, and the boundary they imply is stale. So after the search the run probes
again, a **re-test** at the highest rate that passed and a **confirmation** at the fitted
boundary, and asks of each one question: are its decode steps slower than one server's can be?

For one server the median TPOT does not fall as the offered rate rises (more load, a larger
batch, each decode step longer), and near the boundary it is bounded by the batch the engine
allows. So each check is compared with its neighbours on the search's curve, the nearest probe
at or below its rate and the nearest at or above (the re-test's neighbour on both sides is the
earlier probe at its own rate), and the server changed when the check's median TPOT exceeds
``DRIFT_LATENCY_FACTOR`` × the higher of theirs. Only the neighbours: a probe far above the
boundary (the search's first overloaded guesses) would let a slowed server through; a failing
probe cut short after its first few requests has medians biased low (the first to finish are
the fast ones), which is why the neighbour below, a full passing window, is taken with it.

Not the p99 verdict: misses near the boundary come in bursts (a queue that builds fails its
neighbours together, about 65 requests to a burst on the simulator), so verdicts flip between
windows of one healthy server, and counts read as binomial draws, even through a design
effect of 4, called a change on an unchanged simulator in 31 of 100 dense searches. Not the
median TTFT either: near the boundary it is the queue's, and two windows of one healthy
server at one rate differed 4.5× (gpt-oss-20b at 45 req/s, 160 against 720 ms). The median
TPOT moves with the server's decode speed and little else. A check whose requests mostly
failed has a median TPOT beyond every value (``metrics.slo.judged_medians``) and is a change.

What it does not see: a server that got faster, one whose queue alone grew (fewer slots, the
same speed), and a decode slow-down below the factor (measured: docs/methodology.md, "A server
that changed").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DRIFT_LATENCY_FACTOR", "Level", "level_rate", "neighbours", "slower_than_search"]

# A healthy server's check stays within this of its neighbours' median TPOT: measured in
# virtual time over dense, MoE and prefill-heavy searches the largest ratio was 2.04
# (prefill-heavy: a confirmation that met a congested spell beside a failing probe cut short);
# held-out cases and what each slow-down catches: docs/methodology.md, "A server that changed".
DRIFT_LATENCY_FACTOR = 2.5


@dataclass(frozen=True, slots=True)
class Level:
    """One probe as the checks read it: its rate (``level_rate``) and the median TPOT of its
    judged requests (``metrics.slo.judged_medians``; +inf: over half failed; None: nothing
    judged)."""

    rate_rps: float
    tpot_p50_s: float | None

    @classmethod
    def of(cls, rate_rps: float, medians_s: Mapping[str, float | None]) -> Level:
        """From ``judged_medians``' record: a median that landed on a failure (None) is
        +inf; no ``tpot`` key (nothing judged) is None."""
        if "tpot" not in medians_s:
            return cls(rate_rps, None)
        v = medians_s["tpot"]
        return cls(rate_rps, math.inf if v is None else v)


def level_rate(offered_rps: float, counted_rps: float | None) -> float:
    """The rate a probe's median TPOT is placed at on the search's curve: the counted rate
    (requests scheduled in the window ÷ window, the client's own Poisson draw, which the
    server's speed does not move) where there is one, else the offered rate. The median TPOT
    follows the load the window held, and a short window's count strays far from the offered
    rate: read at their offered rates, a re-test offered 11.3 req/s whose window held 14.4 was
    compared with a search probe offered 11.3 whose window held 8.2, two loads as one, and an
    unchanged simulator was called changed (docs/methodology.md, "A server that changed")."""
    if counted_rps is None or not math.isfinite(counted_rps) or counted_rps <= 0:
        return offered_rps
    return counted_rps


def _ms(x: float) -> str:
    """A median for a person: milliseconds below a second, seconds above."""
    return f"{x * 1e3:.3g} ms" if x < 1.0 else f"{x:.3g} s"


def neighbours(search: Sequence[Level], rate_rps: float) -> float | None:
    """The higher median TPOT of the nearest probes at or below and at or above ``rate_rps``
    (every probe at that nearest rate: a rate measured twice counts both); None: no probe
    measured one (zero, one-token outputs only, counts as none)."""
    have = [(s.rate_rps, m) for s in search if (m := s.tpot_p50_s)]
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
    """A line when ``check``'s median TPOT exceeds ``factor`` × its neighbours' on the
    search's curve (``neighbours``); None when it does not, or nothing compares."""
    v, top = check.tpot_p50_s, neighbours(search, check.rate_rps)
    if v is None or top is None or not v > factor * top:
        return None
    if math.isinf(v):
        return (
            f"over half of the requests {where} failed (median TPOT beyond every value), "
            f"where the search measured {_ms(top)} beside the {check.rate_rps:.3g} req/s its "
            "window held"
        )
    return (
        f"median TPOT {_ms(v)} {where}, {v / top:.3g}× the {_ms(top)} the search measured "
        f"beside the {check.rate_rps:.3g} req/s its window held (a healthy server stays within "
        f"{factor:g}×)"
    )
