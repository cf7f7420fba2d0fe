"""CLI: ``tokenwatt probe SPEC --rate R``: one probe at one offered load.

Writes ``DIR/result.json`` (the typed result ``bench`` writes, with one probe: the spec with
secrets removed, every figure, the SLO verdict, MBU with its inputs, and the probe's own run
record with the client's clock facts), its exports (BR0.2, ``probes.csv``) and
``DIR/requests.jsonl`` (one record per request, with its phase), prints a summary, and shows a
live progress bar.
Ctrl-C or SIGTERM (foreground or background) stops the probe, writes what was measured and
exits 130 or 143; ``requests.jsonl`` grows as requests end (``load.spill``), so even a hard
kill keeps every finished record. An error probe (the endpoint failed over
``slo.max_error_rate``) or a saturated load generator exits 3: the verdict is not an SLO one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tokenwatt.cli._workers import RayOption, WorkersOption, with_senders
from tokenwatt.cli.options import (
    ApiOption,
    BandwidthOption,
    BaseUrlOption,
    GpusOption,
    HardwareOption,
    ModelOption,
    OverwriteOption,
    ReplicasOption,
    SetOption,
    SloTpotOption,
    SloTtftOption,
    SpecArgument,
)
from tokenwatt.cli.peer_flags import (
    ConcurrencyOption,
    DatasetNameOption,
    DatasetOption,
    IgnoreEosOption,
    InputTokensOption,
    MaxConcurrencyOption,
    MaxRequestsOption,
    OutputTokensOption,
    PeerFlags,
    RateOption,
    RateTypeOption,
    SeedOption,
    StreamingOption,
    check_window,
    show_notes,
)
from tokenwatt.errors import SpecError

if TYPE_CHECKING:
    from tokenwatt.geometry.model import ModelGeometry
    from tokenwatt.hardware import Accelerator
    from tokenwatt.load.engine_probe import ProbeEngine
    from tokenwatt.load.probe import ProbeProgress, ProbeRun
    from tokenwatt.load.spill import RecordSpill
    from tokenwatt.load.target import Target
    from tokenwatt.metrics.latency import ProbeMetrics
    from tokenwatt.power import PowerMonitor
    from tokenwatt.result import (
        BenchResult,
        EnergySummary,
        LoadGenerator,
        ProbeSummary,
        StepSummary,
    )
    from tokenwatt.spec import BenchSpec

T = TypeVar("T")
console = Console()


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1e3:.1f}"


def _num(v: float | None, fmt: str = ".2f") -> str:
    return "–" if v is None or not math.isfinite(v) else format(v, fmt)


def warnings_for(m: ProbeMetrics) -> list[str]:
    """What a reader must know before trusting the figures."""
    from tokenwatt.metrics.latency import sent_late

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


def summary_table(result: BenchResult) -> Table:
    """The probe's figures from its ``result.json`` record, with the words every view uses:
    offered (asked for), counted (in the window), achieved (succeeded) per second."""
    from tokenwatt.report.labels import accuracy_text
    from tokenwatt.result import Latency

    p = result.probes[0]
    t = Table(title=_title(result), show_header=True, header_style="bold")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("load", _load_text(p))
    t.add_row("window", f"{p.window_s:.1f} s, {p.requests_counted} requests counted")
    t.add_row("output tokens/s (T)", _num(p.output_tokens_per_s, ".1f"))
    t.add_row("τ token-weighted ITL, ms", _ms(p.itl_token_weighted_s))
    for name, d in (("TTFT", p.ttft_s), ("TPOT", p.tpot_s), ("chunk ITL", p.itl_s),
                    ("E2E", p.e2e_s)):  # fmt: skip
        t.add_row(f"{name} ms (mean / p50 / p99)", f"{_ms(d.mean)} / {_ms(d.p50)} / {_ms(d.p99)}")
    _step_rows(t, p.steps)
    t.add_row("mean concurrency (Little)", _num(p.mean_concurrency))
    t.add_row("mean context per token", _num(p.mean_context_per_token, ".1f"))
    from tokenwatt.report.terminal import agent_rows

    for label, text in agent_rows(p):  # agent traces: sessions held, prefix-cache hit rates
        t.add_row(label, text)
    if p.attainment is not None:
        t.add_row("SLO attainment", f"{p.attainment:.1%}")
        good_rps = _num(p.run.goodput_requests_per_s if p.run is not None else None)
        good_tps = _num(p.goodput_output_tokens_per_s, ".1f")
        t.add_row("goodput req/s / tokens/s", f"{good_rps} / {good_tps}")
    if p.accuracy is not None:
        t.add_row("graded answers (accuracy)", accuracy_text(p.accuracy))
    reason = escape(str(p.slo_detail.reason))
    t.add_row("SLO verdict", "[green]pass[/]" if p.slo_passed else f"[red]fail[/] ({reason})")
    errors = ", ".join(f"{k} {v}" for k, v in p.errors_by_kind.items()) or "none"
    t.add_row("failed requests", f"{p.requests_failed} ({errors})")
    # cancelled by the client (still running at the probe's end, or an early stop): their own
    # kind, neither failures nor judged for attainment
    t.add_row("cancelled requests", f"{p.requests_cancelled} (not failures, not judged)")
    lat = p.send_lateness_s or Latency()
    t.add_row("send lateness ms (p50 / p99)", f"{_ms(lat.p50)} / {_ms(lat.p99)}")
    _mbu_rows(t, p)
    _energy_rows(t, p)
    return t


def _simulated(result: BenchResult) -> bool:
    return result.simulated


def _title(result: BenchResult) -> str:
    """The table's title: a simulated probe says so on the table itself."""
    from tokenwatt.report.labels import SIMULATED

    return (
        f"probe · [bold magenta]{SIMULATED}[/] (tokenwatt sim)" if _simulated(result) else "probe"
    )


