"""CLI: ``tokenwatt bench SPEC [--out DIR]`` and ``tokenwatt demo [--out DIR]``.

Both run ``tokenwatt.load.bench.run_bench`` under a rich progress display, then render the
terminal report and ``report.html`` from the written ``result.json`` (never from live state).
Ctrl-C or SIGTERM (foreground or background) ends the probe in flight; what was measured is
written and reported, exit code 130 or 143. A search stopped by an error probe (the endpoint
is broken), a saturated load generator or a server that changed during the run (the drift
checks, ``metrics.drift``) reports what was measured and exits ``EXIT_NO_BOUNDARY`` (3): there
is no boundary, and a script must not read one.
"""

from __future__ import annotations

import importlib.resources
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tokenwatt.cli._workers import RayOption, WorkersOption, with_senders
from tokenwatt.cli.options import (
    ApiOption,
    BandwidthOption,
    BaseUrlOption,
    GpusOption,
    HardwareOption,
    KwhOption,
    MaxTimeOption,
    ModelOption,
    OverwriteOption,
    PrecisionOption,
    PriceOption,
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
    show_notes,
)

if TYPE_CHECKING:
    from rich.console import Console

    from tokenwatt.load.bench import BenchEvent
    from tokenwatt.result import BenchResult
    from tokenwatt.spec import BenchSpec

DEMO_SPEC = "demo.yaml"
EXIT_NO_BOUNDARY = 3  # an error probe, a saturated sender or a changed server: no boundary
OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="output folder; if it holds an earlier run, a new timestamped folder inside it "
        "(default: a new folder under results/)",
    ),
]

QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="no progress display: only the headline (goodput, tokens per joule, MBU), the "
        "report's path and errors",
    ),
]


def default_out_dir(name: str, root: Path = Path("results")) -> Path:
    """A new folder ``results/<name>-YYYYmmdd-HHMMSS`` (suffixed if it exists already)."""
    from tokenwatt.cli.outdir import fresh_dir

    return fresh_dir(name, root)


def _fmt_rate(r: float | None) -> str:
    return "—" if r is None else f"{r:.3g} rps"


