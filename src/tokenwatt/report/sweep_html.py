"""The sweep's picture: one self-contained HTML file for a sweep or for any set of runs.

The figure is the buyers' trade-off (InferenceX, the peers' sweep plots): output tokens/s per
GPU at the SLO (goodput ÷ N_GPU) against tokens/s per user (1 ÷ median TPOT at the boundary).
Each run contributes its *boundary*: the operating point where its SLO still held. The
frontier is drawn over passing points only (a point without a boundary never met the SLO and
is listed below, not plotted); every point is labelled with its settings, and simulated
points are hollow and say "sim". Tokens per joule, the energy audit's verdict (with its cause
when invalid) and $/Mtok (without an invalid energy's part) sit beside each point in the table.

What a buyer needs to read the figures stands on the page and in the terminal summary
(``summary_lines``): the SLO and the prices the points were judged and priced at, each point's
stop reason, and whether its boundary is only a lower bound (the search stopped at its probe or
rate limit: "≥"). Per-device figures name the device the hardware has (GPU, accelerator, CPU
socket, node), never "GPU" for a CPU sweep.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from tokenwatt.errors import ReportError
from tokenwatt.report.html import _CSS, _e, _figure, _section, _table
from tokenwatt.report.labels import SIMULATED_NOTE, describe_slo
from tokenwatt.report.pareto import pareto_mask
from tokenwatt.report.plots import _RC, BOUNDARY, FAIL, MUTED, PASS, _to_svg
from tokenwatt.result import RESULT_FILE, load_result
from tokenwatt.sweep_result import SWEEP_FILE, OperatingPoint, load_sweep, operating_point

__all__ = [
    "SWEEP_REPORT_FILE",
    "PlotPoint",
    "collect_points",
    "render_sweep_html",
    "summary_lines",
    "write_sweep_html",
]

SWEEP_REPORT_FILE = "sweep.html"


@dataclass(frozen=True, slots=True)
class PlotPoint:
    """One run or sweep point as the picture shows it."""

    label: str
    status: str  # ok, failed, interrupted
    cause: str | None
    folder: str
    op: OperatingPoint | None

    @property
    def xy(self) -> tuple[float, float] | None:
        """(tokens/s per user, goodput tokens/s per GPU) of a passing point, else None."""
        op = self.op
        if self.status != "ok" or op is None or not op.boundary:
            return None
        x, y = op.tokens_per_s_per_user, op.goodput_output_tokens_per_s_per_gpu
        return None if x is None or y is None or y <= 0 else (x, y)


def collect_points(paths: Sequence[str | Path]) -> tuple[str, list[PlotPoint]]:
    """The points of each path: a sweep folder (or its ``sweep.json``) gives all its points,
    a run folder (or ``result.json``) gives its boundary. Returns a title and the points."""
    points: list[PlotPoint] = []
    names = []
    for raw in paths:
        p = Path(raw)
        if (p / SWEEP_FILE).is_file() or p.name == SWEEP_FILE:
            sweep = load_sweep(p)
            names.append(sweep.name)
            points += [
                PlotPoint(s.label, s.status, s.cause, s.folder, s.point) for s in sweep.points
            ]
        elif (p / RESULT_FILE).is_file() or p.name == RESULT_FILE:
            r = load_result(p)
            names.append(r.name)
            points.append(PlotPoint(r.name, "ok", None, str(p), operating_point(r)))
        else:
            raise ReportError(f"{p}: neither a sweep folder (sweep.json) nor a run (result.json)")
    return " + ".join(names), points


def _num(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def pareto_svg(points: Sequence[PlotPoint]) -> str | None:
    """The frontier figure as inline SVG; None when no point passed."""
    shown = [(p, xy) for p in points if (xy := p.xy) is not None]
    if not shown:
        return None
    mask = pareto_mask([xy for _, xy in shown])
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(9.4, 4.6), layout="constrained")
        ax = fig.subplots()
        front = sorted(xy for (_, xy), on in zip(shown, mask, strict=True) if on)
        ax.plot([x for x, _ in front], [y for _, y in front], color=BOUNDARY, lw=1.5,
                label="Pareto frontier (passing points)", zorder=2)  # fmt: skip
        for (p, (x, y)), on in zip(shown, mask, strict=True):
            sim = p.op is not None and p.op.simulated
            color = PASS if on else MUTED
            ax.scatter([x], [y], s=60, zorder=3, facecolors="white" if sim else color,
                       edgecolors=color, linewidths=1.6)  # fmt: skip
            ax.annotate(_plot_label(p), (x, y), xytext=(5, 5),
                        textcoords="offset points", fontsize=8, color=color)  # fmt: skip
        ax.set_xlabel("tokens/s per user at the boundary (1 ÷ median TPOT)")
        unit = _unit(points)
        ax.set_ylabel(f"goodput output tokens/s per {unit}")
        ax.set_title(f"Throughput per {unit} against interactivity, at the SLO")
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
        return _to_svg(fig, "Pareto frontier of the sweep")


def _unit(points: Sequence[PlotPoint]) -> str:
    """The device the per-device figures are per; "device" when points differ in it."""
    units = {p.op.device_unit for p in points if p.op is not None}
    return units.pop() if len(units) == 1 else "device"


def _plot_label(p: PlotPoint) -> str:
    lower = p.op is not None and p.op.lower_bound
    return p.label + (" ≥" if lower else "") + (" (sim)" if p.op and p.op.simulated else "")


def _distinct(values: Sequence[str]) -> str:
    """One value, or each distinct value (points judged or priced differently)."""
    seen = list(dict.fromkeys(values))
    return seen[0] if len(seen) == 1 else " | ".join(seen) + " (the points differ)"


def _slo_text(points: Sequence[PlotPoint]) -> str:
    slos = [describe_slo(p.op.slo) for p in points if p.op is not None and p.op.slo is not None]
    return _distinct(slos) if slos else "not recorded"


def _price_text(points: Sequence[PlotPoint]) -> str:
    unit = _unit(points)
    prices = []
    for p in points:
        op = p.op
        if op is None:
            continue
        gpu = op.price_per_gpu_hour
        text = "none stated ($/Mtok not computed)" if gpu is None else f"{gpu:g} per {unit}-hour"
        prices.append(
            text + ("" if op.price_per_kwh is None else f", {op.price_per_kwh:g} per kWh")
        )
    return _distinct(prices) if prices else "not recorded"


def _energy_text(op: OperatingPoint | None) -> str:
    if op is None or op.energy_valid is None:
        return "—"
    return "valid" if op.energy_valid else f"invalid: {op.energy_cause or 'no cause recorded'}"


def _stop_text(p: PlotPoint) -> str:
    """The search's stop reason, and "lower bound" where the boundary was not found."""
    op = p.op
    if op is None or op.stop_reason is None:
        return "—"
    return op.stop_reason + (" (boundary is a lower bound)" if op.lower_bound else "")


