"""The engine as witness in every probe: scrape its /metrics around the window, compare.

Why here: ``tokenwatt probe`` and ``tokenwatt bench`` both measure probes; both open one
``EngineWitness`` per run and hand each probe's engine window (``result.EngineFigures``) to
``summarize_probe``, so the
engine's figures, the client-vs-engine agreements and the second MBU are derived one way.

A server without /metrics is normal (many deployments hide it): the witness says so once per
run (one warning) and stops scraping, instead of a failed scrape per probe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from tokenwatt.engine import (
    AGREEMENT_TOLERANCES,
    ClientMechanisms,
    EngineSample,
    EngineScraper,
    compare_client_engine,
    engine_batch_and_steps,
    metrics_url_for,
)
from tokenwatt.engine.align import count_on_engine_clock
from tokenwatt.engine.expert_load import expert_load_from_samples
from tokenwatt.engine.names import CACHE_COUNTERS, COUNTERS, GAUGES, SPEC_COUNTERS
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.hardware import Accelerator
from tokenwatt.load.probe import ProbeRun
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.kv_pressure import stream_stalls
from tokenwatt.metrics.mbu.spans import RequestSweep
from tokenwatt.metrics.steps import step_figures
from tokenwatt.result import EngineFigures
from tokenwatt.spec import BenchSpec, redact_text
from tokenwatt.spec.server_metrics import ServerMetricsSection

__all__ = [
    "EngineWitness",
    "ProbeEngine",
    "edge_fraction",
    "engine_figures",
    "read_engine_series",
    "write_engine_series",
]


class EngineWitness:
    """One per run: starts a scraper before each probe and stops it at the probe's end."""

    def __init__(
        self, section: ServerMetricsSection, endpoint_base_url: str, warnings: list[str]
    ) -> None:
        self.section = section
        self.url = section.url or metrics_url_for(endpoint_base_url)
        self.warnings = warnings
        self.unavailable: str | None = None
        self.engine: str | None = None if section.engine == "auto" else section.engine

    @property
    def active(self) -> bool:
        """Scrape at all: enabled in the spec and not found missing earlier in this run."""
        return self.section.enabled and self.unavailable is None

    async def start(self) -> EngineScraper | None:
        """The first scrape (blocking, so in a thread); None when not scraping.

        llama.cpp adds a request's tokens only when its slot is released, so scrapes inside
        the window would show steps and interpolating between them would mislead: for it
        only the scrapes at the start and the end are taken."""
        if not self.active:
            return None
        if self.engine is None:  # the first probe of the run: detect once
            scraper = EngineScraper(self.url, self.section.engine, interval_s=0)
            await asyncio.to_thread(scraper.start)
            self.engine = scraper.engine
            if scraper.unavailable is not None or self.engine == "llamacpp":
                return scraper
        interval_s = 0.0 if self.engine == "llamacpp" else self.section.interval_s
        scraper = EngineScraper(self.url, self.engine or "auto", interval_s=interval_s)
        return await asyncio.to_thread(scraper.start)

    async def stop(self, scraper: EngineScraper | None, run: ProbeRun) -> ProbeEngine | None:
        """The last scrape and the window cut to the client's; a first ``unavailable`` becomes
        the run's one warning and ends scraping for the rest of the run."""
        if scraper is None:
            return None
        w0, w1 = run.window_start_ns, run.window_end_ns
        window = await asyncio.to_thread(scraper.stop, (w0, w1) if w1 > w0 else None)
        if window.unavailable is not None and self.unavailable is None:
            self.unavailable = window.unavailable
            self.warnings.append(f"engine figures not measured: {redact_text(window.unavailable)}")
        for text in scraper.warnings:  # refused values, dropped scrapes, restarts: once a run
            line = redact_text(text)
            if line not in self.warnings:
                self.warnings.append(line)
        scrapes = tuple(sorted(x.t_ns for x in scraper.samples))
        counted = sorted((x for x in scraper.samples if x.experts), key=lambda x: x.t_ns)
        ends = tuple(counted[:: max(1, len(counted) - 1)][:2])  # the first and the last
        return ProbeEngine(window, edge_fraction(scraper.samples, w0, w1), scrapes, ends)


