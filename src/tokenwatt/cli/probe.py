"""CLI: ``tokenwatt probe SPEC --rate R``: one probe at one offered load.

Writes ``DIR/probe.json`` (the spec with secrets removed, the window, every metric, the SLO
verdict, MBU with its inputs, the client's clock facts) and ``DIR/requests.jsonl`` (one
record per request, with its phase), prints a summary, and shows a live progress bar.
Ctrl-C or SIGTERM (foreground or background) stops the probe, writes what was measured and
exits 130 or 143; ``requests.jsonl`` grows as requests end (``load.spill``), so even a hard
kill keeps every finished record. An error probe (the endpoint failed over
``slo.max_error_rate``) or a saturated load generator exits 3: the verdict is not an SLO one.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tokenwatt.cli._workers import WorkersOption, with_workers
from tokenwatt.errors import SpecError

if TYPE_CHECKING:
    from tokenwatt.geometry.model import ModelGeometry
    from tokenwatt.hardware import Accelerator
    from tokenwatt.load.probe import ProbeProgress, ProbeRun
    from tokenwatt.load.spill import RecordSpill
    from tokenwatt.load.target import Target
    from tokenwatt.metrics.latency import ProbeMetrics
    from tokenwatt.spec import BenchSpec

SCHEMA = "tokenwatt.probe/2"
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
    if sent_late(p99, m.offered_requests_per_s):
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


def summary_table(data: dict[str, Any]) -> Table:
    m = data["metrics"]
    t = Table(title="probe", show_header=True, header_style="bold")
    t.add_column("figure")
    t.add_column("value", justify="right")
    probe = data["probe"]
    if probe["rate_rps"] is not None:
        load = f"{probe['rate_rps']:g} req/s ({probe['arrival']})"
    else:
        load = f"concurrency {probe['concurrency']}"
    t.add_row("offered load", load)
    t.add_row("window", f"{m['window_s']:.1f} s, {m['requests_counted']} requests counted")
    t.add_row(
        "requests/s offered / achieved",
        f"{_num(m['offered_requests_per_s'])} / {_num(m['achieved_requests_per_s'])}",
    )
    t.add_row("output tokens/s (T)", _num(m["output_tokens_per_s"], ".1f"))
    t.add_row("τ token-weighted ITL, ms", _ms(m["itl_token_weighted_s"]))
    for key, name in (
        ("ttft_s", "TTFT"),
        ("tpot_s", "TPOT"),
        ("itl_chunk_s", "chunk ITL"),
        ("e2e_s", "E2E"),
    ):
        d = m[key]
        t.add_row(
            f"{name} ms (mean / p50 / p99)", f"{_ms(d['mean'])} / {_ms(d['p50'])} / {_ms(d['p99'])}"
        )
    t.add_row("mean concurrency (Little)", _num(m["mean_concurrency"]))
    t.add_row("mean context per token", _num(m["mean_context_per_token"], ".1f"))
    verdict = data.get("slo_verdict") or {}
    if m["slo_attainment"] is not None:
        t.add_row("SLO attainment", f"{m['slo_attainment']:.1%}")
        good_rps = _num(m["goodput_requests_per_s"])
        good_tps = _num(m["goodput_output_tokens_per_s"], ".1f")
        t.add_row("goodput req/s / tokens/s", f"{good_rps} / {good_tps}")
    if verdict:
        t.add_row(
            "SLO verdict",
            "[green]pass[/]" if verdict["passed"] else f"[red]fail[/] ({verdict.get('reason')})",
        )
    errors = ", ".join(f"{k} {v}" for k, v in m["errors_by_kind"].items()) or "none"
    t.add_row("failed requests", f"{m['requests_failed']} ({errors})")
    lat = m["send_lateness_s"]
    t.add_row("send lateness ms (p50 / p99)", f"{_ms(lat['p50'])} / {_ms(lat['p99'])}")
    if data.get("mbu") is not None:
        t.add_row("MBU", f"{data['mbu']:.1%}")
    return t


def result_dict(
    spec: BenchSpec,
    run: ProbeRun,
    target: Target,
    *,
    max_requests: int | None,
    geometry_error: str | None,
    geometry: ModelGeometry | None,
    accelerator: Accelerator | None,
    early_stop_reason: str | None,
) -> dict[str, Any]:
    from tokenwatt import __version__
    from tokenwatt.load.derive import summarize_probe
    from tokenwatt.spec import redact

    summary = summarize_probe(
        index=1,
        run=run,
        spec=spec,
        geometry=geometry,
        accelerator=accelerator,
        early_stop_reason=early_stop_reason,
        requests_file="requests.jsonl",
    )
    verdict = summary.slo_detail
    return {
        "schema": SCHEMA,
        "tokenwatt_version": __version__,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "spec": redact(spec.model_dump(mode="json")),
        "target": redact(target.describe()),
        "probe": {
            "rate_rps": run.rate_rps,
            "concurrency": run.concurrency,
            "arrival": run.arrival,
            "seed": run.seed,
            "prompt_format": run.prompt_format,
            "max_requests": max_requests,
            "settings": run.settings.model_dump(mode="json"),
        },
        "window": run.window_dict(),
        "interrupted": run.interrupted,
        "metrics": run.metrics.model_dump(mode="json"),
        "summary": summary.model_dump(mode="json"),
        "slo_verdict": {
            "passed": summary.slo_passed,
            "kind": verdict.kind,
            "failed": verdict.failed,
            "reason": verdict.reason,
            "attainment": summary.attainment,
            "quantiles_s": verdict.quantiles_s,
        },
        "mbu": summary.mbu,
        "mbu_inputs": None if summary.mbu_detail is None else summary.mbu_detail.model_dump(),
        "mbu_unavailable": geometry_error,
        "warnings": warnings_for(run.metrics),
        "clock": run.clock,
        "client": run.client_stats,
        "requests_file": "requests.jsonl",
    }


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
) -> dict[str, Any]:
    from tokenwatt.errors import TokenwattError
    from tokenwatt.geometry import load_geometry
    from tokenwatt.load.derive import early_stop_for
    from tokenwatt.load.probe import run_probe
    from tokenwatt.load.target import open_target, resolve_accelerator

    geometry = geometry_error = accelerator = None
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
        geometry_error = str(exc)  # a remote endpoint can still be probed; MBU is then absent
    spill = _fresh_spill(out)
    async with open_target(spec, sim_mode=sim_mode) as target:
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=quiet,
        )
        with progress:
            bar = _Bar(progress, spec.search.probe.warmup_s)
            stopper = early_stop_for(spec, rate, spec.search.probe)

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
        spill.close()
        data = result_dict(
            spec,
            run,
            target,
            max_requests=max_requests,
            geometry_error=geometry_error,
            geometry=geometry,
            accelerator=accelerator,
            early_stop_reason=stopper.reason if stopper is not None else None,
        )
    if spill.error is not None:
        data["warnings"].append(f"incremental requests.jsonl stopped: {spill.error}")
    data["warnings"].extend(_keep_up_warnings(data["summary"].get("load_generator")))
    out.mkdir(parents=True, exist_ok=True)
    run.write_requests(out / "requests.jsonl")
    (out / "probe.json").write_bytes(
        orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    )
    return data


def _keep_up_warnings(lg: dict[str, Any] | None) -> list[str]:
    """Printed: the bottleneck verdict with every failed keep-up check, or lost workers; the
    other checks (late with CPU to spare) stay in probe.json's ``load_generator``."""
    if not lg:
        return []
    if lg["bottleneck"]:
        head = "the load generator was the bottleneck, not the server: use more workers"
        return [f"{head} (--workers N)", *(f"keep-up: {p}" for p in lg["problems"])]
    return [f"keep-up: {p}" for p in lg["problems"] if "ended early" in p]