class _Display:
    """Rich progress: the probe in flight (index, rate, time left in it and in the whole bench,
    ``load.eta``; its phase and how far along) and the bracket. ``quiet``: nothing at all."""

    def __init__(self, console: Console, spec: BenchSpec, *, quiet: bool = False) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.spec = spec
        self.quiet = quiet
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=quiet,
        )
        self.task: int | None = None
        self.lo: float | None = None
        self.hi: float | None = None
        self.started_ns = 0  # the probe in flight
        self.warmup_s = 0.0
        self.durations_s: list[float] = []  # finished probes after the single stream, wall time
        self.checks_started = 0
        self.drain_s = 0.0  # the latest probe's E2E p99: the drain's tail
        self.passes: list[tuple[float, int]] = []  # clean search passes: (rate, judged)

    def print(self, text: str, style: str | None = None) -> None:
        if not self.quiet:
            self.progress.console.print(text, style=style, highlight=False)

    def __call__(self, ev: BenchEvent) -> None:
        if ev.kind == "started":
            sim = (
                " (the built-in simulator: results are SIMULATED)"
                if self.spec.endpoint.is_sim
                else ""
            )
            self.print(f"target: {ev.message}{sim}")
        elif ev.kind == "probe_start":
            self._start(ev)
        elif ev.kind == "probe_progress" and ev.progress is not None and self.task is not None:
            done, detail = self._fraction(ev)
            self.progress.update(
                self.task,  # type: ignore[arg-type]
                completed=done,
                detail=detail,
                description=self._eta_text(ev),
            )
        elif ev.kind == "probe_done" and ev.summary is not None:
            self._done(ev)
        elif ev.kind == "search_step":
            self.lo, self.hi = ev.lo_rps, ev.hi_rps
            interval = f"; {ev.message}" if ev.message else ""
            self.print(
                f"  bracket: passes at {_fmt_rate(self.lo)}, fails at {_fmt_rate(self.hi)}"
                f"{interval}",
                style="dim",
            )
        elif ev.kind == "search_done":
            from tokenwatt.report.terminal import rate_text

            b = ev.summary
            at = _fmt_rate(ev.lo_rps)
            if b is not None and b.rate_rps is not None:
                at = rate_text(b)
            self.print(f"search: {ev.message}; boundary {at}")

    def _start(self, ev: BenchEvent) -> None:
        from tokenwatt.clock import now_ns

        self.started_ns = now_ns()
        self.warmup_s = ev.warmup_s or 0.0
        if ev.phase == "check":
            self.checks_started += 1
        if ev.index == 1 and ev.phase != "check":  # before the search: what it will take
            from tokenwatt.load.eta import search_plan_text

            self.print(search_plan_text(self.spec.search, rate_rps=ev.rate_rps,
                                        drain_s=self.drain_s))  # fmt: skip
        if ev.index is None:  # a closed-loop stage that finds the start rate
            name = f"start · {ev.phase}"
        elif ev.index == 0:
            name = "single stream"
        else:
            name = self._eta_text(ev)
        if self.task is not None:
            self.progress.remove_task(self.task)  # type: ignore[arg-type]
        self.task = self.progress.add_task(name, total=1.0, detail="starting")

    def _eta_text(self, ev: BenchEvent) -> str:
        """``probe 3 of ≤ 10 · 12.5 req/s · 40 s left in this probe · about 3 min to go``;
        the single stream and the start stages: the time left in them only."""
        from tokenwatt.load.eta import (
            Eta,
            bound_probes,
            close_extra_s,
            duration_text,
            full_probe_s,
            probe_left_s,
            probes_to_come,
            progress_text,
        )

        search = self.spec.search
        p = ev.progress
        left = (
            full_probe_s(search.probe.model_copy(update={"warmup_s": self.warmup_s}),
                         ev.rate_rps, self.drain_s)
            if p is None
            else probe_left_s(p, warmup_s=self.warmup_s, rate_rps=ev.rate_rps,
                              drain_s=self.drain_s, drain_timeout_s=search.probe.drain_timeout_s)
        )  # fmt: skip
        if ev.index is None or ev.index == 0:
            name = "single stream" if ev.index == 0 else f"start · {ev.phase}"
            if left is None or p is None:  # a closed loop: no rate to go by yet
                return name
            return f"{name} · {duration_text(left)} left"
        if left is None:
            left = 0.0
        clean = self._clean_near()
        long_window = p is not None and p.min_requests > search.probe.min_requests
        to_come = probes_to_come(
            search, index=ev.index, checks_started=self.checks_started, lo_rps=self.lo,
            hi_rps=self.hi, clean_near=clean, low_end_in_flight=long_window,
        )  # fmt: skip
        extra = 0.0 if long_window or self.checks_started else close_extra_s(
            search, clean, self.lo or ev.rate_rps)  # fmt: skip
        per_probe = (
            sum(self.durations_s) / len(self.durations_s)
            if self.durations_s
            else full_probe_s(search.probe, ev.rate_rps, self.drain_s)
        )
        eta = Eta.of(
            index=ev.index, bound=bound_probes(search), rate_rps=ev.rate_rps, left_s=left,
            to_come=to_come, per_probe_s=per_probe, extra_s=extra,
        )  # fmt: skip
        return progress_text(eta)

    def _clean_near(self) -> int:
        """Clean requests judged by search passes within 2·precision + 5 % of the lowest
        failure: what establishes the interval's low end (``load.eta.close_probes``)."""
        if self.hi is None:
            return 0
        floor = self.hi * (1.0 - 2.0 * self.spec.search.precision - 0.05)
        return sum(n for r, n in self.passes if r >= floor)

    def _done(self, ev: BenchEvent) -> None:
        from tokenwatt.clock import now_ns
        from tokenwatt.report.terminal import rate_text

        s = ev.summary
        assert s is not None
        if ev.index:
            self.durations_s.append((now_ns() - self.started_ns) / 1e9)
        if s.e2e_s.p99 is not None:
            self.drain_s = s.e2e_s.p99
        judged, clean = s.slo_detail.judged, not any(s.slo_detail.misses.values())
        if ev.index and ev.phase != "check" and s.slo_passed and s.rate_rps and judged and clean:
            self.passes.append((s.rate_rps, judged))
        verdict = "[green]pass[/]" if s.slo_passed else "[red]fail[/]"
        why = "" if s.slo_passed else f"; {s.slo_detail.reason}"
        mbu = "n/a" if s.mbu is None else f"{s.mbu:.1%}"
        label = "single stream" if ev.index == 0 else f"probe {ev.index} at {rate_text(s)}"
        if self.task is not None:
            self.progress.remove_task(self.task)  # type: ignore[arg-type]
            self.task = None
        self.print(
            f"{label}: {verdict}  {s.output_tokens_per_s:,.0f} tok/s, "
            f"goodput {s.goodput_output_tokens_per_s:,.0f} tok/s, MBU {mbu}{why}"
        )

    def _fraction(self, ev: BenchEvent) -> tuple[float, str]:
        p = ev.progress
        assert p is not None
        if p.phase == "warmup":
            # as configured: the elapsed warm-up never beyond warmup_s
            warm_s = self.spec.search.probe.warmup_s
            shown = min(max(p.elapsed_s, 0.0), warm_s)
            return 0.0, f"warm-up {shown:.0f} of {warm_s:g} s, {p.in_flight} in flight"
        if p.phase == "drain":
            return 1.0, f"drain: {p.counted - p.counted_finished} counted still running"
        if p.max_requests is not None:
            frac = p.counted_finished / max(p.max_requests, 1)
            return frac, f"{p.counted_finished}/{p.max_requests} requests"
        by_time = p.window_elapsed_s / p.min_duration_s if p.min_duration_s else 1.0
        by_count = p.counted / p.min_requests if p.min_requests else 1.0
        cap = p.window_elapsed_s / p.max_duration_s if p.max_duration_s else 0.0
        frac = min(1.0, max(min(by_time, by_count), cap))
        # Both minimums must be met, so either count may run past its own: say "≥", never
        # "15/8 s" or "108/60 req".
        return frac, (
            f"window {p.window_elapsed_s:.0f} s (≥ {p.min_duration_s:g}), "
            f"{p.counted} req (≥ {p.min_requests}), {p.in_flight} in flight"
        )


