"""CLI: ``tokenwatt sweep SWEEP.yaml`` and ``tokenwatt pareto PATH...``.

``sweep`` restarts the server for every point of the sweep file (``load.sweep``), runs ``bench``
there, and writes ``DIR/sweep.json``, one folder per point and ``DIR/sweep.html`` (the Pareto
picture). Ctrl-C stops the server in flight, keeps what was measured and exits 130 (143 for
SIGTERM). The sweep runs in a worker process under a guard (``load.sweep_guard``) that keeps
SIGTERM prompt and stops the servers of a worker that was killed. A sweep in which no point
passed exits 3. ``pareto`` draws the same picture for any set of sweeps and runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tokenwatt.cli.options import (
    BandwidthOption,
    GpusOption,
    HardwareOption,
    KwhOption,
    NodeFlags,
    PriceOption,
    ReplicasOption,
    SetOption,
)
from tokenwatt.errors import SpecError

if TYPE_CHECKING:
    from rich.console import Console

    from tokenwatt.load.sweep import SweepEvent
    from tokenwatt.spec.sweep import SweepSpec

EXIT_NO_POINT = 3  # no point of the sweep found a boundary


def _bench_doc(spec: SweepSpec, sweep_path: Path) -> dict[str, Any]:
    """The sweep's bench spec as a mapping: the file it names (relative to the sweep file)
    or the mapping written inline."""
    from tokenwatt.spec import read_spec_document

    if isinstance(spec.bench, dict):
        return dict(spec.bench)
    path = Path(spec.bench)
    if not path.is_absolute():
        path = sweep_path.parent / path
    doc = read_spec_document(path, what="sweep bench spec")
    if not isinstance(doc, dict):
        raise SpecError(f"sweep bench: {path} is not a YAML mapping (a bench spec)")
    return doc


def _with_prices(doc: dict[str, Any], price: float | None, kwh: float | None) -> dict[str, Any]:
    from tokenwatt.spec.dotted import put_dotted

    if price is not None:
        put_dotted(doc, "hardware.price_per_gpu_hour", price, what="--price-per-gpu-hour")
    if kwh is not None:
        put_dotted(doc, "hardware.price_per_kwh", kwh, what="--price-per-kwh")
    return doc


def _with_node(doc: dict[str, Any], node: NodeFlags, sets: list[str]) -> dict[str, Any]:
    """The node flags and ``--set`` laid over the bench spec, as on every other command; a
    point's own settings still win (they are applied per point)."""
    from tokenwatt.cli.options import apply_set
    from tokenwatt.spec.dotted import put_dotted

    for key, value in node.spec_fields().items():
        put_dotted(doc, key, value)
    for item in sets:
        apply_set(doc, item)
    return doc


def _check_first(spec: SweepSpec, doc: dict[str, Any]) -> None:
    """Every point's templates and bench spec, checked before any server starts."""
    from tokenwatt.load.sweep import point_spec
    from tokenwatt.spec.sweep import expand_points, render, render_command

    for i, settings in enumerate(expand_points(spec)):
        values = {**spec.vars, **settings, "port": 1, "point": i}
        render_command(spec.server.command, values)
        render(spec.server.health_url, values, what="server.health_url")
        point_spec(doc, spec, values)


class _Lines:
    """One line per event: point starts, server healthy, each probe, point done."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, ev: SweepEvent) -> None:
        c = self.console
        if ev.kind == "point_start":
            c.print(f"[bold]point {ev.index}[/] {ev.label}: starting the server", highlight=False)
        elif ev.kind == "server_healthy":
            c.print(f"  healthy after {ev.message}", highlight=False)
        elif ev.kind == "bench" and ev.bench is not None and ev.bench.kind == "probe_done":
            s = ev.bench.summary
            if s is not None:
                verdict = "pass" if s.slo_passed else "fail"
                c.print(
                    f"  probe {ev.bench.index}: {verdict}, goodput "
                    f"{s.goodput_output_tokens_per_s:,.0f} tok/s",
                    highlight=False,
                )
        elif ev.kind == "point_done" and ev.point is not None:
            p = ev.point
            why = f" ({p.cause})" if p.cause else ""
            c.print(f"  point {ev.index}: {p.status}{why}", highlight=False, markup=False)
            for w in p.warnings:
                c.print(f"  warning: {w}", highlight=False, markup=False)


def _node_args(node: NodeFlags, sets: list[str]) -> list[str]:
    """The node flags and ``--set`` items as the worker's command line repeats them."""
    out: list[str] = []
    flags = ("--hardware", "--gpus", "--replicas", "--bandwidth-tb-s")
    values = (node.hardware, node.gpus, node.replicas, node.bandwidth_tb_s)
    for flag, value in zip(flags, values, strict=True):
        if value is not None:
            out += [flag, str(value)]
    for item in sets:
        out += ["--set", item]
    return out


