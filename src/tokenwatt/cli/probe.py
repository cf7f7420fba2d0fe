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

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

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
    from tokenwatt.load.measure import ProbeProgress, SimMode
    from tokenwatt.result import BenchResult
    from tokenwatt.spec import BenchSpec

console = Console()


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

    table = engine_table(result.probes[0], simulated=result.simulated)
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
    from tokenwatt.report.terminal import probe_summary_table

    if result.simulated:
        from tokenwatt.report.labels import SIMULATED_NOTE

        console.print(f"[bold magenta]{escape(SIMULATED_NOTE)}[/]", highlight=False)
    console.print(probe_summary_table(result))
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
    from tokenwatt.load.measure import ProbeRequest, probe_command
    from tokenwatt.report.exports import write_exports

    folder = choose_out_dir(out, spec.name, overwrite=overwrite)
    started_ns = time.time_ns()
    sim: SimMode = "thread" if sim_mode == "thread" else "subprocess"  # checked: _check_flags
    request = ProbeRequest(rate, concurrency, max_requests, spec.workload.seed, sim)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=quiet,
    )  # fmt: skip
    with progress:
        bar = _Bar(progress, spec.search.probe.warmup_s)
        result = run_async(probe_command(spec, request, folder, on_progress=bar))
    write_exports(result, folder)
    if overwrite:
        remove_stale(folder, started_ns)
    if not quiet:
        _show(result, folder)
    _exit_for(result)
