"""CLI: ``tokenwatt import FILE --model SRC --set hardware.accelerator=h100-sxm [--out DIR]``.

Reads another tool's result file (``tokenwatt.importers``), writes ``DIR/result.json`` with
target kind ``imported`` and prints the terminal report, so ``tokenwatt report`` and
``compare`` work on it. The node (model geometry, accelerator, GPUs) is given as for ``probe``:
``--model`` names the geometry, ``--set hardware.*`` the node; the SLO flags judge the peer's
own p99s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tokenwatt.cli.options import (
    BandwidthOption,
    GpusOption,
    HardwareOption,
    ModelOption,
    ReplicasOption,
    SetOption,
    SloTpotOption,
    SloTtftOption,
)

__all__ = ["import_file"]


def import_file(  # noqa: PLR0917 - one parameter per flag
    path: Annotated[Path, typer.Argument(metavar="FILE", help="the other tool's result file")],
    model: ModelOption = None,
    hardware: HardwareOption = None,
    gpus: GpusOption = None,
    replicas: ReplicasOption = None,
    bandwidth_tb_s: BandwidthOption = None,
    fmt: Annotated[
        str, typer.Option("--format", help="auto, vllm, guidellm, aiperf, inference-perf, br02")
    ] = "auto",
    slo_ttft_ms: SloTtftOption = None,
    slo_tpot_ms: SloTpotOption = None,
    sets: SetOption = None,
    power: Annotated[
        list[Path] | None,
        typer.Option(
            "--power",
            help="a power log of the run (nvidia-smi CSV, nvidia-smi dmon -o DT, DCGM dump); "
            "repeat for several; default: the power logs found beside FILE",
        ),
    ] = None,
    no_power: Annotated[
        bool, typer.Option("--no-power", help="do not read power logs found beside FILE")
    ] = False,
    engine_metrics: Annotated[
        Path | None,
        typer.Option(
            "--engine-metrics",
            help="the engine's /metrics scrapes over the run, Prometheus text with timestamps",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="output folder (default under results/)")
    ] = None,
) -> None:
    """Read vLLM, GuideLLM, AIPerf, inference-perf or Benchmark Report results; write result.json.

    e.g. tokenwatt import benchmarks.json --model llama-3.1-8b --hardware h100-sxm
    """
    from rich.console import Console

    from tokenwatt.cli.options import Flags, NodeFlags, build_spec
    from tokenwatt.cli.outdir import choose_out_dir
    from tokenwatt.geometry import load_geometry
    from tokenwatt.importers import read_runs
    from tokenwatt.importers.to_result import imported_result, on_node
    from tokenwatt.load.target import resolve_accelerator
    from tokenwatt.report.terminal import ResultView
    from tokenwatt.result import write_result

    name, runs = read_runs(path, fmt)
    extra = NodeFlags(hardware, gpus, replicas, bandwidth_tb_s).spec_fields()
    url = f"http://imported.invalid/{path.name}"
    flags = Flags(url, model, None, slo_ttft_ms, slo_tpot_ms, list(sets or []), extra)
    spec = build_spec(None, flags)
    m = spec.model
    geometry = load_geometry(
        m.source, weight_dtype=m.weight_dtype, kv_dtype=m.kv_dtype, overrides=m.overrides or None
    )
    accelerator = resolve_accelerator(spec.hardware)
    runs, _ = on_node(runs, spec, accelerator)  # a file mixing nodes: the stated node's runs
    logs = _power_logs(path, runs, power, no_power)
    energy = _energy(runs, logs, accelerator.tdp_w) if logs else None
    result = imported_result(runs, spec, geometry, accelerator, path, energy=energy)
    if engine_metrics is not None:
        _witness(runs, result, engine_metrics, spec.hardware.replicas)
    folder = choose_out_dir(out, f"imported-{spec.name}", overwrite=False)
    folder.mkdir(parents=True, exist_ok=True)
    write_result(result, folder)
    written = _write_views(runs, result, folder)
    console = Console()
    console.print(f"read {path.name} as {name}: {len(runs)} benchmark(s)", highlight=False)
    console.print(ResultView(result))
    for out_path in [folder / "result.json", *written]:
        console.print(f"wrote {out_path}", highlight=False, soft_wrap=True)


def _power_logs(path: Path, runs: list[Any], given: list[Path] | None, off: bool) -> list[Path]:
    """The logs named by --power, else those found beside the peer's file (said on stderr)."""
    if given:
        return list(given)
    if off:
        return []
    from tokenwatt.power.logs import logs_beside

    found = logs_beside(path)
    if found and any(run.started_at is None for run in runs):
        typer.echo(f"power logs beside {path.name} not read: the file gives no run date to "
                   "place them by (name them with --power to be told why)", err=True)  # fmt: skip
        return []
    for log in found:
        typer.echo(f"power log found beside {path.name}: {log.name} (--no-power to skip)", err=True)
    return found


