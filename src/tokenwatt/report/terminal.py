"""The terminal report: rich renderables built from a result file; nothing here prints.

Order is the product's argument: SLO goodput and tokens per joule first, MBU beside them with
every input, then the probes that found the boundary, the single-stream latency floor, and
the self-checks. ``ResultView`` follows rich's console protocol, so ``console.print(view)``
renders it and the result models stay free of rich.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokenwatt.report.checks import self_checks
from tokenwatt.report.engine_view import ENGINE_HEADER, engine_probe, engine_rows
from tokenwatt.report.format import (
    DASH,
    fmt_bytes,
    fmt_bytes_per_s,
    fmt_float,
    fmt_ms,
    fmt_pct,
    fmt_quantile,
    fmt_rate,
    fmt_signed_pct,
    fmt_tokens_per_s,
    goodput_headline,
    no_boundary_text,
    no_failure_seen,
)
from tokenwatt.report.intervals_text import interval_caption, interval_rows
from tokenwatt.report.mbu_text import mbu_figures_text, raised_flags
from tokenwatt.result import BenchResult, ProbeSummary, SloSettings

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

    from tokenwatt.report.compare import Comparison, MetricRow

__all__ = [
    "ProbeTable",
    "ResultView",
    "checks_block",
    "comparison_view",
    "cost_text",
    "describe_run",
    "describe_slo",
    "energy_text",
    "engine_block",
    "engine_table",
    "headline",
    "intervals_block",
    "mbu_block",
    "probe_table",
    "single_stream_block",
]


def describe_slo(slo: SloSettings) -> str:
    """The SLO in one line, e.g. ``p99 TTFT ≤ 500 ms, p99 TPOT ≤ 60 ms``."""
    limits = [
        (name, ms)
        for name, ms in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E", slo.e2e_ms))
        if ms is not None
    ]
    if slo.kind == "attainment":
        each = " and ".join(f"{name} ≤ {ms:g} ms" for name, ms in limits)
        return f"≥ {fmt_pct(slo.attainment, 0)} of requests with {each}"
    q = fmt_quantile(slo.percentile)
    return ", ".join(f"{q} {name} ≤ {ms:g} ms" for name, ms in limits)


def describe_run(result: BenchResult) -> str:
    """``name · model on N × accelerator (R replicas)``, and ``SIMULATED`` where the built-in
    simulator served it: a screenshot must not read like a real H100 measurement."""
    model = result.geometry.name
    acc = result.accelerator.display_name or result.accelerator.name
    replicas = "1 replica" if result.replicas == 1 else f"{result.replicas} replicas"
    if result.simulated:
        node = f"{result.gpus} × {acc} ({replicas}, tokenwatt sim)"
        return f"{result.name} · SIMULATED {model} on {node}"
    return f"{result.name} · {model} on {result.gpus} × {acc} ({replicas})"


def rate_text(p: ProbeSummary) -> str:
    """The offered rate with the achieved one beside it: Poisson noise in a short window
    moves the achieved rate by several percent, and the boundary is only as exact as that."""
    if p.rate_rps is None:
        return fmt_rate(p.achieved_rate_rps)
    return f"{fmt_rate(p.rate_rps)} offered, {fmt_float(p.achieved_rate_rps)} achieved"


def energy_text(p: ProbeSummary) -> str:
    """Tokens per joule with its provenance: measured, modelled, or not measured."""
    if p.tokens_per_joule is None:
        return "not measured"
    text = f"{fmt_float(p.tokens_per_joule)} tok/J"
    e = p.energy
    if e is None:
        return text
    parts = []
    if e.joules_per_output_token is not None:
        parts.append(f"{fmt_float(e.joules_per_output_token)} J/token")
    if e.joules_per_total_token is not None:
        parts.append(f"{fmt_float(e.joules_per_total_token)} J/total token")
    parts.append(f"{fmt_float(e.mean_power_w)} W mean")
    parts.append(f"{e.source}, {e.scope}")
    bad = [a for a in e.audit if not a.valid]
    if e.audit:
        parts.append("audit valid" if not bad else f"audit INVALID: {bad[0].verdict}")
    modelled = e.is_modelled
    return f"{text}{' modelled' if modelled else ''}  ({'; '.join(parts)})"


def cost_text(p: ProbeSummary) -> str | None:
    """$/Mtok at the probe's goodput with its parts, or None without a price in the spec."""
    c = p.cost
    if c is None:
        return None
    if c.usd_per_mtok is None:
        return "no goodput: no cost per token"
    energy = (
        f" + {fmt_float(c.usd_per_mtok_energy)} energy at {fmt_float(c.price_per_kwh)}/kWh"
        if c.usd_per_mtok_energy is not None
        else ""
    )
    return (
        f"{fmt_float(c.usd_per_mtok)} $/Mtok  ({fmt_float(c.usd_per_mtok_gpu)} GPU time at "
        f"{fmt_float(c.price_per_gpu_hour)}/GPU-h × {c.gpus}{energy})"
    )


