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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenwatt.engine.checks import SEVERAL_ENGINES, counter_shape
from tokenwatt.engine.names import COUNTERS, GAUGES, SPEC_COUNTERS
from tokenwatt.engine.parse import EngineSample

__all__ = ["EngineWindow", "clip_samples", "counter_delta", "summarize", "time_weighted_mean"]


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


@dataclass(frozen=True, slots=True)
class EngineWindow:
    """What the engine counted between the first and the last scrape of a probe.

    Figures the engine does not expose are None (and named in ``missing``); ``unavailable``
    says once why there are no engine figures at all (no /metrics, unknown names).
    """

    engine: str | None
    url: str
    duration_s: float = 0.0
    scrapes: int = 0
    requests_finished: float | None = None
    prompt_tokens: float | None = None
    generated_tokens: float | None = None
    decode_steps: float | None = None
    preemptions: float | None = None
    busy_slots_per_decode: float | None = None
    running_mean: float | None = None
    waiting_mean: float | None = None
    kv_usage_mean: float | None = None
    kv_usage_max: float | None = None
    spec_drafts: float | None = None  # speculative decoding: sequences verified (vLLM, llama.cpp)
    spec_accepted_tokens: float | None = None
    missing: tuple[str, ...] = ()
    unavailable: str | None = None
    series: tuple[EngineSample, ...] = field(default=(), repr=False)
    warnings: tuple[str, ...] = ()  # refused values, restarts: for the run's warnings

    @property
    def generated_tokens_per_s(self) -> float | None:
        """Engine-side T: generated tokens ÷ window."""
        if self.generated_tokens is None or self.duration_s <= 0:
            return None
        return self.generated_tokens / self.duration_s

    @property
    def acceptance_length(self) -> float | None:
        """The engine's: 1 + accepted draft tokens ÷ drafts over the window."""
        if not self.spec_drafts or self.spec_accepted_tokens is None:
            return None
        return 1.0 + self.spec_accepted_tokens / self.spec_drafts

    @property
    def decode_steps_per_s(self) -> float | None:
        """Engine steps per second over the window (all replicas this /metrics covers)."""
        if self.decode_steps is None or self.duration_s <= 0:
            return None
        return self.decode_steps / self.duration_s

    def to_dict(self) -> dict[str, Any]:
        """The figures for result.json (the time series goes to the probe's files)."""
        keys = (
            "engine", "url", "duration_s", "scrapes", "requests_finished", "prompt_tokens",
            "generated_tokens", "decode_steps", "preemptions", "busy_slots_per_decode",
            "running_mean", "waiting_mean", "kv_usage_mean", "kv_usage_max", "unavailable",
            "spec_drafts", "spec_accepted_tokens", "acceptance_length",
        )  # fmt: skip
        out: dict[str, Any] = {k: getattr(self, k) for k in keys}
        out["generated_tokens_per_s"] = self.generated_tokens_per_s
        out["decode_steps_per_s"] = self.decode_steps_per_s
        out["missing"] = list(self.missing)
        return out

    def series_rows(self) -> list[dict[str, float]]:
        """One row per scrape: seconds since the first scrape, then every figure read."""
        if not self.series:
            return []
        t0 = self.series[0].t_ns
        return [{"t_s": (s.t_ns - t0) / 1e9, **s.counters, **s.gauges} for s in self.series]


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


def summarize(samples: Sequence[EngineSample], *, engine: str | None, url: str) -> EngineWindow:
    """The window between the first and last of ``samples`` (at least two for counters)."""
    if not samples:
        return EngineWindow(engine, url, unavailable="no scrape of the engine's /metrics")
    times = [(s.t_ns - samples[0].t_ns) / 1e9 for s in samples]
    delta: dict[str, float | None] = {}
    warnings: list[str] = []
    for key in COUNTERS:
        vals = [s.counters.get(key) for s in samples]
        ok = len(samples) >= 2 and all(v is not None for v in vals)
        known = [v for v in vals if v is not None]
        shape = counter_shape(known) if ok else "rising"
        if shape == "several":
            why = f"{SEVERAL_ENGINES} (counter {key} went up and down over {len(known)} scrapes)"
            return EngineWindow(engine, url, unavailable=why, series=tuple(samples))
        if shape == "restart":
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
    for key in SPEC_COUNTERS:
        vals = [s.counters.get(key) for s in samples]
        ok = len(samples) >= 2 and all(v is not None for v in vals)
        delta[key] = counter_delta([v for v in vals if v is not None]) if ok else None
    busy = delta.pop("busy_slot_decodes")
    steps = delta["decode_steps"]
    kv = [s.gauges["kv_usage"] for s in samples if "kv_usage" in s.gauges] if inside else []
    missing = tuple(
        k for k in (*COUNTERS[:-1], *GAUGES) if (delta.get(k) if k in delta else means[k]) is None
    )
    return EngineWindow(
        engine=engine,
        url=url,
        duration_s=times[-1],
        scrapes=len(samples),
        requests_finished=delta["requests_finished"],
        prompt_tokens=delta["prompt_tokens"],
        generated_tokens=delta["generated_tokens"],
        decode_steps=steps,
        preemptions=delta["preemptions"],
        busy_slots_per_decode=busy / steps if busy is not None and steps else None,
        running_mean=means["running"],
        waiting_mean=means["waiting"],
        kv_usage_mean=means["kv_usage"],
        kv_usage_max=max(kv) if kv else None,
        spec_drafts=delta["spec_drafts"],
        spec_accepted_tokens=delta["spec_accepted_tokens"],
        missing=missing,
        series=tuple(samples),
        warnings=tuple(warnings),
    )
