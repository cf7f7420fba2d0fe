"""The safe rate held to the drift checks: a check at or below it that failed the SLO.

The safe rate is the low end of the two-sided interval (``metrics.boundary.two_sided_boundary``),
a rate the search's evidence shows at 95 % to meet the SLO. The drift checks run after the
search in long windows near the boundary and do not join the fit (``load.bench``). When one
of them, run at or below the safe rate, fails the SLO, the safe rate is contradicted by a
measurement and is too high. It is then corrected, not only flagged: the check's counts are
pooled into the search's evidence at the check's own rate and the low end re-computed by the
same rule. Pooling only adds misses at or below the old low end, so the corrected end lies
lower or is open; open, the safe rate is withdrawn (no rate below is established), which is
what the evidence then supports. A check that failed above the safe rate is the drift check's
own business (``metrics.drift``), not this one's.

"At or below" is read at the rate the check's verdict is placed at (``load.search.bracket_rate``):
its offered rate, or its counted rate where the window held more arrivals than Poisson noise
explains; that placement is the tolerance the search itself uses for "the same rate". No
tolerance above it: a failure above the safe rate does not contradict a claim about rates at
or below it (a confirmation at the fitted point fails half the time by design)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from tokenwatt.load.search import ProbeOutcome, bracket_rate
from tokenwatt.metrics.boundary import LOW_END_MIN_BELOW, Evidence, two_sided_boundary
from tokenwatt.result import SafeRateFlag

__all__ = ["checked_safe_rate"]

P = TypeVar("P")


def _worst_misses(e: Evidence) -> tuple[int, int]:
    """(misses, judged) of the limit the check missed most often."""
    if not e.misses:
        return 0, e.judged
    counts = [e.counts(k) for k in e.misses]
    judged, misses = max(counts, key=lambda c: c[1])
    return misses, judged


def checked_safe_rate(
    evidence: Sequence[Evidence],
    allowed: float,
    safe_rps: float,
    checks: Sequence[tuple[int, float, ProbeOutcome[P]]],
    min_below: float = LOW_END_MIN_BELOW,
) -> SafeRateFlag | None:
    """The flag on ``safe_rps`` from the drift ``checks`` (probe index, offered rate, outcome),
    or None when no check at or below it failed. ``evidence``: the search's, as its fit read
    it; ``allowed``: the SLO's allowed miss fraction; ``min_below``: the low end's distance
    below the point, as the search placed it (``two_sided_boundary``). The first contradicting
    check names the flag; every contradicting check's counts are pooled into the corrected
    low end, which keeps that distance below the pooled point."""
    failed = []
    for index, offered, out in checks:
        if out.passed or out.evidence is None or out.halt is not None:
            continue
        placed = bracket_rate(offered, out)
        if placed <= safe_rps:
            failed.append((index, placed, out.evidence))
    if not failed:
        return None
    pooled = list(evidence) + [
        Evidence(placed, e.judged, e.misses, e.in_flight) for _, placed, e in failed
    ]
    low = two_sided_boundary(pooled, allowed, min_below=min_below).low_rps
    index, placed, e = failed[0]
    misses, judged = _worst_misses(e)
    return SafeRateFlag(
        check_rate_rps=placed,
        check_probe=index,
        misses=misses,
        judged=judged,
        searched_safe_rate_rps=safe_rps,
        safe_rate_rps=None if low is None else min(low, safe_rps),
    )