def _mbu_text(p: ProbeSummary) -> str:
    return mbu_figures_text(p.mbu, p.mbu_detail)


def _goodput_row(result: BenchResult, b: ProbeSummary, *, probe_only: bool) -> tuple[str, str]:
    """The headline's first row. A probe that failed (or was cut by an error or Ctrl-C) is
    never called "SLO goodput"; a boundary without a failure above it is a lower bound."""
    if probe_only:
        verdict = "SLO met" if b.slo_passed else "SLO NOT met"
        if b.interrupted:
            verdict = "interrupted"
        text = (
            f"{fmt_tokens_per_s(b.goodput_output_tokens_per_s)} output tok/s  ·  "
            f"at {rate_text(b)}  ·  one probe, {verdict}"
        )
        return ("SLO goodput" if b.slo_passed else "Goodput"), text
    per_gpu = fmt_tokens_per_s(b.goodput_output_tokens_per_s_per_gpu)
    if b.boundary_rate_rps is None and not no_failure_seen(result):  # no fit: as measured
        text = (
            f"{fmt_tokens_per_s(b.goodput_output_tokens_per_s)} output tok/s  ·  "
            f"{per_gpu} per GPU  ·  at {rate_text(b)}"
        )
        return "SLO goodput", text
    main, detail = goodput_headline(result, b)
    text = f"{main}  ·  {per_gpu} per GPU  ·  at {rate_text(b)}"
    return "SLO goodput", text + (f"  ·  {detail}" if detail else "")