def _guard(
    sweep_path: Path,
    folder: Path,
    stop_timeout_s: float,
    *,
    prices: tuple[float | None, float | None],
    node_args: list[str],
    console: Console,
) -> NoReturn:
    """Run this sweep in a worker process under ``load.sweep_guard`` and exit as it did."""
    import contextlib

    from tokenwatt.errors import TokenwattError
    from tokenwatt.load.sweep_guard import guard_sweep
    from tokenwatt.report.sweep_html import write_sweep_html

    argv = [sys.executable, "-m", "tokenwatt", "sweep", str(sweep_path), "--out", str(folder)]
    for flag, value in zip(("--price-per-gpu-hour", "--price-per-kwh"), prices, strict=True):
        if value is not None:
            argv += [flag, repr(value)]
    argv += node_args
    outcome = guard_sweep(argv, folder, stop_timeout_s)
    for note in outcome.notes:
        console.print(f"sweep: {note}", highlight=False, markup=False)
    if outcome.notes and (folder / "sweep.json").is_file():
        with contextlib.suppress(TokenwattError, OSError):
            console.print(f"picture {write_sweep_html([folder], folder)}", highlight=False)
    sys.exit(outcome.exit_code)


def sweep(  # noqa: PLR0917 - one parameter per flag
    sweep_path: Annotated[Path, typer.Argument(metavar="SWEEP", help="sweep file (YAML)")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="output folder (default: under results/)")
    ] = None,
    price: PriceOption = None,
    kwh: KwhOption = None,
    hardware: HardwareOption = None,
    gpus: GpusOption = None,
    replicas: ReplicasOption = None,
    bandwidth_tb_s: BandwidthOption = None,
    sets: SetOption = None,
) -> None:
    """Restart the server at every point of a grid, bench each, draw the Pareto frontier."""
    from rich.console import Console

    from tokenwatt.cli._loop import run_async, stop_exit_code
    from tokenwatt.cli.outdir import choose_out_dir
    from tokenwatt.load.sweep import run_sweep
    from tokenwatt.load.sweep_guard import WORKER_VAR
    from tokenwatt.report.sweep_html import collect_points, summary_lines, write_sweep_html
    from tokenwatt.spec.sweep import load_sweep_spec

    console = Console()
    spec = load_sweep_spec(sweep_path)
    if os.environ.get(WORKER_VAR) != "1":  # the guard: as little work as can be done here
        folder = choose_out_dir(out, spec.name, overwrite=False)
        node_args = _node_args(NodeFlags(hardware, gpus, replicas, bandwidth_tb_s), sets or [])
        _guard(
            sweep_path,
            folder,
            spec.server.stop_timeout_s,
            prices=(price, kwh),
            node_args=node_args,
            console=console,
        )
    doc = _with_prices(_bench_doc(spec, sweep_path), price, kwh)
    node = NodeFlags(hardware, gpus, replicas, bandwidth_tb_s)
    doc = _with_node(doc, node, list(sets or []))
    _check_first(spec, doc)
    folder = choose_out_dir(out, spec.name, overwrite=False)
    console.print(f"writing to {folder}", highlight=False)
    t0 = time.monotonic()
    interrupted = False
    try:
        result = run_async(run_sweep(spec, doc, folder, on_event=_Lines(console)))
        interrupted = result.interrupted
    except KeyboardInterrupt:
        interrupted = True
    html_path = write_sweep_html([folder], folder)
    for line in summary_lines(collect_points([folder])[1]):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(f"sweep: {time.monotonic() - t0:.0f} s; picture {html_path}", highlight=False)
    if interrupted:
        console.print("interrupted: the sweep holds what was measured", highlight=False)
        sys.exit(stop_exit_code())
    if not any(p.status == "ok" and p.point and p.point.boundary for p in result.points):
        console.print("no point met the SLO: there is no frontier", highlight=False)
        sys.exit(EXIT_NO_POINT)


def pareto(
    paths: Annotated[list[Path], typer.Argument(help="sweep folders and/or run folders")],
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file or folder")] = Path(
        "sweep.html"
    ),
) -> None:
    """Draw the Pareto frontier (goodput per GPU vs tokens/s per user) of sweeps and runs."""
    from tokenwatt.report.sweep_html import write_sweep_html

    typer.echo(f"wrote {write_sweep_html(paths, out)}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("sweep")(sweep)
    app.command("pareto")(pareto)
