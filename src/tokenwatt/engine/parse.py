"""Prometheus text → one engine sample of the canonical figures (``engine.names``).

Parsed by ``tokenwatt.promscrape`` (prometheus-client's own parser, the one the power
sources' Prometheus reader uses), so exposition quirks (escapes, ``_total`` suffixes,
histograms) are read the way Prometheus reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tokenwatt.engine.expert_counts import ExpertCounts, expert_counts
from tokenwatt.engine.names import (
    CACHE_NAMES,
    COUNTERS,
    ENGINE_NAMES,
    GAUGES,
    SPEC_NAMES,
    EngineName,
    Source,
)
from tokenwatt.promscrape import PromTextError, Series, parse_page

__all__ = ["EngineSample", "MetricsParseError", "parse_samples", "sample_from_text"]

# the one "not exposition format" error (``promscrape``), under the name engine callers use
MetricsParseError = PromTextError


@dataclass(frozen=True, slots=True)
class EngineSample:
    """The canonical figures at one scrape; ``t_ns`` on ``tokenwatt.clock``'s monotonic clock.
    Figures the engine does not expose are absent, not zero."""

    t_ns: int
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    # per-expert routed tokens where the engine counts them (``engine.expert_counts``)
    experts: ExpertCounts = field(default_factory=dict)


def parse_samples(text: str) -> dict[str, Series]:
    """Every sample in ``text`` by its exposition name, with its labels and value."""
    return parse_page(text).series


def _value(samples: Mapping[str, Series], src: Source) -> float | None:
    found = _first(samples, src)
    if found is None:
        return None
    extra = [v for name in src.plus for _, v in samples.get(name, [])]
    return found + sum(extra)


def _first(samples: Mapping[str, Series], src: Source) -> float | None:
    for name in src.names:
        series = samples.get(name)
        if series is None:
            continue
        vals = [v for labels, v in series if all(labels.get(k) == w for k, w in src.labels.items())]
        if not vals:
            continue
        return sum(vals) / len(vals) if src.mean else sum(vals)
    return None


def sample_from_text(text: str, engine: EngineName, t_ns: int) -> EngineSample:
    """The canonical figures of ``engine`` found in ``text``."""
    samples = parse_samples(text)
    names = ENGINE_NAMES[engine]
    counters = {
        k: v for k in COUNTERS if k in names and (v := _value(samples, names[k])) is not None
    }
    gauges = {k: v for k in GAUGES if k in names and (v := _value(samples, names[k])) is not None}
    optional = {**SPEC_NAMES.get(engine, {}), **CACHE_NAMES.get(engine, {})}
    for k, src in optional.items():  # speculative decoding, prefix caching: when on
        if (v := _value(samples, src)) is not None:
            counters[k] = v
    if "busy_slot_decodes" in counters:
        # llama.cpp publishes n_busy_slots_total / n_decode_total; undo the division
        counters["busy_slot_decodes"] *= counters.get("decode_steps", 0.0)
    return EngineSample(t_ns, counters, gauges, expert_counts(samples))
