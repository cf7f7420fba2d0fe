"""One measured probe, the one orchestration ``tokenwatt probe`` and ``tokenwatt bench`` share.

``measure_probe`` runs the probe window (``load.probe.run_probe``) between the engine
witness's first and last scrape (``load.engine_probe``), writes the engine series, takes the
probe's energy over its exact window (``load.energy_window``) and derives every figure, the
verdict and MBU (``load.derive.summarize_probe``). ``load.bench`` calls it for each probe of a
search; ``probe_command`` below is the whole of ``tokenwatt probe``: the node, the target, the
power monitor, one ``measure_probe`` and the probe's ``result.json`` (the layout ``bench``
writes, with one probe, so ``tokenwatt report`` and ``compare`` read either folder alike).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tokenwatt import __version__
from tokenwatt.errors import TokenwattError
from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.config import preset_stand_in
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.load.derive import early_stop_for, summarize_probe
from tokenwatt.load.energy_window import open_probe_power, power_warnings, probe_energy
from tokenwatt.load.engine_probe import EngineWitness, write_engine_series
from tokenwatt.load.fit import check_fits
from tokenwatt.load.probe import LateFirstTokens, ProbeProgress, ProbeRun, run_probe
from tokenwatt.load.spill import RecordSpill
from tokenwatt.load.target import SimMode, Target, open_target, resolve_accelerator
from tokenwatt.metrics.latency import ProbeMetrics, sent_late
from tokenwatt.power import PowerMonitor
from tokenwatt.records import RequestRecord
from tokenwatt.result import BenchResult, LoadGenerator, ProbeSummary, write_result
from tokenwatt.spec import BenchSpec, ProbeSettings

__all__ = [
    "ProbeFiles",
    "ProbeLoad",
    "ProbeProgress",
    "ProbeRequest",
    "ProbeSetup",
    "SimMode",
    "measure_probe",
    "probe_command",
    "probe_node",
    "warnings_for",
]

StopTest = Callable[[Sequence[RequestRecord]], bool]


@dataclass(frozen=True, slots=True)
class ProbeSetup:
    """Where and with what a probe is measured: the spec, the open target, the node (None
    pieces: no MBU), the power monitor and the engine witness (None: not scraped)."""

    spec: BenchSpec
    target: Target
    geometry: ModelGeometry | None
    accelerator: Accelerator | None
    monitor: PowerMonitor | None
    witness: EngineWitness | None


@dataclass(frozen=True, slots=True)
class ProbeLoad:
    """What one probe sends and when it stops: the load (rate or closed loop), its seed and
    window settings, and the caller's progress and stop hooks (``load.probe.run_probe``)."""

    rate_rps: float | None
    seed: int
    settings: ProbeSettings | None = None
    concurrency: int | None = None
    max_requests: int | None = None
    on_progress: Callable[[ProbeProgress], None] | None = None
    should_stop: StopTest | None = None
    should_close: StopTest | None = None
    late: LateFirstTokens | None = None
    on_record: Callable[[RequestRecord], None] | None = None


@dataclass(frozen=True, slots=True)
class ProbeFiles:
    """The probe's files: its index, its folder, the requests file's name (written before
    the last engine scrape unless ``write_requests`` is off: ``probe`` spills it as requests
    end and writes it last) and the engine series file's name."""

    index: int
    out_dir: Path
    requests_file: str
    engine_file: str
    write_requests: bool = True
    phase: str | None = None
    record_max_requests: bool = True  # the run record names ``max_requests`` (bench: not)


