"""Accuracy of a probe's graded answers, with its Wilson score interval.

A graded request (``traffic.graded``) carries ``task`` and, once its stream ended ok,
``correct``. Accuracy is right ÷ judged over the window's counted graded requests; one that
failed or was cancelled before an answer is not judged (failures count against the error
budget, not the accuracy). The interval is Wilson's score interval for a binomial
proportion: it stays inside [0, 1] and keeps close to its stated coverage at the small counts
a graded slice gives (tens of answers), where the normal approximation does not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist

from tokenwatt.records import RequestRecord
from tokenwatt.result import GradedAccuracy

__all__ = ["CONFIDENCE", "probe_accuracy", "wilson_interval"]

CONFIDENCE = 0.95


def wilson_interval(right: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval for ``right`` successes in ``n`` trials (n ≥ 1)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = right / n
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / n + z2n / (4 * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def probe_accuracy(records: Iterable[RequestRecord]) -> GradedAccuracy | None:
    """The graded answers among ``records`` (the window's counted requests); None when none
    of them carried a task."""
    right = graded = unjudged = 0
    by_task: dict[str, list[int]] = {}
    for r in records:
        if r.task is None or r.cancelled:
            continue
        if r.correct is None:
            unjudged += 1
            continue
        graded += 1
        right += r.correct
        tally = by_task.setdefault(r.task, [0, 0])
        tally[0] += r.correct
        tally[1] += 1
    if graded == 0 and unjudged == 0:
        return None
    lo, hi = wilson_interval(right, graded) if graded else (None, None)
    return GradedAccuracy(
        graded=graded,
        right=right,
        unjudged=unjudged,
        accuracy=right / graded if graded else None,
        accuracy_low=lo,
        accuracy_high=hi,
        confidence=CONFIDENCE,
        by_task={k: (v[0], v[1]) for k, v in sorted(by_task.items())},
    )