@dataclass(frozen=True, slots=True)
class ProbeEngine:
    """A probe's engine window and how finely the scrapes resolve its edges."""

    window: EngineFigures
    edge_fraction: float
    scrape_ns: tuple[int, ...] = ()  # every scrape's time: T compared on the engine's clock
    # the first and last scrape with per-expert counters: the probe's measured expert load
    expert_scrapes: tuple[EngineSample, ...] = ()

    def expert_load(self, geometry: ModelGeometry) -> ExpertLoad | None:
        """The routing the engine counted from the probe's first scrape to its last (warm-up
        and drain included: the router's law, not the window's tokens, is what W(B) needs);
        None for a dense model or an engine without per-expert counters."""
        if not geometry.is_moe or len(self.expert_scrapes) < 2:
            return None
        return expert_load_from_samples(
            self.expert_scrapes,
            experts=geometry.experts,
            k=geometry.experts_per_token,
            source=f"engine /metrics ({self.window.engine or 'engine'})",
        )


def edge_fraction(samples: Sequence[EngineSample], start_ns: int, end_ns: int) -> float:
    """(w0 − last scrape before it) + (first scrape after w1 − w1), as a fraction of the window.

    Why: the engine's counters at the window's edges are interpolated between the scrapes that
    straddle them. Where the load starts or stops at an edge (a single-stream point, a closed
    loop's last request) the engine's rate is not steady across those scrapes, and at most the
    tokens of those straddling stretches are misplaced. This bound is added to each agreement's
    tolerance, so a disagreement is only claimed beyond what the scrapes can resolve.
    """
    if end_ns <= start_ns:
        return 0.0
    times = sorted(x.t_ns for x in samples)
    before = [t for t in times if t <= start_ns]
    after = [t for t in times if t >= end_ns]
    lead = start_ns - before[-1] if before else 0
    tail = after[0] - end_ns if after else 0
    return (lead + tail) / (end_ns - start_ns)


def write_engine_series(scraper: EngineScraper | None, path: Path) -> str | None:
    """Every scrape of the probe (warm-up and drain included, not cut to the window) as JSON
    lines: ``t_ns`` on the client's clock (compare with the probe's ``window_start_ns``),
    ``t_s`` since the first scrape, then every figure read. Returns the file's name."""
    samples = [] if scraper is None else sorted(scraper.samples, key=lambda x: x.t_ns)
    if not samples:
        return None
    t0 = samples[0].t_ns
    rows = [{"t_ns": x.t_ns, "t_s": (x.t_ns - t0) / 1e9, **x.counters, **x.gauges} for x in samples]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path.name


def read_engine_series(path: Path) -> list[EngineSample]:
    """The scrapes ``write_engine_series`` wrote, as samples again: a probe's engine window
    can be re-derived from its files (``clip_samples`` + ``summarize``), like its requests."""
    out: list[EngineSample] = []
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        keys = (*COUNTERS, *SPEC_COUNTERS, *CACHE_COUNTERS)  # optional ones where written
        counters = {k: float(row[k]) for k in keys if k in row}
        gauges = {k: float(row[k]) for k in GAUGES if k in row}
        out.append(EngineSample(int(row["t_ns"]), counters, gauges))
    return out


def _engine_mbu(
    run: ProbeRun,
    *,
    spec: BenchSpec,
    geometry: ModelGeometry,
    accelerator: Accelerator,
    batch: float,
    steps_per_s: float,
) -> float | None:
    """MBU with the engine's B and s in place of the client's: T = B·s·R, τ = 1/s."""
    pairs = [(r.prompt_tokens, r.output_tokens) for r in run.counted if r.prompt_tokens is not None]
    context, kv_per_token = kv_read_per_output_token(geometry, pairs)
    hw = spec.hardware
    mbu = compute_mbu(
        geometry,
        output_tokens_per_s=batch * steps_per_s * hw.replicas,
        itl_token_weighted_s=1.0 / steps_per_s,
        replicas=hw.replicas,
        gpus=hw.gpus,
        bandwidth_bytes_per_s=accelerator.bandwidth_bytes_per_s,
        mean_context_per_token=context,
        kv_bytes_per_output_token=kv_per_token,
    )
    return mbu.mbu