def _fresh_spill(out: Path) -> RecordSpill:
    """The incremental ``requests.jsonl``; a rerun into the same folder starts it afresh."""
    from tokenwatt.load.spill import RecordSpill

    spill = RecordSpill(out / "requests.jsonl")
    if spill.path.exists():
        spill.path.unlink()
    return spill


def _exit_for(data: dict[str, Any]) -> None:
    """Exit 128 + the signal for a stopped probe; 3 when the verdict is not an SLO one (an
    error probe, a saturated load generator)."""
    if data["interrupted"]:
        from tokenwatt.cli._loop import stop_exit_code

        console.print("[yellow]interrupted:[/] wrote what was measured")
        # SystemExit, not typer.Exit: the app runs with standalone_mode=False, where click
        # returns an Exit's code instead of exiting with it.
        raise SystemExit(stop_exit_code())
    detail = data["summary"]["slo_detail"]
    if detail["error_probe"] or detail["load_generator_saturated"]:
        console.print(f"[red]no SLO verdict:[/] {escape(str(detail['reason']))}")
        raise SystemExit(3)


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


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""

    @app.command("probe")
    def probe(  # noqa: PLR0917 - one parameter per flag
        spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="benchmark spec (YAML)")],
        rate: Annotated[
            float | None,
            typer.Option("--rate", "-r", help="offered load, requests/s (the spec's arrivals)"),
        ] = None,
        concurrency: Annotated[
            int | None,
            typer.Option("--concurrency", "-c", help="closed loop: keep N requests in flight"),
        ] = None,
        duration: Annotated[
            float | None,
            typer.Option("--duration", "-d", help="measurement window, s (overrides the spec)"),
        ] = None,
        warmup: Annotated[
            float | None, typer.Option("--warmup", help="warm-up before the window, s")
        ] = None,
        max_requests: Annotated[
            int | None,
            typer.Option("--max-requests", help="count exactly N requests instead of a duration"),
        ] = None,
        seed: Annotated[int | None, typer.Option("--seed", help="default: workload.seed")] = None,
        out: Annotated[
            Path | None,
            typer.Option("--out", "-o", help="output folder (default tokenwatt-probe-<time>)"),
        ] = None,
        sim_mode: Annotated[
            str,
            typer.Option(
                "--sim-mode",
                help="endpoint 'sim': its own process (default; no GIL shared with the client) "
                "or a thread of this one",
            ),
        ] = "subprocess",
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help="no progress bar or summary")
        ] = False,
        workers: WorkersOption = None,
    ) -> None:
        """Run one probe at one offered load and write probe.json and requests.jsonl."""
        from tokenwatt.spec import load_spec

        if sim_mode not in ("thread", "subprocess"):
            raise SpecError(f"--sim-mode: {sim_mode!r} is not one of thread, subprocess")
        if rate is not None and concurrency is not None:
            raise SpecError("give --rate (open loop) or --concurrency (closed loop), not both")
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise SpecError(f"--rate must be a positive number of requests/s, got {rate}")
        if max_requests is not None and max_requests < 1:
            raise SpecError("--max-requests must be at least 1")
        spec = _with_flags(load_spec(spec_path), duration=duration, warmup=warmup)
        spec = with_workers(spec, workers)
        folder = out or Path(f"tokenwatt-probe-{dt.datetime.now():%Y%m%d-%H%M%S}")
        from tokenwatt.cli._loop import run_async

        data = run_async(
            _probe(
                spec,
                rate=rate,
                concurrency=concurrency,
                max_requests=max_requests,
                seed=spec.workload.seed if seed is None else seed,
                out=folder,
                sim_mode=sim_mode,  # type: ignore[arg-type]
                quiet=quiet,
            )
        )
        if not quiet:
            console.print(summary_table(data))
            for w in data["warnings"]:
                console.print(f"[yellow]warning:[/] {escape(str(w))}", highlight=False)
            console.print(f"wrote {folder / 'probe.json'} and {folder / 'requests.jsonl'}")
        _exit_for(data)
