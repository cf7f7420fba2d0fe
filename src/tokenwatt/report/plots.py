"""The HTML report's figures: matplotlib (no pyplot, no display) rendered to inline SVG.

Each function takes the result file's models and returns an ``<svg>`` string with text as
text and nothing fetched from anywhere, so the report stays one file that opens offline.
Figures use ``matplotlib.figure.Figure`` directly: no global backend state, safe in threads.
"""

from __future__ import annotations

import functools
import io
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.report.format import fmt_quantile
from tokenwatt.report.labels import SIMULATED, power_mark, sim_settings
from tokenwatt.result import BenchResult, ProbeSummary

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "batch_axis_range",
    "experts_plot",
    "goodput_plot",
    "goodput_probes",
    "latency_plot",
    "mbu_plot",
    "power_plot",
]

PASS = "#2a9d5c"
FAIL = "#d1495b"
BOUNDARY = "#1d3557"
ACCENT = "#e09f3e"
MUTED = "#6c757d"
SIM = "#8e44ad"  # the simulated mark, the same colour as the HTML's badge

_RC: dict[Any, Any] = {
    "svg.fonttype": "none",  # text stays text: small, crisp, selectable
    "svg.hashsalt": "tokenwatt",  # deterministic element ids: same result, same file
    "font.size": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "legend.frameon": False,
    "legend.fontsize": 8.5,
}


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _styled(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a plot function under the report's style without touching global rcParams."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with matplotlib.rc_context(_RC):
            return fn(*args, **kwargs)

    return wrapper


def _figure(ncols: int = 1, width_in: float = 9.4, height_in: float = 3.6) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    fig.subplots(1, ncols)
    return fig


_SVG_START = re.compile(r"<svg\b", re.S)
_SVG_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
# Inline SVG in HTML needs no namespace declarations (the HTML parser assigns them), and
# dropping them leaves the report with no URL of ours at all.
_SVG_XMLNS = re.compile(r'\s+xmlns(:xlink)?="[^"]*"')


def _stamp(fig: Figure, result: BenchResult) -> None:
    """SIMULATED across a simulated run's figure, in the figure itself: a chart copied out
    of the report must not read like a measurement on the hardware it names."""
    if result.simulated:
        fig.text(
            0.5,
            0.5,
            f"{SIMULATED} · tokenwatt sim",
            ha="center",
            va="center",
            fontsize=26,
            fontweight="bold",
            color=SIM,
            alpha=0.16,
            rotation=12,
            zorder=10,
        )


def _to_svg(fig: Figure, label: str, result: BenchResult | None = None) -> str:
    """The figure as an inline ``<svg>`` element: no XML prolog, no DOCTYPE, no metadata;
    a simulated run's figure stamped SIMULATED (``_stamp``) and its label saying so."""
    if result is not None:
        _stamp(fig, result)
        label = f"{SIMULATED}: {label}" if result.simulated else label
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    m = _SVG_START.search(text)
    svg = text[m.start() :] if m else text
    svg = _SVG_XMLNS.sub("", _SVG_METADATA.sub("", svg))
    return svg.replace("<svg ", f'<svg role="img" aria-label="{label}" ', 1)


def _color(p: ProbeSummary) -> str:
    """Green passed, red failed, grey interrupted (neither: the window never completed)."""
    if p.interrupted:
        return MUTED
    return PASS if p.slo_passed else FAIL


def _mark_points(ax: Axes, xs: list[float], ys: list[float], probes: list[ProbeSummary]) -> None:
    ax.scatter(xs, ys, c=[_color(p) for p in probes], s=28, zorder=3, edgecolors="white")


def _mark_boundary(ax: Axes, x: float | None, y: float | None) -> None:
    if x is None or y is None:
        return
    ax.scatter([x], [y], marker="*", s=190, c=BOUNDARY, zorder=4, label="boundary")


@_styled
def latency_plot(result: BenchResult) -> str:
    """TTFT and TPOT at the SLO's quantile against output tokens/s, one point per probe."""
    q = result.slo.percentile
    label = fmt_quantile(q)
    fig = _figure(ncols=2)
    axes = fig.axes
    specs: tuple[tuple[Axes, Literal["ttft", "tpot"], float | None, str], ...] = (
        (axes[0], "ttft", result.slo.ttft_ms, f"TTFT {label}"),
        (axes[1], "tpot", result.slo.tpot_ms, f"TPOT {label}"),
    )
    b = result.boundary
    for ax, metric, limit_ms, title in specs:
        pts = [
            (p.output_tokens_per_s, v * 1e3, p)
            for p in result.probes
            if (v := p.latency_at(metric, q)) is not None
        ]
        pts.sort(key=lambda t: t[0])
        if pts:
            xs, ys, ps = [t[0] for t in pts], [t[1] for t in pts], [t[2] for t in pts]
            ax.plot(xs, ys, color=MUTED, lw=1, alpha=0.6, zorder=2)
            _mark_points(ax, xs, ys, ps)
        if b is not None:
            bv = b.latency_at(metric, q)
            _mark_boundary(ax, b.output_tokens_per_s, bv * 1e3 if bv is not None else None)
        if limit_ms is not None:
            ax.axhline(limit_ms, color=FAIL, ls="--", lw=1.2, label=f"SLO {limit_ms:g} ms")
        if pts and max(t[1] for t in pts) > 20 * min(t[1] for t in pts):
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("output tokens/s (node)")
        ax.set_ylabel("ms")
        ax.legend(loc="upper left")
    return _to_svg(fig, "latency against throughput", result)


def goodput_probes(result: BenchResult) -> list[ProbeSummary]:
    """The goodput chart's points: the open-loop probes, in order of achieved rate (its x)."""
    return sorted(
        (p for p in result.probes if p.rate_rps is not None), key=lambda p: p.achieved_rate_rps
    )


@_styled
def goodput_plot(result: BenchResult) -> str:
    """Goodput (and raw throughput) and attainment against the achieved rate of each
    open-loop probe: against the offered rate, a probe that achieved more than a higher
    offered one (Poisson noise, an early stop) drew as a dip in goodput."""
    fig = _figure(ncols=1)
    ax = fig.axes[0]
    probes = goodput_probes(result)
    rates = [p.achieved_rate_rps for p in probes]
    ax.plot(rates, [p.output_tokens_per_s for p in probes], color=MUTED, lw=1, ls=":", label="T")
    ax.plot(rates, [p.goodput_output_tokens_per_s for p in probes], color=PASS, lw=1.2)
    _mark_points(ax, rates, [p.goodput_output_tokens_per_s for p in probes], probes)
    ax.plot([], [], color=PASS, marker="o", lw=1.2, label="SLO goodput")
    b = result.boundary
    if b is not None and b.rate_rps is not None:
        ax.axvline(b.achieved_rate_rps, color=BOUNDARY, lw=1, ls="--")
        _mark_boundary(ax, b.achieved_rate_rps, b.goodput_output_tokens_per_s)
    ax.set_xlabel("achieved rate (req/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.grid(False)
    att = [(p.achieved_rate_rps, p.attainment * 100) for p in probes if p.attainment is not None]
    ax2.plot([a for a, _ in att], [v for _, v in att], color=ACCENT, marker="s", ms=4, lw=1)
    if result.slo.kind == "attainment":
        ax2.axhline(result.slo.attainment * 100, color=ACCENT, ls="--", lw=1)
    ax2.set_ylabel("attainment (%)", color=ACCENT)
    ax2.set_ylim(0, 105)
    ax2.spines["right"].set_visible(True)
    ax.plot([], [], color=ACCENT, marker="s", ms=4, lw=1, label="attainment")
    ax.legend(loc="lower right")
    return _to_svg(fig, "goodput and attainment against achieved rate", result)


def batch_axis_range(result: BenchResult) -> tuple[float, float]:
    """B from below the smallest probe (or 1) to twice the largest (at least 256)."""
    probes = [*result.probes, *([result.single_stream] if result.single_stream else [])]
    bs = [p.batch_per_replica for p in probes if p.batch_per_replica]
    return min(1.0, 0.7 * min(bs, default=1.0)), max(256.0, 2.0 * max(bs, default=1.0))


def _batch_axis(ax: Axes, result: BenchResult) -> None:
    """Log B axis over the report's common range, ticks at 1-2-5 and written plainly."""
    ax.set_xscale("log")
    ax.set_xlim(*batch_axis_range(result))
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _batch_grid(result: BenchResult, n: int = 160) -> list[float]:
    lo, hi = (math.log10(x) for x in batch_axis_range(result))
    return [10 ** (lo + i * (hi - lo) / (n - 1)) for i in range(n)]


@_styled
def mbu_plot(result: BenchResult, geometry: ModelGeometry) -> str:
    """Left: MBU (weights + KV) against B per probe. Right: W(B), bytes per step, vs B."""
    fig = _figure(ncols=2)
    ax, axw = fig.axes
    pts = [
        (p.batch_per_replica, p.mbu, p)
        for p in result.probes
        if p.batch_per_replica is not None and p.mbu is not None
    ]
    pts.sort(key=lambda t: t[0])
    xs = [t[0] for t in pts]
    for p_x, p in zip(xs, [t[2] for t in pts], strict=True):
        d = p.mbu_detail
        if d is not None and d.mbu_weights is not None and d.mbu_kv is not None:
            ax.vlines(p_x, 0, d.mbu_weights * 100, color=BOUNDARY, lw=3, alpha=0.25)
    _mark_points(ax, xs, [t[1] * 100 for t in pts], [t[2] for t in pts])
    ax.vlines([], [], [], color=BOUNDARY, lw=3, alpha=0.25, label="weights part")
    ss = result.single_stream
    if ss is not None and ss.batch_per_replica and ss.mbu is not None:
        ax.scatter(
            [ss.batch_per_replica],
            [ss.mbu * 100],
            marker="D",
            s=30,
            c=MUTED,
            zorder=3,
            label="single stream",
        )
    b = result.boundary
    if b is not None and b.batch_per_replica is not None and b.mbu is not None:
        _mark_boundary(ax, b.batch_per_replica, b.mbu * 100)
    if (sim := sim_settings(result)) is not None:  # known only where the run started it
        ax.axhline(sim.efficiency * 100, color=MUTED, ls=":", lw=1, label="sim efficiency")
    _batch_axis(ax, result)
    ax.set_xlabel("B, sequences per step per replica")
    ax.set_ylabel("MBU (%)")
    ax.set_ylim(0, max(100.0, *(t[1] * 110 for t in pts)) if pts else 100)
    ax.set_title("MBU against batch size")
    ax.legend(loc="upper left")

    grid = _batch_grid(result)
    axw.plot(grid, [geometry.weight_bytes_per_step(x) / 1e9 for x in grid], color=BOUNDARY)
    axw.axhline(geometry.dense_weight_bytes / 1e9, color=MUTED, ls=":", lw=1, label="dense part")
    if geometry.is_moe:
        full = geometry.dense_weight_bytes + geometry.moe_layers * geometry.experts * (
            geometry.expert_bytes
        )
        axw.axhline(full / 1e9, color=ACCENT, ls="--", lw=1, label="every expert read")
    probe_b = [p.batch_per_replica for p in result.probes if p.batch_per_replica]
    axw.scatter(
        probe_b,
        [geometry.weight_bytes_per_step(x) / 1e9 for x in probe_b],
        c=[_color(p) for p in result.probes if p.batch_per_replica],
        s=24,
        zorder=3,
        edgecolors="white",
    )
    _batch_axis(axw, result)
    axw.set_ylim(bottom=0)
    axw.set_xlabel("B")
    axw.set_ylabel("GB per decode step")
    axw.set_title("W(B): weight bytes per step")
    axw.legend(loc="lower right")
    return _to_svg(fig, "MBU against batch size, and W(B)", result)


@_styled
def experts_plot(result: BenchResult, geometry: ModelGeometry) -> str:
    """E·(1 − (1 − k/E)^B): distinct experts per MoE layer under uniform routing."""
    fig = _figure(ncols=1, height_in=3.3)
    ax = fig.axes[0]
    grid = _batch_grid(result)
    ax.plot(grid, [geometry.expected_unique_experts(x) for x in grid], color=BOUNDARY)
    e, k = geometry.experts, geometry.experts_per_token
    ax.axhline(e, color=MUTED, ls=":", lw=1, label=f"E = {e}")
    ax.axhline(k, color=ACCENT, ls=":", lw=1, label=f"k = {k} (one token)")
    probes = [p for p in result.probes if p.batch_per_replica]
    xs = [p.batch_per_replica or 0.0 for p in probes]
    _mark_points(ax, xs, [geometry.expected_unique_experts(x) for x in xs], probes)
    _batch_axis(ax, result)
    ax.set_ylim(0, e * 1.08)
    ax.set_xlabel("B, tokens per step per replica")
    ax.set_ylabel("distinct experts per layer")
    ax.set_title(f"Expected distinct experts, E·(1−(1−k/E)^B), {geometry.moe_layers} MoE layers")
    ax.legend(loc="center right")
    return _to_svg(fig, "expected distinct experts against batch", result)


@_styled
def power_plot(result: BenchResult) -> str | None:
    """Power over each probe's window, probes laid end to end; None when nothing measured."""
    series = [
        (p, p.power_series)
        for p in [*([result.single_stream] if result.single_stream else []), *result.probes]
        if p.power_series
    ]
    if not series:
        return None
    fig = _figure(ncols=1, height_in=3.0)
    ax = fig.axes[0]
    offset = 0.0
    gap = 0.0
    top = max(w for _, s in series for _, w in s)
    for p, s in series:
        width = max([p.window_s, *(t for t, _ in s)])
        gap = gap or 0.02 * sum(max(q.window_s, 1.0) for q, _ in series)
        ax.plot([offset + t for t, _ in s], [w for _, w in s], color=_color(p), lw=1.2)
        label = "ss" if p.index == 0 else str(p.index)
        ax.text(offset + width / 2, top * 1.04, label, ha="center", fontsize=8, color=MUTED)
        offset += width + gap
    scope = next((p.energy.scope for p, _ in series if p.energy is not None), "")
    mark = next((m for p, _ in series if (m := power_mark(p.energy))), "")
    ax.set_ylim(0, top * 1.12)
    ax.set_xlabel("time in measurement windows, s (probes end to end)")
    ax.set_ylabel(f"W{f' ({scope})' if scope else ''}{f', {mark}' if mark else ''}")
    return _to_svg(fig, "power over time", result)