def _span_ns(run: Any, flag: str) -> tuple[int, int]:
    """The run's own span in unix ns: the peer's start and end, else its start plus its
    duration. A run whose file gives no date cannot be placed on a log's clock: refused."""
    from tokenwatt.errors import SpecError

    if run.started_at is None:
        raise SpecError(
            f"{flag}: the {run.tool} file gives no run date, so its span cannot be found on "
            "the log's clock"
        )
    start_ns = round(run.started_at.timestamp() * 1e9)
    if run.ended_at is not None:
        return start_ns, round(run.ended_at.timestamp() * 1e9)
    return start_ns, start_ns + round(run.duration_s * 1e9)


def _witness(runs: list[Any], result: Any, dump: Path, replicas: int) -> None:
    """Each probe's engine figures over its run's span from a metrics dump, and the client's
    T, B and s against them, as a measured probe's witness (``engine.compare``)."""
    from tokenwatt.engine.compare import compare_client_engine, engine_batch_and_steps
    from tokenwatt.engine.dump import read_engine_dump
    from tokenwatt.engine.window import clip_samples, summarize

    engine, samples = read_engine_dump(dump)
    for i, (run, probe) in enumerate(zip(runs, result.probes, strict=True)):
        start_ns, end_ns = _span_ns(run, "--engine-metrics")
        window = summarize(
            clip_samples(samples, start_ns, end_ns), engine=engine, url=dump.name,
            warnings=result.warnings,
        )  # fmt: skip
        b, s = engine_batch_and_steps(window, replicas)
        window = window.model_copy(update={"batch_per_replica": b, "steps_per_s_per_replica": s})
        tau = probe.itl_token_weighted_s
        if tau:
            agreements = compare_client_engine(
                client_tokens_per_s=probe.output_tokens_per_s, client_tau_s=tau,
                replicas=replicas, window=window,
            )  # fmt: skip
            window = window.model_copy(update={"agreements": agreements})
        result.probes[i] = probe.model_copy(update={"engine": window})


def _energy(runs: list[Any], logs: list[Path], tdp_w: float | None) -> list[Any]:
    """Each run's energy from the power logs (their devices summed) over the run's own span:
    the peer's start and end, else its start plus its duration. A run whose file gives no
    date cannot be placed on the log's clock and is refused, never guessed."""
    from tokenwatt.metrics.energy import energy_metrics
    from tokenwatt.power.logs import log_energy, merge_logs, read_power_log

    log = merge_logs([read_power_log(p) for p in logs])
    out = []
    for run in runs:
        start_ns, end_ns = _span_ns(run, "--power")
        tokens = round(run.output_tokens_per_s * (end_ns - start_ns) / 1e9)
        report, audit = log_energy(log, start_ns, end_ns, tdp_w=tdp_w)
        out.append(energy_metrics(report, tokens, audit=[audit]))
    return out


def _write_views(runs: list[Any], result: Any, folder: Path) -> list[Path]:
    """The views a measured run gets beside its result: the HTML report and, for runs with
    per-request records, the Benchmark Report v0.2 files."""
    from tokenwatt.importers.exports import write_imported_br02
    from tokenwatt.report.html import write_html

    return [write_html(result, folder), *write_imported_br02(runs, result, folder)]


def register(app: typer.Typer) -> None:
    """Add this module's command to the app."""
    app.command("import")(import_file)