def headline(result: BenchResult) -> RenderableType:
    """SLO goodput, tokens per joule and MBU at the boundary, in that order."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    b = result.boundary
    probe_only = b is None and result.search is None and len(result.probes) == 1
    if probe_only:  # `tokenwatt probe`'s folder: its one probe, with its own verdict
        b = result.probes[0]
    if b is None:
        grid.add_row("SLO goodput", Text(no_boundary_text(result), "bold red"))
        grid.add_row("Tokens per joule", Text(DASH))
        grid.add_row("MBU", Text(DASH))
    else:
        label, good = _goodput_row(result, b, probe_only=probe_only)
        grid.add_row(label, Text(good, "bold green" if b.slo_passed else "bold red"))
        tpj = energy_text(b)
        grid.add_row("Tokens per joule", Text(tpj, "yellow" if b.tokens_per_joule is None else ""))
        cost = cost_text(b)
        if cost is not None:
            grid.add_row("Cost", Text(cost))
        refused = b.mbu_detail is not None and b.mbu_detail.flags.above_rated_bandwidth
        grid.add_row("MBU", Text(_mbu_text(b), "bold red" if refused else ""))
        if refused and b.mbu_detail is not None and b.mbu_detail.notes:
            grid.add_row("", Text(b.mbu_detail.notes[0], "red"))
    title = Text(describe_run(result), "bold")
    slo = Text(f"SLO: {describe_slo(result.slo)}", "dim")
    return Group(title, slo, Text(""), grid)


def intervals_block(result: BenchResult) -> RenderableType | None:
    """The headline probe's figures with their intervals (``report.intervals_text``); None
    when it has none (an older file, too few requests, no boundary)."""
    b = result.boundary
    if b is None and result.search is None and len(result.probes) == 1:
        b = result.probes[0]
    rows = [] if b is None else interval_rows(b)
    if b is None or not rows:
        return None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for label, text in rows:
        grid.add_row(label, text)
    notes = [Text(f"note: {n}", "yellow") for n in (b.intervals.notes if b.intervals else [])]
    return Group(Text(interval_caption(b) or "", "dim"), grid, *notes)


def mbu_block(result: BenchResult, p: ProbeSummary | None = None) -> RenderableType:
    """MBU = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth), every input beside the result."""
    p = p if p is not None else result.boundary
    if p is None or p.mbu_detail is None:
        return Text("MBU inputs: not available (no boundary)", "dim")
    i = p.mbu_detail.inputs
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
    t.add_column("input", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("meaning")
    rows: list[tuple[str, str, str]] = [
        ("T", f"{fmt_tokens_per_s(i.output_tokens_per_s)} tok/s", "output tokens/s, node"),
        ("τ", fmt_ms(i.itl_token_weighted_s), "token-weighted mean inter-token latency"),
        ("R", str(i.replicas), "data-parallel replicas"),
        ("s = 1/τ", f"{fmt_float(i.steps_per_s_per_replica)} /s", "decode steps/s per replica"),
        ("B = T·τ/R", fmt_float(i.batch_per_replica), "sequences per step per replica"),
    ]
    if i.experts:
        rows.append(
            (
                "E[experts]",
                f"{fmt_float(i.expected_distinct_experts)} of {i.experts}",
                f"distinct experts per MoE layer at B ({i.moe_layers} layers, uniform routing)",
            )
        )
    if i.speculation is not None:  # speculative decoding: s, B from steps (metrics.spec_mbu)
        sp = i.speculation
        rows += [
            ("α", fmt_float(sp.acceptance_length, 3), "acceptance length: tokens per step"),
            ("τ_c", fmt_ms(sp.itl_chunk_s), "ITL per chunk: one verify step (s = 1/τ_c)"),
            (
                "W_t",
                fmt_bytes(sp.target_weight_bytes_per_step),
                f"verify pass, k = {sp.num_tokens}",
            ),
            ("W_d", fmt_bytes(sp.draft_weight_bytes_per_step), f"drafter ({sp.method})"),
        ]
    rows += [
        ("W(B)", fmt_bytes(i.weight_bytes_per_step), "weight bytes per step"),
        ("R·s·W(B)", fmt_bytes_per_s(i.weight_bytes_per_s), "weight traffic"),
        ("context", f"{fmt_float(i.mean_context_per_token, 4)} tok", "mean per generated token"),
        ("KV/token", fmt_bytes(i.kv_bytes_per_output_token), "KV bytes read per output token"),
        ("KV/s", fmt_bytes_per_s(i.kv_bytes_per_s), "KV traffic"),
        (
            "N·BW",
            fmt_bytes_per_s(i.node_bandwidth_bytes_per_s),
            f"{i.gpus} GPU × {fmt_bytes_per_s(i.bandwidth_bytes_per_s_per_gpu)} rated",
        ),
    ]
    for name, value, meaning in rows:
        t.add_row(Text(name), Text(value), Text(meaning))
    label = "boundary" if p is result.boundary else f"probe {p.index}"
    title = Text(f"MBU at the {label}: {_mbu_text(p)}", "bold")
    lines = [Text(f"flag {f}", "yellow") for f in raised_flags(p.mbu_detail)]
    lines += [Text(f"note: {n}", "dim") for n in p.mbu_detail.notes]
    return Group(title, t, *lines)


def _slo_cell(p: ProbeSummary) -> Text:
    if p.interrupted:
        return Text("interrupted", "yellow")
    if p.slo_passed:
        return Text("pass", "green")
    # "ttft_p99" → "ttft": the column header already says which quantile.
    why = ", ".join(f.split("_p")[0] for f in p.slo_detail.failed)
    return Text(f"FAIL {why}".strip(), "red")


# Below this width the optional columns (B, tokens/J) are left out, so that the verdict
# column keeps room in an 80-column terminal.
WIDE_TABLE_MIN_WIDTH = 92


def _probe_grid(result: BenchResult, *, wide: bool) -> Table:
    q = fmt_quantile(result.slo.percentile)
    qv = result.slo.percentile
    # One space between columns (collapsed padding).
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    t.add_column("#", justify="right", no_wrap=True, min_width=3)
    names = ["rate", "achieved", "T tok/s", "B", f"TTFT {q}", f"TPOT {q}", "attain", "MBU"]
    names += ["tok/J"]
    optional = {"B", "tok/J"}
    shown = [n for n in names if wide or n not in optional]
    for name in shown:
        t.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    # The only column allowed to wrap, so the numbers never get cut.
    t.add_column("SLO", overflow="fold", ratio=1, min_width=4)
    boundary = result.boundary.index if result.boundary is not None else None
    for p in result.probes:
        ttft = p.latency_at("ttft", qv)
        tpot = p.latency_at("tpot", qv)
        cells = {
            "rate": fmt_float(p.rate_rps),
            "achieved": fmt_float(p.achieved_rate_rps),
            "T tok/s": fmt_tokens_per_s(p.output_tokens_per_s),
            "B": fmt_float(p.batch_per_replica),
            f"TTFT {q}": fmt_ms(ttft),
            f"TPOT {q}": fmt_ms(tpot),
            "attain": fmt_pct(p.attainment),
            "MBU": fmt_pct(p.mbu),
            "tok/J": fmt_float(p.tokens_per_joule),
        }
        label = f"{p.index}{'*' if p.index == boundary else ''}"
        t.add_row(Text(label), *(Text(cells[n]) for n in shown), _slo_cell(p))
    return t


class ProbeTable:
    """One row per probe in the order run, the boundary marked; fits the console's width."""

    def __init__(self, result: BenchResult) -> None:
        self.result = result

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text("Probes (rates in req/s; * = boundary)", "bold")
        yield _probe_grid(self.result, wide=options.max_width >= WIDE_TABLE_MIN_WIDTH)