def _run(spec: BenchSpec, out: Path, console: Console, *, quiet: bool) -> BenchResult | None:
    from tokenwatt.cli._loop import run_async
    from tokenwatt.load.bench import run_bench

    display = _Display(console, spec, quiet=quiet)
    display.print(f"writing to {out}")
    with display.progress:
        try:
            # The simulator in its own process: in a thread of this one it shared the GIL
            # with the client, whose send lateness then reached 46 ms p99 in the demo.
            return run_async(run_bench(spec, out, on_event=display, sim_mode="subprocess"))
        except KeyboardInterrupt:
            return None


def _report(out: Path, console: Console, *, quiet: bool = False) -> BenchResult | None:
    """The terminal report and the files beside ``result.json``; ``quiet``: the headline
    only (goodput with its interval, tokens per joule, MBU) and the report's path."""
    from tokenwatt.result import RESULT_FILE, load_result

    if not (out / RESULT_FILE).exists():
        console.print("nothing was measured; no result written", highlight=False)
        return None
    result = load_result(out)
    from tokenwatt.report.html import write_html
    from tokenwatt.report.terminal import ResultView

    if quiet:
        from tokenwatt.report.terminal import headline

        console.print(headline(result))
    else:
        console.print(ResultView(result))
    try:
        path = write_html(result, out)
        console.print(f"\nreport: {path}", highlight=False, soft_wrap=True)
    except OSError as exc:
        console.print(f"could not write report.html: {exc}", highlight=False, markup=False)
    _write_exports(result, out, console)
    return result


def _write_exports(result: BenchResult, out: Path, console: Console) -> None:
    """BR0.2 partials per probe and probes.csv next to result.json (``report.exports``)."""
    from tokenwatt.report.exports import write_exports

    try:
        write_exports(result, out)
    except (OSError, ValueError) as exc:
        console.print(f"could not write br02/probes.csv: {exc}", highlight=False, markup=False)


def _bench_and_report(
    spec: BenchSpec, out: Path | None, *, overwrite: bool = False, quiet: bool = False
) -> None:
    from rich.console import Console

    from tokenwatt.cli.outdir import choose_out_dir, remove_stale

    console = Console()
    out_dir = choose_out_dir(out, spec.name, overwrite=overwrite)
    started_ns = time.time_ns()
    finished = _run(spec, out_dir, console, quiet=quiet)
    if overwrite and out_dir.is_dir():
        remove_stale(out_dir, started_ns)
    result = _report(out_dir, console, quiet=quiet)
    if finished is None or (result is not None and result.interrupted):
        from tokenwatt.cli._loop import stop_exit_code

        console.print("interrupted: the result holds what was measured", highlight=False)
        sys.exit(stop_exit_code())
    stop = result.search.stop_reason if result is not None and result.search else None
    if stop == "changed":
        console.print(
            "stopped: the server changed during the run; no boundary (see the warnings)",
            highlight=False,
        )
        sys.exit(EXIT_NO_BOUNDARY)
    if stop in ("error", "saturated"):
        why = "an error probe" if stop == "error" else "the load generator saturated or failed"
        console.print(
            f"stopped: {why}; no boundary (see the warnings); the result holds what was measured",
            highlight=False,
        )
        sys.exit(EXIT_NO_BOUNDARY)


