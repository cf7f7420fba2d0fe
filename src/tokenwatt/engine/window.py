"""A probe window seen from the engine: counter differences and time-weighted gauge means.

Why time-weighted: running and waiting requests change at every admission and finish; a
plain mean of scrapes over-weights stretches where scrapes happened to bunch. Each gauge is
integrated with the trapezoid rule over the scrape times and divided by the window length.
Counters are differenced between the first and last scrape; a decrease is a restart of the
engine (counters reset to zero), so the value after it counts from zero, but only where the
series behaves like a restart (``engine.checks.counter_shape``): a counter that goes up and
down is several engines behind one URL, and the window has no engine figures.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from tokenwatt.engine.checks import SEVERAL_ENGINES, counter_shape
from tokenwatt.engine.names import CACHE_COUNTERS, COUNTERS, GAUGES, SPEC_COUNTERS
from tokenwatt.engine.parse import EngineSample
from tokenwatt.result import EngineFigures

__all__ = [
    "clip_samples",
    "counter_delta",
    "summarize",
    "time_weighted_mean",
    "window_figures",
]


def counter_delta(values: Sequence[float]) -> float:
    """Increase of a cumulative counter over ``values`` in scrape order, across resets."""
    total = 0.0
    for prev, cur in itertools.pairwise(values):
        total += cur - prev if cur >= prev else cur
    return total


def time_weighted_mean(times_s: Sequence[float], values: Sequence[float]) -> float:
    """∫ value dt ÷ (t_last − t_first), trapezoid rule; the value itself for one sample."""
    if len(values) == 1 or times_s[-1] <= times_s[0]:
        return sum(values) / len(values)
    area = 0.0
    for i in range(1, len(values)):
        area += (times_s[i] - times_s[i - 1]) * (values[i] + values[i - 1]) / 2
    return area / (times_s[-1] - times_s[0])


def standard_error(values: Sequence[float]) -> float | None:
    """sd ÷ √n of a gauge's scraped levels: how far its mean may sit from the window's own
    (the scrapes are a sample of the level; None below 3 of them)."""
    n = len(values)
    if n < 3:
        return None
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n)


def window_figures(
    engine: str | None,
    url: str,
    *,
    duration_s: float,
    generated_tokens: float | None = None,
    decode_steps: float | None = None,
    spec_drafts: float | None = None,
    spec_accepted_tokens: float | None = None,
    prefix_cache_queries: float | None = None,
    prefix_cache_hits: float | None = None,
    **counted: Any,
) -> EngineFigures:
    """What the engine counted over a window, as the result's ``EngineFigures``, with the
    rates derived once here: T = generated tokens ÷ window, steps/s = steps ÷ window, the
    acceptance length 1 + accepted draft tokens ÷ drafts, the prefix-cache hit rate hits ÷
    queries (prompt tokens). ``counted``: the other counts and
    means (``EngineFigures``' fields). Figures the engine does not expose stay None."""
    per_s = duration_s if duration_s > 0 else None
    return EngineFigures(
        engine=engine,
        url=url,
        duration_s=duration_s,
        generated_tokens=generated_tokens,
        generated_tokens_per_s=generated_tokens / per_s
        if generated_tokens is not None and per_s
        else None,
        decode_steps=decode_steps,
        decode_steps_per_s=decode_steps / per_s if decode_steps is not None and per_s else None,
        spec_drafts=spec_drafts,
        spec_accepted_tokens=spec_accepted_tokens,
        acceptance_length=1.0 + spec_accepted_tokens / spec_drafts
        if spec_drafts and spec_accepted_tokens is not None
        else None,
        prefix_cache_queries=prefix_cache_queries,
        prefix_cache_hits=prefix_cache_hits,
        prefix_cache_hit_rate=prefix_cache_hits / prefix_cache_queries
        if prefix_cache_queries and prefix_cache_hits is not None
        else None,
        **counted,
    )


def _at(a: EngineSample, b: EngineSample, t_ns: int) -> EngineSample:
    """The sample linearly interpolated between ``a`` and ``b`` at ``t_ns``."""
    f = (t_ns - a.t_ns) / (b.t_ns - a.t_ns) if b.t_ns > a.t_ns else 0.0

    def mix(x: dict[str, float], y: dict[str, float]) -> dict[str, float]:
        return {k: x[k] + f * (y[k] - x[k]) if y[k] >= x[k] else y[k] for k in x if k in y}

    return EngineSample(t_ns, mix(a.counters, b.counters), mix(a.gauges, b.gauges))


def clip_samples(samples: Sequence[EngineSample], start_ns: int, end_ns: int) -> list[EngineSample]:
    """``samples`` cut to [start_ns, end_ns], with values interpolated at both edges.

    Why: the scrapes bracket the client's window but do not fall on its edges; comparing
    the client's T with the engine's over the same seconds needs the engine's counters at
    those instants. Linear interpolation is off by at most one scrape interval's increments.
    """
    inside = [s for s in samples if start_ns < s.t_ns < end_ns]
    out: list[EngineSample] = []
    for edge in (start_ns, end_ns):
        before = [s for s in samples if s.t_ns <= edge]
        after = [s for s in samples if s.t_ns >= edge]
        if before and after:
            out.append(_at(before[-1], after[0], edge))
    if len(out) < 2:
        return list(samples)  # the scrapes do not bracket the window: keep them as they are
    return [out[0], *inside, out[1]]


def summarize(
    samples: Sequence[EngineSample],
    *,
    engine: str | None,
    url: str,
    warnings: list[str] | None = None,
) -> EngineFigures:
    """The window between the first and last of ``samples`` (at least two for counters).

    A counter read as an engine restart is appended to ``warnings`` (for the run's warnings;
    the figures stay as the result stores them)."""
    if not samples:
        return EngineFigures(
            engine=engine, url=url, unavailable="no scrape of the engine's /metrics"
        )
    times = [(s.t_ns - samples[0].t_ns) / 1e9 for s in samples]
    delta: dict[str, float | None] = {}
    for key in COUNTERS:
        vals = [s.counters.get(key) for s in samples]
        ok = len(samples) >= 2 and all(v is not None for v in vals)
        known = [v for v in vals if v is not None]
        shape = counter_shape(known) if ok else "rising"
        if shape == "several":
            why = f"{SEVERAL_ENGINES} (counter {key} went up and down over {len(known)} scrapes)"
            return EngineFigures(engine=engine, url=url, unavailable=why)
        if shape == "restart" and warnings is not None:
            warnings.append(f"engine counter {key} fell once: read as an engine restart")
        delta[key] = counter_delta(known) if ok else None
    means: dict[str, float | None] = {}
    # two scrapes are the window's edges only (llama.cpp is scraped so): a level there says
    # nothing of the window between (idle at both ends read as a mean of 0), so not measured
    inside = len(samples) >= 3
    for key in GAUGES:
        vals = [s.gauges.get(key) for s in samples]
        ok = inside and all(v is not None for v in vals)
        means[key] = time_weighted_mean(times, [v for v in vals if v is not None]) if ok else None
    for key in (*SPEC_COUNTERS, *CACHE_COUNTERS):
        vals = [s.counters.get(key) for s in samples]
        ok = len(samples) >= 2 and all(v is not None for v in vals)
        delta[key] = counter_delta([v for v in vals if v is not None]) if ok else None
    busy = delta.pop("busy_slot_decodes")
    steps = delta["decode_steps"]
    kv = [s.gauges["kv_usage"] for s in samples if "kv_usage" in s.gauges] if inside else []
    levels = [s.gauges["running"] for s in samples if "running" in s.gauges]
    missing = tuple(
        k for k in (*COUNTERS[:-1], *GAUGES) if (delta.get(k) if k in delta else means[k]) is None
    )
    return window_figures(
        engine,
        url,
        duration_s=times[-1],
        scrapes=len(samples),
        requests_finished=delta["requests_finished"],
        prompt_tokens=delta["prompt_tokens"],
        generated_tokens=delta["generated_tokens"],
        decode_steps=steps,
        preemptions=delta["preemptions"],
        busy_slots_per_decode=busy / steps if busy is not None and steps else None,
        running_mean=means["running"],
        running_sem=standard_error(levels) if means["running"] is not None else None,
        waiting_mean=means["waiting"],
        kv_usage_mean=means["kv_usage"],
        kv_usage_max=max(kv) if kv else None,
        spec_drafts=delta["spec_drafts"],
        spec_accepted_tokens=delta["spec_accepted_tokens"],
        prefix_cache_queries=delta["prefix_cache_queries"],
        prefix_cache_hits=delta["prefix_cache_hits"],
        missing=list(missing),
    )