def _per_device(op: OperatingPoint | None) -> float | None:
    """Goodput per device; a node unit shows the node's goodput (N devices unknown)."""
    if op is None:
        return None
    if op.device_unit == "node":
        return op.goodput_output_tokens_per_s
    return op.goodput_output_tokens_per_s_per_gpu


def _rows(points: Sequence[PlotPoint]) -> list[list[str]]:
    shown = [p for p in points if p.xy is not None]
    on = dict(zip((id(p) for p in shown), pareto_mask([p.xy for p in shown if p.xy]), strict=True))
    rows = []
    for p in points:
        op = p.op
        status = p.status if p.xy is not None or p.status != "ok" else "no boundary"
        cls = "pass" if p.xy is not None else "fail"
        goodput = _num(_per_device(op), ",.1f")
        if op is not None and op.lower_bound and goodput != "—":
            goodput = "≥ " + goodput
        rows.append([
            html.escape(p.label) + (" (sim)" if op is not None and op.simulated else ""),
            f'<span class="{cls}">{html.escape(status)}</span>'
            + (f"<br><small>{html.escape(p.cause)}</small>" if p.cause else ""),
            html.escape(_stop_text(p)),
            "yes" if on.get(id(p)) else "",
            goodput,
            _num(None if op is None else op.tokens_per_s_per_user, ",.1f"),
            _num(None if op is None else op.tokens_per_joule, ",.3g"),
            _num(None if op is None else op.joules_per_output_token, ",.3g"),
            _num(None if op is None else op.joules_per_total_token, ",.3g"),
            html.escape(_energy_text(op)),
            _num(None if op is None else op.usd_per_mtok, ",.3g"),
            html.escape(p.folder),
        ])  # fmt: skip
    return rows