def _load_text(p: ProbeSummary) -> str:
    """One line for the load: what was asked for, what the window held, what succeeded (they
    differ by Poisson noise and failures; the verdict speaks for the counted rate)."""
    unit = {"sessions": "sessions/s", "turns": "turns/s"}.get(p.rate_unit, "req/s")
    held = f"{_num(p.counted_rate_rps)} counted, {_num(p.achieved_rate_rps)} achieved req/s"
    if p.rate_rps is not None:
        arrival = p.run.arrival if p.run is not None else "poisson"
        return f"{p.rate_rps:g} {unit} offered ({arrival}), {held}"
    return f"concurrency {p.concurrency}, {held}"


def _energy_rows(t: Table, p: ProbeSummary) -> None:
    """Tokens per joule (or why not), both J-per-token figures, each source's audit verdict
    and $/Mtok: the rows ``bench``'s report has, from the same ``EnergySummary``."""
    e = p.energy
    if e is None:
        t.add_row("tokens per joule", "not measured (no power source in the spec)")
    else:
        from tokenwatt.report.labels import power_mark

        mark = power_mark(e)
        t.add_row(
            "tokens per joule",
            f"{_num(e.tokens_per_joule, '.3g')} ({e.scope} scope, {e.source}, "
            f"{e.kind}{f', {mark}' if mark else ''})",
        )
        t.add_row(
            "J per output / total token",
            f"{_num(e.joules_per_output_token, '.3g')} / {_num(e.joules_per_total_token, '.3g')}",
        )
        for a in e.audit:
            verdict = "[green]valid[/]" if a.valid else f"[red]{escape(a.verdict)}[/]"
            t.add_row(f"power {a.source} ({a.scope}, {a.method})", verdict)
    if p.cost is not None and p.cost.usd_per_mtok is not None:
        t.add_row("$/Mtok at this goodput", _num(p.cost.usd_per_mtok, ".4g"))


