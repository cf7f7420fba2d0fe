"""CLI: ``tokenwatt bench SPEC [--out DIR]`` and ``tokenwatt demo [--out DIR]``.

Both run ``tokenwatt.load.bench.run_bench`` under a rich progress display, then render the
terminal report and ``report.html`` from the written ``result.json`` (never from live state).
Ctrl-C or SIGTERM (foreground or background) ends the probe in flight; what was measured is
written and reported, exit code 130 or 143. A search stopped by an error probe (the endpoint
is broken) or a saturated load generator reports what was measured and exits
``EXIT_NO_BOUNDARY`` (3): there is no boundary, and a script must not read one.
"""

from __future__ import annotations

import importlib.resources
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tokenwatt.cli._workers import WorkersOption, with_workers

if TYPE_CHECKING:
    from rich.console import Console

    from tokenwatt.load.bench import BenchEvent
    from tokenwatt.result import BenchResult
    from tokenwatt.spec import BenchSpec

DEMO_SPEC = "demo.yaml"
EXIT_NO_BOUNDARY = 3  # an error probe or a saturated sender stopped the search
OutOption = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="output folder (default: a new folder under results/)"),
]


def default_out_dir(name: str, root: Path = Path("results")) -> Path:
    """A new folder ``results/<name>-YYYYmmdd-HHMMSS`` (suffixed if it exists already)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "run"
    base = root / f"{safe}-{stamp}"
    out, k = base, 1
    while out.exists():
        k += 1
        out = root / f"{base.name}-{k}"
    return out


def _fmt_rate(r: float | None) -> str:
    return "—" if r is None else f"{r:.3g} rps"


class _Display:
    """Rich progress: the probe in flight (index, phase, rate, how far along) and the bracket."""

    def __init__(self, console: Console, spec: BenchSpec) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.spec = spec
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task: int | None = None
        self.lo: float | None = None
        self.hi: float | None = None

    def __call__(self, ev: BenchEvent) -> None:
        if ev.kind == "started":
            self.console.print(f"target: {ev.message}", highlight=False)
        elif ev.kind == "probe_start":
            name = (
                "single stream"
                if ev.index == 0
                else f"probe {ev.index} · {ev.phase} · {_fmt_rate(ev.rate_rps)}"
            )
            if self.task is not None:
                self.progress.remove_task(self.task)  # type: ignore[arg-type]
            self.task = self.progress.add_task(name, total=1.0, detail="starting")
        elif ev.kind == "probe_progress" and ev.progress is not None and self.task is not None:
            done, detail = self._fraction(ev)
            self.progress.update(self.task, completed=done, detail=detail)  # type: ignore[arg-type]
        elif ev.kind == "probe_done" and ev.summary is not None:
            s = ev.summary
            verdict = "[green]pass[/]" if s.slo_passed else "[red]fail[/]"
            why = "" if s.slo_passed else f"; {s.slo_detail.reason}"
            mbu = "n/a" if s.mbu is None else f"{s.mbu:.1%}"
            label = (
                "single stream"
                if ev.index == 0
                else f"probe {ev.index} at {_fmt_rate(ev.rate_rps)}"
            )
            if self.task is not None:
                self.progress.remove_task(self.task)  # type: ignore[arg-type]
                self.task = None
            self.progress.console.print(
                f"{label}: {verdict}  {s.output_tokens_per_s:,.0f} tok/s, "
                f"goodput {s.goodput_output_tokens_per_s:,.0f} tok/s, MBU {mbu}{why}",
                highlight=False,
            )
        elif ev.kind == "search_step":
            self.lo, self.hi = ev.lo_rps, ev.hi_rps
            self.progress.console.print(
                f"  bracket: passes at {_fmt_rate(self.lo)}, fails at {_fmt_rate(self.hi)}",
                style="dim",
                highlight=False,
            )
        elif ev.kind == "search_done":
            self.progress.console.print(
                f"search: {ev.message}; boundary {_fmt_rate(ev.lo_rps)}", highlight=False
            )

    def _fraction(self, ev: BenchEvent) -> tuple[float, str]:
        p = ev.progress
        assert p is not None
        if p.phase == "warmup":
            warm = max(p.elapsed_s, 0.0)
            return 0.0, f"warm-up {warm:.0f} s, {p.in_flight} in flight"
        if p.phase == "drain":
            return 1.0, f"drain: {p.counted - p.counted_finished} counted still running"
        if p.max_requests is not None:
            frac = p.counted_finished / max(p.max_requests, 1)
            return frac, f"{p.counted_finished}/{p.max_requests} requests"
        by_time = p.window_elapsed_s / p.min_duration_s if p.min_duration_s else 1.0
        by_count = p.counted / p.min_requests if p.min_requests else 1.0
        cap = p.window_elapsed_s / p.max_duration_s if p.max_duration_s else 0.0
        frac = min(1.0, max(min(by_time, by_count), cap))
        return frac, (
            f"{p.window_elapsed_s:.0f}/{p.min_duration_s:.0f} s, "
            f"{p.counted}/{p.min_requests} req, {p.in_flight} in flight"
        )


def _run(spec: BenchSpec, out: Path, console: Console) -> BenchResult | None:
    from tokenwatt.cli._loop import run_async
    from tokenwatt.load.bench import run_bench

    display = _Display(console, spec)
    console.print(f"writing to {out}", highlight=False)
    with display.progress:
        try:
            return run_async(run_bench(spec, out, on_event=display))
        except KeyboardInterrupt:
            return None


def _report(out: Path, console: Console) -> BenchResult | None:
    from tokenwatt.result import RESULT_FILE, load_result

    if not (out / RESULT_FILE).exists():
        console.print("nothing was measured; no result written", highlight=False)
        return None
    result = load_result(out)
    from tokenwatt.report.html import write_html
    from tokenwatt.report.terminal import ResultView

    console.print(ResultView(result))
    try:
        path = write_html(result, out)
        console.print(f"\nreport: {path}", highlight=False, soft_wrap=True)
    except OSError as exc:
        console.print(f"could not write report.html: {exc}", highlight=False, markup=False)
    return result


def _bench_and_report(spec: BenchSpec, out: Path | None) -> None:
    from rich.console import Console

    console = Console()
    out_dir = out if out is not None else default_out_dir(spec.name)
    finished = _run(spec, out_dir, console)
    result = _report(out_dir, console)
    if finished is None or (result is not None and result.interrupted):
        from tokenwatt.cli._loop import stop_exit_code

        console.print("interrupted: the result holds what was measured", highlight=False)
        sys.exit(stop_exit_code())
    stop = result.search.stop_reason if result is not None and result.search else None
    if stop in ("error", "saturated"):
        why = "an error probe" if stop == "error" else "the load generator saturated"
        console.print(
            f"stopped: {why}; no boundary (see the warnings); the result holds what was measured",
            highlight=False,
        )
        sys.exit(EXIT_NO_BOUNDARY)


def bench(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="benchmark spec (YAML)")],
    out: OutOption = None,
    workers: WorkersOption = None,
) -> None:
    """Find the SLO boundary and report goodput, tokens per joule and MBU there."""
    from tokenwatt.spec import load_spec

    _bench_and_report(with_workers(load_spec(spec_path), workers), out)


def demo_spec_text() -> str:
    return (importlib.resources.files("tokenwatt.examples") / DEMO_SPEC).read_text("utf-8")


def demo(out: OutOption = None) -> None:
    """Run the bundled demo: Qwen3-30B-A3B (MoE) on a simulated H100, about two minutes."""
    import yaml

    from tokenwatt.spec import parse_spec

    spec = parse_spec(yaml.safe_load(demo_spec_text()), source=f"bundled {DEMO_SPEC}")
    _bench_and_report(spec, out)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("bench")(bench)
    app.command("demo")(demo)