def probe_table(result: BenchResult) -> RenderableType:
    return ProbeTable(result)


def single_stream_block(result: BenchResult) -> RenderableType:
    """The latency floor: one request at a time."""
    s = result.single_stream
    if s is None:
        return Text("Single stream: not measured", "dim")
    grid = Table.grid(padding=(0, 2))
    for _ in range(5):
        grid.add_column(no_wrap=True)
    grid.add_row(
        f"TTFT p50 {fmt_ms(s.ttft_s.p50)}",
        f"TPOT p50 {fmt_ms(s.tpot_s.p50)}",
        f"ITL p50 {fmt_ms(s.itl_s.p50)}",
        f"E2E p50 {fmt_ms(s.e2e_s.p50)}",
        f"{fmt_tokens_per_s(s.output_tokens_per_s)} tok/s",
    )
    n = s.requests_ok + s.requests_failed
    return Group(Text(f"Single stream (latency floor, {n} requests one at a time)", "bold"), grid)


def engine_table(p: ProbeSummary) -> Table | None:
    """Client beside engine for one probe; None when the engine was not scraped."""
    rows = engine_rows(p)
    if not rows:
        return None
    label = "single stream" if p.index == 0 else f"probe {p.index}"
    t = Table(title=f"Client vs engine /metrics ({label})", box=box.SIMPLE_HEAD)
    for i, h in enumerate(ENGINE_HEADER):
        t.add_column(h, justify="left" if i in (0, 4) else "right")
    for row in rows:
        style = "yellow" if row[4].startswith("DISAGREE") else None
        t.add_row(*row, style=style)
    return t