def _step_rows(t: Table, steps: StepSummary | None) -> None:
    """Engine steps as the chunks show them (methodology "Speculative decoding"): shown when
    a step is not one token (speculation or coalescing), where ITL per chunk ≠ per token."""
    if steps is None or (steps.speculation == "none" and not steps.coalesced):
        return
    kind = "coalesced chunks" if steps.coalesced else f"speculation {steps.speculation}"
    t.add_row("ITL per chunk / per token, ms",
              f"{_ms(steps.itl_chunk_s)} / {_ms(steps.itl_token_s)} ({kind})")  # fmt: skip
    alpha = _num(steps.acceptance_length, ".3f")
    if steps.engine_acceptance_length is not None:
        alpha += f" (engine {steps.engine_acceptance_length:.3f})"
    t.add_row("steps/s per sequence, acceptance length", f"{_num(steps.steps_per_s)}, {alpha}")


def _mbu_rows(t: Table, p: ProbeSummary) -> None:
    """Both MBU figures, every raised flag with its direction, and the refusal line of an MBU
    above 100 % (``metrics.mbu.check_rated_bandwidth``)."""
    from tokenwatt.report.mbu_text import mbu_figures_text, raised_flags

    detail = p.mbu_detail
    if detail is None and p.mbu is None:
        return
    refused = detail is not None and detail.flags.above_rated_bandwidth
    text = escape(mbu_figures_text(p.mbu, detail))
    t.add_row("MBU", f"[bold red]{text}[/]" if refused else text)
    for f in raised_flags(detail):
        t.add_row("MBU flag", escape(f))
    if refused and detail is not None:
        t.add_row("MBU error", f"[red]{escape(detail.notes[0])}[/]")


def probe_result(
    spec: BenchSpec,
    run: ProbeRun,
    target: Target,
    *,
    max_requests: int | None,
    geometry_error: str | None,
    geometry: ModelGeometry | None,
    accelerator: Accelerator | None,
    early_stop_reason: str | None,
    started_at: dt.datetime,
    engine_window: ProbeEngine | None = None,
    engine_series_file: str | None = None,
    energy: EnergySummary | None = None,
    power_series: list[tuple[float, float]] | None = None,
) -> BenchResult:
    """The probe's ``result.json``: the layout ``bench`` writes (one probe, no search), so
    ``tokenwatt report`` and ``compare`` read a probe's folder like a bench's."""
    from tokenwatt import __version__
    from tokenwatt.load.derive import summarize_probe
    from tokenwatt.result import BenchResult

    summary = summarize_probe(
        index=1,
        run=run,
        spec=spec,
        geometry=geometry,
        accelerator=accelerator,
        early_stop_reason=early_stop_reason,
        requests_file="requests.jsonl",
        engine_window=engine_window,
        engine_series_file=engine_series_file,
        energy=energy,
        power_series=power_series,
        max_requests=max_requests,
    )
    result = BenchResult.begin(
        spec,
        geometry,
        accelerator,
        tool_version=__version__,
        timestamp_source=run.metrics.timestamp_source,
        started_at=started_at,
    )
    result.ended_at = dt.datetime.now(dt.UTC)
    result.probes = [summary]
    result.interrupted = run.interrupted
    result.warnings = warnings_for(run.metrics)
    result.target = target.record(spec.sim)
    result.mbu_unavailable = geometry_error
    return result


class _Bar:
    """A rich progress bar fed by ``ProbeProgress`` snapshots."""

    def __init__(self, progress: Progress, warmup_s: float) -> None:
        self.progress = progress
        self.warmup_s = warmup_s
        self.task = progress.add_task("starting", total=None)

    def __call__(self, p: ProbeProgress) -> None:
        if p.phase == "warmup":
            total, done = self.warmup_s, p.elapsed_s
        elif p.phase == "window":
            if p.max_requests is not None:
                total, done = float(p.max_requests), float(p.counted)
            else:
                total, done = p.min_duration_s, p.window_elapsed_s
        else:
            total, done = float(max(p.counted, 1)), float(p.counted_finished)
        desc = (
            f"{p.phase:<7} sent {p.sent} · in flight {p.in_flight} · counted {p.counted} "
            f"· done {p.counted_finished} · failed {p.counted_failed}"
        )
        self.progress.update(self.task, description=desc, total=max(total, 1e-9), completed=done)