def bench(  # noqa: PLR0917 - one parameter per flag
    spec_path: SpecArgument = None,
    base_url: BaseUrlOption = None,
    model: ModelOption = None,
    api: ApiOption = None,
    rate: RateOption = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration", "-d", help="each probe's window, s (search.probe.min_duration_s)"
        ),
    ] = None,
    slo_ttft_ms: SloTtftOption = None,
    slo_tpot_ms: SloTpotOption = None,
    sets: SetOption = None,
    out: OutOption = None,
    overwrite: OverwriteOption = False,
    workers: WorkersOption = None,
    ray: RayOption = None,
    concurrency: ConcurrencyOption = None,
    max_concurrency: MaxConcurrencyOption = None,
    max_requests: MaxRequestsOption = None,
    seed: SeedOption = None,
    input_tokens: InputTokensOption = None,
    output_tokens: OutputTokensOption = None,
    dataset: DatasetOption = None,
    rate_type: RateTypeOption = None,
    dataset_name: DatasetNameOption = None,
    ignore_eos: IgnoreEosOption = False,
    streaming: StreamingOption = False,
    price: PriceOption = None,
    kwh: KwhOption = None,
    quiet: QuietOption = False,
    hardware: HardwareOption = None,
    gpus: GpusOption = None,
    replicas: ReplicasOption = None,
    bandwidth_tb_s: BandwidthOption = None,
    precision: PrecisionOption = None,
    max_time: MaxTimeOption = None,
) -> None:
    """Find the SLO boundary and report goodput, tokens per joule and MBU there.

    Without a spec: tokenwatt bench --base-url http://HOST:8000 --model NAME
    --set hardware.accelerator=h100-sxm --set hardware.gpus=1
    """
    from tokenwatt.cli.options import Flags, NodeFlags, build_spec, search_fields

    peer = PeerFlags(
        rate, concurrency, max_concurrency, max_requests, seed, input_tokens, output_tokens,
        dataset, rate_type, dataset_name, ignore_eos, streaming,
    )  # fmt: skip
    closed = peer.closed_loop()
    extra: dict[str, object] = peer.spec_fields()
    show_notes(peer)
    if max_requests is not None and closed is None:
        extra["search.probe.min_requests"] = max_requests
    if (open_rate := peer.open_rate()) is not None:
        extra["search.start_rate_rps"] = open_rate
    if duration is not None:
        extra["search.probe.min_duration_s"] = duration
    extra |= {"hardware.price_per_gpu_hour": price, "hardware.price_per_kwh": kwh}
    extra |= NodeFlags(hardware, gpus, replicas, bandwidth_tb_s).spec_fields()
    extra |= search_fields(precision, max_time)  # --precision, --max-time
    flags = Flags(base_url, model, api, slo_ttft_ms, slo_tpot_ms, list(sets or []), extra)
    spec = with_senders(build_spec(spec_path, flags), workers, ray)
    if closed is not None:
        # vllm bench serve --max-concurrency N: one closed-loop point, as probe runs it
        from tokenwatt.cli.probe import run_probe_command

        run_probe_command(
            spec,
            rate=None,
            concurrency=closed,
            max_requests=max_requests,
            out=out,
            overwrite=overwrite,
            quiet=quiet,
        )
        return
    _bench_and_report(spec, out, overwrite=overwrite, quiet=quiet)


def demo_spec_text() -> str:
    return (importlib.resources.files("tokenwatt.examples") / DEMO_SPEC).read_text("utf-8")


def demo(
    out: OutOption = None, overwrite: OverwriteOption = False, quiet: QuietOption = False
) -> None:
    """Run the bundled demo: Qwen3-30B-A3B (MoE) on a simulated H100, about two minutes."""
    import yaml

    from tokenwatt.spec import parse_spec

    spec = parse_spec(yaml.safe_load(demo_spec_text()), source=f"bundled {DEMO_SPEC}")
    _bench_and_report(spec, out, overwrite=overwrite, quiet=quiet)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("bench")(bench)
    app.command("demo")(demo)
