"""The sweep's picture: one self-contained HTML file for a sweep or for any set of runs.

The figure is the buyers' trade-off (InferenceX, the peers' sweep plots): output tokens/s per
GPU at the SLO (goodput ÷ N_GPU) against tokens/s per user (1 ÷ median TPOT at the boundary).
Each run contributes its *boundary*: the operating point where its SLO still held. The
frontier is drawn over passing points only (a point without a boundary never met the SLO and
is listed below, not plotted); every point is labelled with its settings, and simulated
points are hollow and say "sim". Tokens per joule, the energy audit's verdict and $/Mtok sit
beside each point in the table.
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
from tokenwatt.report.pareto import pareto_mask
from tokenwatt.report.plots import _RC, BOUNDARY, FAIL, MUTED, PASS, _to_svg
from tokenwatt.result import RESULT_FILE, load_result
from tokenwatt.sweep_result import SWEEP_FILE, OperatingPoint, load_sweep, operating_point

__all__ = [
    "SWEEP_REPORT_FILE",
    "PlotPoint",
    "collect_points",
    "render_sweep_html",
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
            ax.annotate(p.label + (" (sim)" if sim else ""), (x, y), xytext=(5, 5),
                        textcoords="offset points", fontsize=8, color=color)  # fmt: skip
        ax.set_xlabel("tokens/s per user at the boundary (1 ÷ median TPOT)")
        ax.set_ylabel("goodput output tokens/s per GPU")
        ax.set_title("Throughput per GPU against interactivity, at the SLO")
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
        return _to_svg(fig, "Pareto frontier of the sweep")


def _rows(points: Sequence[PlotPoint]) -> list[list[str]]:
    shown = [p for p in points if p.xy is not None]
    on = dict(zip((id(p) for p in shown), pareto_mask([p.xy for p in shown if p.xy]), strict=True))
    rows = []
    for p in points:
        op = p.op
        status = p.status if p.xy is not None or p.status != "ok" else "no boundary"
        cls = "pass" if p.xy is not None else "fail"
        valid = "—" if op is None or op.energy_valid is None else (
            "valid" if op.energy_valid else "invalid")  # fmt: skip
        rows.append([
            html.escape(p.label) + (" (sim)" if op is not None and op.simulated else ""),
            f'<span class="{cls}">{html.escape(status)}</span>'
            + (f"<br><small>{html.escape(p.cause)}</small>" if p.cause else ""),
            "yes" if on.get(id(p)) else "",
            _num(None if op is None else op.goodput_output_tokens_per_s_per_gpu, ",.1f"),
            _num(None if op is None else op.tokens_per_s_per_user, ",.1f"),
            _num(None if op is None else op.tokens_per_joule, ",.3g"),
            _num(None if op is None else op.joules_per_output_token, ",.3g"),
            _num(None if op is None else op.joules_per_total_token, ",.3g"),
            valid,
            _num(None if op is None else op.usd_per_mtok, ",.3g"),
            html.escape(p.folder),
        ])  # fmt: skip
    return rows


def render_sweep_html(title: str, points: Sequence[PlotPoint]) -> str:
    svg = pareto_svg(points)
    fig = (
        _figure(svg, "Each passing point is a run's SLO boundary; hollow points are simulated.")
        if svg is not None
        else f'<p class="none" style="color:{FAIL}">No point met the SLO: no frontier.</p>'
    )
    headers = ["point", "status", "frontier", "goodput tok/s/GPU", "tok/s/user", "tokens/J",
               "J/output tok", "J/total tok", "energy", "$/Mtok", "folder"]  # fmt: skip
    table = _table(headers, _rows(points), left=(0, 1, 10))
    data = [
        {"label": p.label, "status": p.status, "cause": p.cause, "folder": p.folder,
         "point": None if p.op is None else p.op.model_dump(mode="json")}
        for p in points
    ]  # fmt: skip
    payload = json.dumps(data).replace("</", "<\\/")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>TokenWatt sweep · {_e(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<header><h1>{_e(title)}</h1><p class='sub'>{len(points)} points</p></header>"
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