def engine_block(result: BenchResult) -> Iterator[RenderableType]:
    """The boundary's (else the last scraped probe's) client-vs-engine table, if any."""
    p = engine_probe(result)
    table = None if p is None else engine_table(p)
    if table is not None:
        yield table


def checks_block(result: BenchResult) -> RenderableType:
    checks = self_checks(result)
    if not checks:
        return Text("Self-checks: nothing to report", "dim")
    lines = [Text("Self-checks", "bold")]
    for c in checks:
        style = "yellow" if c.level == "warning" else "dim"
        lines.append(Text(f"{'!' if c.level == 'warning' else 'i'} {c.message}", style))
    return Group(*lines)


class ResultView:
    """A whole result as one renderable: ``console.print(ResultView(result))``."""

    def __init__(self, result: BenchResult) -> None:
        self.result = result

    def sections(self) -> Iterator[RenderableType]:
        r = self.result
        yield headline(r)
        if (intervals := intervals_block(r)) is not None:
            yield intervals
        yield mbu_block(r)
        yield probe_table(r)
        yield single_stream_block(r)
        yield from engine_block(r)
        yield checks_block(r)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for i, section in enumerate(self.sections()):
            if i:
                yield Text("")
            yield section


def _metric_value(row: MetricRow, v: float | None) -> str:
    if row.kind == "tokens_per_s":
        return fmt_tokens_per_s(v)
    if row.kind == "fraction":
        return fmt_pct(v)
    if row.kind == "seconds":
        return fmt_ms(v)
    return fmt_float(v)


def _change_style(row: MetricRow, change: float | None) -> str:
    if change is None or row.better == "neither" or round(change * 100, 1) == 0:
        return "dim"
    good = change > 0 if row.better == "higher" else change < 0
    return "green" if good else "red"


def comparison_view(comparison: Comparison) -> RenderableType:
    """Figures per run, each later run with its change against the first (green: better)."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("at the boundary", no_wrap=True)
    for i, label in enumerate(comparison.labels):
        t.add_column(Text(label if i else f"{label} (base)"), justify="right", overflow="fold")
    for row in comparison.rows:
        cells: list[Text] = [Text(f"{row.name} ({row.unit})" if row.unit else row.name)]
        for i, (v, change) in enumerate(zip(row.values, row.changes, strict=True)):
            cell = Text(_metric_value(row, v))
            if i and change is not None:
                cell.append(f" {fmt_signed_pct(change)}", _change_style(row, change))
            cells.append(cell)
        t.add_row(*cells)
    parts: list[RenderableType] = [t]
    if comparison.pareto:
        parts += [Text(""), pareto_view(comparison)]
    if comparison.warnings:
        parts.append(Text(""))
        parts += [Text(f"! {w}", "yellow") for w in comparison.warnings]
    return Group(*parts)


def pareto_view(comparison: Comparison) -> RenderableType:
    """Every probe of every run: output tokens/s per GPU against per-user interactivity
    (1/median TPOT), highest interactivity first; ★ marks the Pareto frontier."""
    t = Table(
        title="throughput vs interactivity (★ Pareto frontier)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    for name in ("run", "probe", "rate (req/s)", "tok/s per user", "output tok/s per GPU", "SLO"):
        t.add_column(name, justify="left" if name == "run" else "right", no_wrap=True)
    for p in comparison.pareto:
        star = "★ " if p.on_frontier else ""
        rate = "single stream" if p.rate_rps is None else f"{p.rate_rps:.3g}"
        t.add_row(
            Text(f"{star}{p.label}", "bold" if p.on_frontier else ""),
            str(p.probe_index),
            rate,
            f"{p.interactivity_tok_s_per_user:.1f}",
            f"{p.output_tok_s_per_gpu:.1f}",
            Text("pass", "green") if p.slo_passed else Text("fail", "red"),
        )
    return t