def _node_of(spec: BenchSpec) -> tuple[ModelGeometry | None, Accelerator | None, str | None]:
    """The model and accelerator, checked to fit (a stated node that cannot hold the model is
    refused); for a remote endpoint an unreadable config only costs MBU (the error is kept)."""
    from tokenwatt.errors import TokenwattError
    from tokenwatt.geometry import load_geometry
    from tokenwatt.load.fit import check_fits
    from tokenwatt.load.target import resolve_accelerator

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


async def _probe(
    spec: BenchSpec,
    *,
    rate: float | None,
    concurrency: int | None,
    max_requests: int | None,
    seed: int,
    out: Path,
    sim_mode: Literal["thread", "subprocess"],
    quiet: bool,
) -> BenchResult:
    from tokenwatt.load.energy_window import open_probe_power
    from tokenwatt.load.target import open_target

    geometry, accelerator, geometry_error = _node_of(spec)
    spill = _fresh_spill(out)
    async with open_target(spec, sim_mode=sim_mode) as target:
        monitor = open_probe_power(spec, accelerator, target.metrics_url)
        try:
            result = await _measure(
                spec, target, monitor, spill, out, geometry, accelerator, geometry_error,
                rate=rate, concurrency=concurrency, max_requests=max_requests, seed=seed,
                quiet=quiet,
            )  # fmt: skip
        finally:
            await asyncio.to_thread(monitor.close)
    return result


async def _measure(  # noqa: PLR0917 - the probe's node, target, power and flags
    spec: BenchSpec,
    target: Target,
    monitor: PowerMonitor,
    spill: RecordSpill,
    out: Path,
    geometry: ModelGeometry | None,
    accelerator: Accelerator | None,
    geometry_error: str | None,
    *,
    rate: float | None,
    concurrency: int | None,
    max_requests: int | None,
    seed: int,
    quiet: bool,
) -> BenchResult:
    """One probe with its engine witness and its energy, measured exactly as ``bench`` does
    (``load.energy_window``); writes requests.jsonl and result.json (with the exports)."""
    from tokenwatt.load.derive import early_stop_for
    from tokenwatt.load.energy_window import power_warnings, probe_energy
    from tokenwatt.load.engine_probe import EngineWitness, write_engine_series
    from tokenwatt.load.probe import run_probe

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=quiet,
    )  # fmt: skip
    started_at = dt.datetime.now(dt.UTC)
    with progress:
        bar = _Bar(progress, spec.search.probe.warmup_s)
        stopper = early_stop_for(spec, rate, spec.search.probe)
        engine_warnings: list[str] = []
        witness = EngineWitness(spec.server_metrics, target.base_url, engine_warnings)
        scraper = await witness.start()

        def on_progress(p: ProbeProgress) -> None:
            if stopper is not None:
                stopper.on_counted(p.counted)
            bar(p)

        run = await run_probe(
            spec,
            target.client,
            rate_rps=rate,
            seed=seed,
            concurrency=concurrency,
            max_requests=max_requests,
            on_progress=on_progress,
            should_stop=stopper,
            on_record=spill,
        )
        window = await witness.stop(scraper, run)
    spill.close()
    out.mkdir(parents=True, exist_ok=True)
    series_file = write_engine_series(scraper, out / "engine.jsonl")
    energy, power_series = await probe_energy(monitor, run, accelerator)
    result = probe_result(
        spec,
        run,
        target,
        max_requests=max_requests,
        geometry_error=geometry_error,
        geometry=geometry,
        accelerator=accelerator,
        early_stop_reason=stopper.reason if stopper is not None else None,
        started_at=started_at,
        engine_window=window,
        engine_series_file=series_file,
        energy=energy,
        power_series=power_series,
    )
    if spill.error is not None:
        result.warnings.append(f"incremental requests.jsonl stopped: {spill.error}")
    result.warnings += engine_warnings + power_warnings(monitor)
    result.warnings += _probe_notes(run, geometry)
    result.warnings.extend(_keep_up_warnings(result.probes[0].load_generator))
    run.write_requests(out / "requests.jsonl")
    write_probe_result(result, out)
    return result


def _probe_notes(run: ProbeRun, geometry: ModelGeometry | None) -> list[str]:
    """Warnings the terminal must show: stray answers, a preset standing in for a repo id."""
    from tokenwatt.geometry.config import preset_stand_in

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