def _context_html(points: Sequence[PlotPoint]) -> str:
    """The SLO, the prices and the reading rules, above the figure and the table."""
    items = [
        f"<li><b>SLO</b>: {_e(_slo_text(points))}</li>",
        f"<li><b>Price</b>: {_e(_price_text(points))}; $/Mtok leaves out an energy the audit "
        "found invalid</li>",
        f"<li><b>Per {_e(_unit(points))}</b>: goodput ÷ the run's device count</li>",
    ]
    if any(p.op is not None and p.op.lower_bound for p in points):
        items.append(
            "<li><b>≥</b>: the search stopped at its probe or rate limit before it found the "
            "boundary; the point is the highest passing rate, a lower bound</li>"
        )
    if any(p.op is not None and p.op.simulated for p in points):
        items.append(f"<li><b>(sim)</b>: {_e(SIMULATED_NOTE)}</li>")
    return "<ul class='context'>" + "".join(items) + "</ul>"


def summary_lines(points: Sequence[PlotPoint]) -> list[str]:
    """The sweep's terminal summary: the SLO and price once, then one line per point with its
    status, stop reason, goodput per device (≥ for a lower bound), energy and cost."""
    unit = _unit(points)
    out = [f"SLO: {_slo_text(points)}", f"price: {_price_text(points)}"]
    for p in points:
        op = p.op
        line = f"{p.label}{' (sim)' if op is not None and op.simulated else ''}: {p.status}"
        if p.cause:
            line += f" ({p.cause})"
        if op is not None:
            line += f"; stop {_stop_text(p)}"
            if op.boundary and (g := _per_device(op)) is not None:
                line += f"; goodput {'≥ ' if op.lower_bound else ''}{g:,.1f} tok/s per {unit}"
            line += f"; energy {_energy_text(op)}"
            if op.usd_per_mtok is not None:
                line += f"; {op.usd_per_mtok:,.3g} per Mtok"
        out.append(line)
    return out


def render_sweep_html(title: str, points: Sequence[PlotPoint]) -> str:
    svg = pareto_svg(points)
    fig = (
        _figure(svg, "Each passing point is a run's SLO boundary; hollow points are simulated.")
        if svg is not None
        else f'<p class="none" style="color:{FAIL}">No point met the SLO: no frontier.</p>'
    )
    headers = ["point", "status", "stop", "frontier", f"goodput tok/s/{_unit(points)}",
               "tok/s/user", "tokens/J", "J/output tok", "J/total tok", "energy", "$/Mtok",
               "folder"]  # fmt: skip
    table = _table(headers, _rows(points), left=(0, 1, 2, 9, 11))
    data = [
        {"label": p.label, "status": p.status, "cause": p.cause, "folder": p.folder,
         "point": None if p.op is None else p.op.model_dump(mode="json")}
        for p in points
    ]  # fmt: skip
    payload = json.dumps(data).replace("</", "<\\/")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>TokenWatt sweep · {_e(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<header><h1>{_e(title)}</h1><p class='sub'>{len(points)} points</p>"
        f"{_context_html(points)}</header>"
        f"{_section('frontier', 'Pareto frontier at the SLO', fig)}"
        f"{_section('points', 'Points', table)}"
        f'</main><script type="application/json" id="sweep-json">{payload}</script>'
        "</body></html>\n"
    )


def write_sweep_html(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Render the picture of ``paths`` into ``out`` (a file, or a folder: ``sweep.html``)."""
    title, points = collect_points(paths)
    target = Path(out)
    if target.is_dir():
        target = target / SWEEP_REPORT_FILE
    target.write_text(render_sweep_html(title, points), "utf-8")
    return target
