"""Engine counters checked before they are used: finite, non-negative, one engine per series.

Why: the engine is a second witness only if its numbers can be numbers. A NaN turned every
agreement into "DISAGREE" with no word about the engine; a negative counter gave T = −564
tok/s; two replicas behind one balancer answer scrapes in turn, so a counter goes up and down,
and read as restarts it gave an engine T 660× the client's. Here a non-finite or negative value
is refused by name (the figure goes missing, with a warning), and a series that falls is read
as an engine restart only if it behaves like one: it falls once and stays below where it fell
from; falling twice, or climbing back past the value it fell from, is several engines.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Literal

from tokenwatt.engine.parse import EngineSample

__all__ = ["SEVERAL_ENGINES", "CounterShape", "checked_sample", "counter_shape"]

SEVERAL_ENGINES = "several engines behind one URL: scrape each replica"
CounterShape = Literal["rising", "restart", "several"]


def checked_sample(sample: EngineSample) -> tuple[EngineSample, dict[str, str]]:
    """``sample`` without the values that cannot be counts or levels, and a warning for each,
    by figure (so a caller can say it once per figure, not once per scrape)."""
    warnings: dict[str, str] = {}

    def keep(kind: str, values: dict[str, float]) -> dict[str, float]:
        out = {}
        for key, value in values.items():
            if math.isfinite(value) and value >= 0:
                out[key] = value
            else:
                warnings[f"{kind} {key}"] = (
                    f"engine {kind} {key} = {value:g} refused (not a finite, non-negative "
                    "value): that figure is not measured"
                )
        return out

    counters, gauges = keep("counter", sample.counters), keep("gauge", sample.gauges)
    return EngineSample(sample.t_ns, counters, gauges, sample.experts), warnings


def counter_shape(values: Sequence[float]) -> CounterShape:
    """How a cumulative counter moved over scrapes: only up; one fall that stays below the
    value it fell from (an engine restart, counting from zero); or up and down (several)."""
    falls = [i for i, (a, b) in enumerate(itertools.pairwise(values), 1) if b < a]
    if not falls:
        return "rising"
    if len(falls) > 1:
        return "several"
    before = values[falls[0] - 1]
    return "several" if any(v > before for v in values[falls[0] :]) else "restart"