def write_probe_result(result: BenchResult, out: Path) -> None:
    """``result.json``, the probe's one file of figures, and the exports ``bench`` writes
    beside it (the llm-d Benchmark Report, ``probes.csv``)."""
    from tokenwatt.report.exports import write_exports
    from tokenwatt.result import write_result

    write_result(result, out)
    write_exports(result, out)


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
    from tokenwatt.load.spill import RecordSpill

    spill = RecordSpill(out / "requests.jsonl")
    if spill.path.exists():
        spill.path.unlink()
    return spill


def _exit_for(result: BenchResult) -> None:
    """Exit 128 + the signal for a stopped probe; 3 when the verdict is not an SLO one (an
    error probe, a saturated or failed load generator)."""
    if result.interrupted:
        from tokenwatt.cli._loop import stop_exit_code

        console.print("[yellow]interrupted:[/] wrote what was measured")
        # SystemExit, not typer.Exit: the app runs with standalone_mode=False, where click
        # returns an Exit's code instead of exiting with it.
        raise SystemExit(stop_exit_code())
    detail = result.probes[0].slo_detail
    if detail.error_probe or detail.load_generator_saturated or detail.load_generator_failed:
        console.print(f"[red]no SLO verdict:[/] {escape(str(detail.reason))}")
        raise SystemExit(3)


def _print_engine(result: BenchResult) -> None:
    """The client-vs-engine table of the probe, when the engine was scraped."""
    from tokenwatt.report.terminal import engine_table

    table = engine_table(result.probes[0], simulated=_simulated(result))
    if table is not None:
        console.print(table)


def _with_flags(spec: BenchSpec, *, duration: float | None, warmup: float | None) -> BenchSpec:
    """The spec with ``--duration``/``--warmup`` applied to its probe settings."""
    changes: dict[str, Any] = {}
    if duration is not None:
        if not duration > 0:
            raise SpecError(f"--duration must be > 0 s, got {duration}")
        changes.update(min_duration_s=duration, max_duration_s=duration, min_requests=1)
    if warmup is not None:
        if warmup < 0:
            raise SpecError(f"--warmup must be >= 0 s, got {warmup}")
        changes["warmup_s"] = warmup
    if not changes:
        return spec
    probe_settings = spec.search.probe.model_copy(update=changes)
    search = spec.search.model_copy(update={"probe": probe_settings})
    return spec.model_copy(update={"search": search})


def _check_flags(
    sim_mode: str, rate: float | None, concurrency: int | None, max_requests: int | None
) -> None:
    if sim_mode not in ("thread", "subprocess"):
        raise SpecError(f"--sim-mode: {sim_mode!r} is not one of thread, subprocess")
    if rate is not None and concurrency is not None:
        raise SpecError("give --rate (open loop) or --concurrency (closed loop), not both")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise SpecError(f"--rate must be a positive number of requests/s, got {rate}")
    if max_requests is not None and max_requests < 1:
        raise SpecError("--max-requests must be at least 1")


def _show(result: BenchResult, folder: Path) -> None:
    if _simulated(result):
        from tokenwatt.report.labels import SIMULATED_NOTE

        console.print(f"[bold magenta]{escape(SIMULATED_NOTE)}[/]", highlight=False)
    console.print(summary_table(result))
    _print_engine(result)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(str(w))}", highlight=False)
    files = ", ".join(sorted(f.name for f in folder.iterdir() if f.is_file()))
    console.print(f"wrote {folder}: {files}", soft_wrap=True, highlight=False)