async def measure_probe(
    setup: ProbeSetup,
    load: ProbeLoad,
    files: ProbeFiles,
    early_stop_reason: Callable[[ProbeRun], str | None],
) -> tuple[ProbeRun, ProbeSummary]:
    """One probe, measured: the window between the engine's scrapes, the engine series, the
    energy over the window and the derived summary (``early_stop_reason`` reads the run)."""
    spec, witness = setup.spec, setup.witness
    scraper = None if witness is None else await witness.start()
    run = await run_probe(
        spec,
        setup.target.client,
        rate_rps=load.rate_rps,
        seed=load.seed,
        settings=load.settings,
        concurrency=load.concurrency,
        max_requests=load.max_requests,
        on_progress=load.on_progress,
        should_stop=load.should_stop,
        on_record=load.on_record,
        should_close=load.should_close,
        late=load.late,
    )
    if files.write_requests:
        await asyncio.to_thread(run.write_requests, files.out_dir / files.requests_file)
    window = None if witness is None else await witness.stop(scraper, run)
    files.out_dir.mkdir(parents=True, exist_ok=True)
    series_file = write_engine_series(scraper, files.out_dir / files.engine_file)
    energy, power_series = await probe_energy(setup.monitor, run, setup.accelerator)
    summary = summarize_probe(
        index=files.index,
        run=run,
        spec=spec,
        geometry=setup.geometry,
        accelerator=setup.accelerator,
        energy=energy,
        power_series=power_series,
        early_stop_reason=early_stop_reason(run),
        requests_file=files.requests_file,
        phase=files.phase,
        engine_window=window,
        engine_series_file=series_file,
        max_requests=load.max_requests if files.record_max_requests else None,
    )
    return run, summary


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """``tokenwatt probe``'s load: a rate (open loop) or a concurrency (closed loop), an
    optional exact request count, the seed, and how the simulator runs."""

    rate_rps: float | None
    concurrency: int | None
    max_requests: int | None
    seed: int
    sim_mode: SimMode = "subprocess"


async def probe_command(
    spec: BenchSpec,
    request: ProbeRequest,
    out: Path,
    on_progress: Callable[[ProbeProgress], None] | None = None,
) -> BenchResult:
    """The whole of ``tokenwatt probe``: one probe with its engine witness and its energy,
    measured as ``bench`` measures each of its probes; writes requests.jsonl and result.json
    (the exports beside it are the report layer's: the command writes them)."""
    geometry, accelerator, geometry_error = probe_node(spec)
    spill = _fresh_spill(out)
    async with open_target(spec, sim_mode=request.sim_mode) as target:
        monitor = open_probe_power(spec, accelerator, target.metrics_url)
        try:
            setup = ProbeSetup(spec, target, geometry, accelerator, monitor, None)
            result = await _measure_one(setup, request, spill, out, on_progress)
        finally:
            await asyncio.to_thread(monitor.close)
    result.mbu_unavailable = geometry_error
    write_result(result, out)
    return result


async def _measure_one(
    setup: ProbeSetup,
    request: ProbeRequest,
    spill: RecordSpill,
    out: Path,
    on_progress: Callable[[ProbeProgress], None] | None,
) -> BenchResult:
    """The probe's one ``measure_probe`` (early stop by the fixed window's binomial test),
    its warnings, and its requests.jsonl."""

    spec = setup.spec
    started_at = dt.datetime.now(dt.UTC)
    stopper = early_stop_for(spec, request.rate_rps, spec.search.probe)
    engine_warnings: list[str] = []
    witness = EngineWitness(spec.server_metrics, setup.target.base_url, engine_warnings)

    def progress(p: ProbeProgress) -> None:
        if stopper is not None:
            stopper.on_counted(p.counted)
        if on_progress is not None:
            on_progress(p)

    load = ProbeLoad(request.rate_rps, request.seed, concurrency=request.concurrency,
                     max_requests=request.max_requests, on_progress=progress,
                     should_stop=stopper, on_record=spill)  # fmt: skip
    files = ProbeFiles(1, out, "requests.jsonl", "engine.jsonl", write_requests=False)
    try:
        run, summary = await measure_probe(
            replace(setup, witness=witness),
            load,
            files,
            lambda _run: stopper.reason if stopper is not None else None,
        )
    finally:
        spill.close()
    result = _probe_result(setup, run, summary, started_at)
    if spill.error is not None:
        result.warnings.append(f"incremental requests.jsonl stopped: {spill.error}")
    monitor = setup.monitor
    assert monitor is not None  # probe_command always opens one (it may have no source)
    result.warnings += engine_warnings + power_warnings(monitor)
    result.warnings += _probe_notes(run, setup.geometry)
    result.warnings.extend(_keep_up_warnings(summary.load_generator))
    run.write_requests(out / "requests.jsonl")
    return result


