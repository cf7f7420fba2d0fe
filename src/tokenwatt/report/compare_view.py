"""``tokenwatt compare`` in the terminal: the runs' figures side by side, their Pareto view
and every like-for-like warning, as rich renderables (nothing here prints).

Why apart from ``report.terminal``: the comparison's data (``report.compare``) and the single
run's view share only the run's labels (``report.labels``); keeping this view in its own
module leaves no import circle between them.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokenwatt.report.compare import Comparison, MetricRow
from tokenwatt.report.format import (
    fmt_float,
    fmt_ms,
    fmt_pct,
    fmt_signed_pct,
    fmt_tokens_per_s,
)
from tokenwatt.report.labels import SIMULATED, SIMULATED_NOTE
from tokenwatt.report.verdict import AbVerdicts

__all__ = ["comparison_view", "pareto_view", "verdict_view"]


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


def _simulated(comparison: Comparison, i: int) -> bool:
    return i < len(comparison.simulated) and comparison.simulated[i]


def _run_label(comparison: Comparison, i: int) -> Text:
    """The run's label, ``(base)`` on the first, and the simulated mark where it applies."""
    text = Text(comparison.labels[i] + ("" if i else " (base)"))
    if _simulated(comparison, i):
        text.append(f" {SIMULATED}", "bold magenta")
    return text


def _mark_lines(comparison: Comparison) -> list[Text]:
    """One line naming the simulated runs, under every table that shows them."""
    sim = [lab for i, lab in enumerate(comparison.labels) if _simulated(comparison, i)]
    if not sim:
        return []
    return [Text(f"{', '.join(sim)}: {SIMULATED_NOTE}", "magenta")]


def comparison_view(comparison: Comparison) -> RenderableType:
    """Figures per run, each later run with its change against the first (green: better)."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("at the boundary", no_wrap=True)
    for i in range(len(comparison.labels)):
        t.add_column(_run_label(comparison, i), justify="right", overflow="fold")
    for row in comparison.rows:
        cells: list[Text] = [Text(f"{row.name} ({row.unit})" if row.unit else row.name)]
        for i, (v, change) in enumerate(zip(row.values, row.changes, strict=True)):
            cell = Text(_metric_value(row, v))
            if i and change is not None:
                cell.append(f" {fmt_signed_pct(change)}", _change_style(row, change))
            cells.append(cell)
        t.add_row(*cells)
    parts: list[RenderableType] = [t, *_mark_lines(comparison)]
    if comparison.pareto:
        parts += [Text(""), pareto_view(comparison), *_mark_lines(comparison)]
    if comparison.warnings:
        parts.append(Text(""))
        parts += [Text(f"! {w}", "yellow") for w in comparison.warnings]
    return Group(*parts)


def pareto_view(comparison: Comparison) -> RenderableType:
    """Every probe of every run: output tokens/s per GPU against per-user interactivity
    (1/median TPOT), highest interactivity first; ★ marks the Pareto frontier of the probes
    that met the SLO."""
    t = Table(
        title="throughput vs interactivity (★ Pareto frontier of the passing probes)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    for name in ("run", "probe", "rate (req/s)", "tok/s per user", "output tok/s per GPU", "SLO"):
        t.add_column(name, justify="left" if name == "run" else "right", no_wrap=True)
    index = {label: i for i, label in enumerate(comparison.labels)}
    for p in comparison.pareto:
        star = "★ " if p.on_frontier else ""
        rate = "single stream" if p.probe_index == 0 else "—"
        if p.rate_rps is not None:
            rate = f"{p.rate_rps:.3g}"
        elif p.concurrency is not None and p.probe_index != 0:
            rate = f"concurrency {p.concurrency}"
        run = Text(f"{star}{p.label}", "bold" if p.on_frontier else "")
        if _simulated(comparison, index.get(p.label, -1)):
            run.append(f" {SIMULATED}", "magenta")
        t.add_row(
            run,
            str(p.probe_index),
            rate,
            f"{p.interactivity_tok_s_per_user:.1f}",
            f"{p.output_tok_s_per_gpu:.1f}",
            Text("pass", "green") if p.slo_passed else Text("fail", "red"),
        )
    return t


def verdict_view(ab: AbVerdicts) -> RenderableType:
    """B against A: one line per figure (``report.verdict``), or the refusal naming every
    field the specs differ in beyond the settings under test."""
    a, b = ab.labels
    head = f"A/B verdict: B = {b} against A = {a}"
    design = (
        "paired design (same seed schedule; the interval treats the runs as independent, "
        "which is conservative when the shared schedule correlates them)"
        if ab.paired
        else "independent runs (different seed schedules)"
    )
    parts: list[RenderableType] = [Text(""), Text(head, "bold")]
    if ab.refused:
        parts.append(
            Text(
                "no verdict: the specs differ in more than the settings under test "
                "(name a field with --under-test KEY to compare it):",
                "yellow",
            )
        )
        parts += [Text(f"  {line}", "yellow") for line in ab.refused]
        return Group(*parts)
    parts.append(Text(design))
    for v in ab.verdicts:
        style = "bold" if v.called else ""
        parts.append(Text(f"  {v.text()}", style))
    return Group(*parts)