SimModeOption = Annotated[
    str,
    typer.Option(
        "--sim-mode",
        help="endpoint 'sim': its own process (default; no GIL shared with the client) "
        "or a thread of this one",
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar or summary")]


ProbeOutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="output folder; if it holds an earlier run, a new timestamped folder "
        "inside it (default: a new folder under results/)",
    ),
]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""

    @app.command("probe")
    def probe(  # noqa: PLR0917 - one parameter per flag
        spec_path: SpecArgument = None,
        base_url: BaseUrlOption = None,
        model: ModelOption = None,
        api: ApiOption = None,
        slo_ttft_ms: SloTtftOption = None,
        slo_tpot_ms: SloTpotOption = None,
        sets: SetOption = None,
        rate: RateOption = None,
        concurrency: ConcurrencyOption = None,
        duration: Annotated[
            float | None,
            typer.Option("--duration", "-d", help="measurement window, s (overrides the spec)"),
        ] = None,
        warmup: Annotated[
            float | None, typer.Option("--warmup", help="warm-up before the window, s")
        ] = None,
        max_requests: MaxRequestsOption = None,
        seed: SeedOption = None,
        max_concurrency: MaxConcurrencyOption = None,
        input_tokens: InputTokensOption = None,
        output_tokens: OutputTokensOption = None,
        dataset: DatasetOption = None,
        rate_type: RateTypeOption = None,
        dataset_name: DatasetNameOption = None,
        ignore_eos: IgnoreEosOption = False,
        streaming: StreamingOption = False,
        out: ProbeOutOption = None,
        overwrite: OverwriteOption = False,
        sim_mode: SimModeOption = "subprocess",
        quiet: QuietOption = False,
        workers: WorkersOption = None,
        ray: RayOption = None,
        hardware: HardwareOption = None,
        gpus: GpusOption = None,
        replicas: ReplicasOption = None,
        bandwidth_tb_s: BandwidthOption = None,
    ) -> None:
        """Run one probe at one offered load; write result.json and requests.jsonl."""
        from tokenwatt.cli.options import Flags, NodeFlags, build_spec

        peer = PeerFlags(
            rate, concurrency, max_concurrency, max_requests, seed, input_tokens, output_tokens,
            dataset, rate_type, dataset_name, ignore_eos, streaming,
        )  # fmt: skip
        closed = peer.closed_loop()
        rate = peer.open_rate()
        _check_flags(sim_mode, rate, closed, max_requests)
        check_window(max_requests, duration, closed is not None)
        show_notes(peer)
        node = NodeFlags(hardware, gpus, replicas, bandwidth_tb_s).spec_fields()
        fields = {**peer.spec_fields(), **node}
        flags = Flags(base_url, model, api, slo_ttft_ms, slo_tpot_ms, list(sets or []), fields)
        spec = _with_flags(build_spec(spec_path, flags), duration=duration, warmup=warmup)
        spec = with_senders(spec, workers, ray)
        loops_closed = closed is not None or (
            rate is None and spec.workload.arrival.kind == "concurrency"
        )
        if loops_closed and (workers is not None or ray is not None):
            console.print(
                "[yellow]note:[/] --workers/--ray are not used in a closed loop: its streams "
                "send from this process (they apply to open-loop --rate probes)",
                highlight=False,
            )
        run_probe_command(
            spec,
            rate=rate,
            concurrency=closed,
            max_requests=max_requests,
            out=out,
            overwrite=overwrite,
            sim_mode=sim_mode,
            quiet=quiet,
        )


def run_probe_command(
    spec: BenchSpec,
    *,
    rate: float | None,
    concurrency: int | None,
    max_requests: int | None,
    out: Path | None,
    overwrite: bool = False,
    sim_mode: str = "subprocess",
    quiet: bool = False,
) -> None:
    """One probe from a built spec, written, shown and exited as ``tokenwatt probe`` does;
    ``bench --concurrency N`` runs its closed-loop point through here too."""
    from tokenwatt.cli._loop import run_async
    from tokenwatt.cli.outdir import choose_out_dir, remove_stale

    folder = choose_out_dir(out, spec.name, overwrite=overwrite)
    started_ns = time.time_ns()
    result = run_async(
        _probe(
            spec,
            rate=rate,
            concurrency=concurrency,
            max_requests=max_requests,
            seed=spec.workload.seed,
            out=folder,
            sim_mode=sim_mode,  # type: ignore[arg-type]
            quiet=quiet,
        )
    )
    if overwrite:
        remove_stale(folder, started_ns)
    if not quiet:
        _show(result, folder)
    _exit_for(result)