def _probe_result(
    setup: ProbeSetup, run: ProbeRun, summary: ProbeSummary, started_at: dt.datetime
) -> BenchResult:
    """The probe's ``result.json``: the layout ``bench`` writes (one probe, no search)."""
    spec = setup.spec
    result = BenchResult.begin(
        spec,
        setup.geometry,
        setup.accelerator,
        tool_version=__version__,
        timestamp_source=run.metrics.timestamp_source,
        started_at=started_at,
    )
    result.ended_at = dt.datetime.now(dt.UTC)
    result.probes = [summary]
    result.interrupted = run.interrupted
    result.warnings = warnings_for(run.metrics)
    result.target = setup.target.record(spec.sim)
    return result


def warnings_for(m: ProbeMetrics) -> list[str]:
    """What a reader must know before trusting the figures."""
    out = []
    if m.requests_counted == 0:
        out.append("no request was counted: the window was empty")
    if m.multi_token_chunks:
        out.append(
            "the server sends several tokens per chunk: chunk ITL is not per-token timing and "
            "MBU's steps/s (1/τ) is overstated"
        )
    if m.timestamp_source == "user":
        out.append("no kernel receive timestamps here: chunk times were taken in user space")
    bal = m.throughput_balance
    if bal is not None and not 0.9 <= bal <= 1.1:
        out.append(
            f"the counted requests delivered {bal:.2f}× the tokens received inside the window: "
            "not at steady state (a window too short for a request's lifetime, or a queue "
            "that grows under overload)"
        )
    p99 = m.send_lateness_s.p99
    if sent_late(p99, m.counted_requests_per_s):
        out.append(
            f"the client sent late (p99 {(p99 or 0) * 1e3:.1f} ms, over 10% of the mean gap "
            "between arrivals): it may be the bottleneck"
        )
    if m.usage_fallback_requests:
        out.append(
            f"{m.usage_fallback_requests} requests had no server usage: token counts are the "
            "client's fallback"
        )
    return out


def probe_node(spec: BenchSpec) -> tuple[ModelGeometry | None, Accelerator | None, str | None]:
    """The model and accelerator, checked to fit (a stated node that cannot hold the model is
    refused); for a remote endpoint an unreadable config only costs MBU (the error is kept)."""
    try:
        m = spec.model
        geometry = load_geometry(
            m.source,
            weight_dtype=m.weight_dtype,
            kv_dtype=m.kv_dtype,
            overrides=m.overrides or None,
        )
        accelerator = resolve_accelerator(spec.hardware)
    except TokenwattError as exc:
        if spec.endpoint.is_sim:
            raise
        return None, None, str(exc)  # a remote endpoint can still be probed; MBU is then absent
    check_fits(spec, geometry, accelerator)
    return geometry, accelerator, None


def _probe_notes(run: ProbeRun, geometry: ModelGeometry | None) -> list[str]:
    """Warnings the terminal must show: stray answers, a preset standing in for a repo id."""
    notes = []
    if run.stray_answers:
        notes.append(
            f"the server wrote {run.stray_answers} answer(s) no request was waiting for (late "
            "or stale, on a reused connection): each such connection was closed and none was "
            "reused after the first; requests whose answer could not be told from an earlier "
            "one are protocol errors; check a proxy that retries or replays responses"
        )
    if geometry is not None and (note := preset_stand_in(geometry.source)) is not None:
        notes.append(note)
    return notes


def _keep_up_warnings(lg: LoadGenerator | None) -> list[str]:
    """Printed: the bottleneck verdict with every failed keep-up check, or lost workers; the
    other checks (late with CPU to spare) stay in result.json's ``load_generator``."""
    if lg is None:
        return []
    if lg.bottleneck:
        head = "the load generator was the bottleneck, not the server: use more workers"
        return [f"{head} (--workers N)", *(f"keep-up: {p}" for p in lg.problems)]
    return [f"keep-up: {p}" for p in lg.problems if "ended early" in p]


def _fresh_spill(out: Path) -> RecordSpill:
    """The incremental ``requests.jsonl``; a rerun into the same folder starts it afresh."""
    spill = RecordSpill(out / "requests.jsonl")
    if spill.path.exists():
        spill.path.unlink()
    return spill