def engine_figures(
    probe_engine: ProbeEngine,
    run: ProbeRun,
    spec: BenchSpec,
    geometry: ModelGeometry | None,
    accelerator: Accelerator | None,
    *,
    sweep: RequestSweep | None = None,
) -> EngineFigures:
    """The window's engine figures, the T/B/s agreements and the engine-side MBU (``sweep``:
    the probe's records swept once, shared with its MBU)."""
    window, edge = probe_engine.window, probe_engine.edge_fraction  # edge: reported only
    # a /metrics URL may carry user:pass@ or a token
    redacted: dict[str, object] = {"url": redact_text(window.url)}
    if window.unavailable is not None:
        redacted["unavailable"] = redact_text(window.unavailable)
        return window.model_copy(update=redacted)
    m = run.metrics
    replicas = spec.hardware.replicas
    batch, steps = engine_batch_and_steps(window, replicas)
    agreements = []
    if m.output_tokens_per_s is not None and m.itl_token_weighted_s:
        agreements = compare_client_engine(
            client_tokens_per_s=m.output_tokens_per_s,
            client_tau_s=m.itl_token_weighted_s,
            replicas=replicas,
            window=window,
            tokens_per_chunk=m.tokens_per_chunk_mean or 1.0,
            tolerances=AGREEMENT_TOLERANCES,
            client_tokens_per_s_engine_clock=_tokens_on_engine_clock(run, probe_engine),
            mechanisms=_mechanisms(run, replicas, sweep),
            client_steps=_client_steps(run),
            requests_in_window=sum(
                1
                for r in run.records
                if r.done_ns is not None and run.window_start_ns <= r.done_ns < run.window_end_ns
            ),
        )
    mbu = None
    if geometry is not None and accelerator is not None and batch and steps:
        mbu = _engine_mbu(
            run,
            spec=spec,
            geometry=geometry,
            accelerator=accelerator,
            batch=batch,
            steps_per_s=steps,
        )
    return window.model_copy(
        update={
            **redacted,
            "batch_per_replica": batch,
            "steps_per_s_per_replica": steps,
            "mbu": mbu,
            "agreements": agreements,
            "edge_fraction": edge,
        }
    )


def _client_steps(run: ProbeRun) -> tuple[float, float] | None:
    """(acceptance length, ITL per chunk) when the chunks show speculative decoding."""
    f = step_figures(run.counted)
    if f.speculation == "none" or f.coalesced or not f.acceptance_length or not f.itl_chunk_s:
        return None
    return f.acceptance_length, f.itl_chunk_s


def _tokens_on_engine_clock(run: ProbeRun, probe_engine: ProbeEngine) -> float | None:
    """The client's tokens per second as the engine's counter shows them (``engine.align``):
    at every chunk (llama.cpp: at each request's end, when it releases the slot)."""
    w0, w1 = run.window_start_ns, run.window_end_ns
    if w1 <= w0 or not probe_engine.scrape_ns:
        return None
    events: list[tuple[int, float]] = []
    for r in run.records:
        if probe_engine.window.engine == "llamacpp":
            if r.done_ns is not None and r.output_tokens:
                events.append((r.done_ns, float(r.output_tokens)))
        else:
            events.extend(zip(r.chunk_ns, map(float, r.chunk_tokens), strict=True))
    count = count_on_engine_clock(events, probe_engine.scrape_ns, w0, w1)
    return None if count is None else count / ((w1 - w0) / 1e9)


def _mechanisms(run: ProbeRun, replicas: int, sweep: RequestSweep | None) -> ClientMechanisms:
    """The shares the client measured that can explain B and s (``engine.ClientMechanisms``),
    from the records swept once (``sweep``: the one MBU read, when the caller has it)."""
    w0, w1 = run.window_start_ns, run.window_end_ns
    sweep = sweep if sweep is not None else RequestSweep(run.records, replicas)
    totals = sweep.spans.totals(w0, w1)
    stalls = stream_stalls(run.records, run.counted, w0, w1, replicas)
    law = sweep.gaps.law(w0, w1, replicas)
    return ClientMechanisms(
        decode_share=None if replicas != 1 or totals is None else totals.decode_share,
        idle_share=None if totals is None else totals.idle_fraction,
        prompt_only_share=None if totals is None else totals.prefill_only_fraction,
        stalled_share=stalls.stalled_s / stalls.decode_s
        if stalls.stalls and stalls.decode_s
        else None,
        steps_per_s=None if law is None else law.steps_per_s,
        step_batch=None if law is None else law.mean_batch,
        window_tau_s=sweep.gaps.tau_s(w0, w1),
    )
