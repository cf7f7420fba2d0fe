"""The engine as witness: its own /metrics counters over a probe's window.

``EngineScraper(url, engine).start()`` … ``.stop() -> result.EngineFigures``;
``compare_client_engine`` sets the client's T, B and s beside the engine's. Sits beside
client/metrics/power: it may use clock, records, result, spec, geometry and hardware, never
load, report, cli or sim.
"""

from __future__ import annotations

from tokenwatt.engine.compare import (
    AGREEMENT_TOLERANCES,
    ClientMechanisms,
    compare_client_engine,
    engine_batch_and_steps,
)
from tokenwatt.engine.names import ENGINE_NAMES, ENGINES, detect_engine
from tokenwatt.engine.parse import EngineSample, MetricsParseError, parse_samples, sample_from_text
from tokenwatt.engine.scrape import EngineScraper, fetch_text, metrics_url_for
from tokenwatt.engine.window import clip_samples, summarize, window_figures

__all__ = [
    "AGREEMENT_TOLERANCES",
    "ENGINES",
    "ENGINE_NAMES",
    "ClientMechanisms",
    "EngineSample",
    "EngineScraper",
    "MetricsParseError",
    "clip_samples",
    "compare_client_engine",
    "detect_engine",
    "engine_batch_and_steps",
    "fetch_text",
    "metrics_url_for",
    "parse_samples",
    "sample_from_text",
    "summarize",
    "window_figures",
]
