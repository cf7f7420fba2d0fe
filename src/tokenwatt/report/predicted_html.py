"""HTML view of a prediction: the PREDICTED curve beside the measured one, on its own page.

One self-contained page (inline SVG, nothing fetched) from the object ``tokenwatt predict
--json`` prints. The figure draws the source's measured TPOT against B and the target's
PREDICTED TPOT with its 95 % interval as a band; the PREDICTED curve is dashed, its legend
entry, the page title, every table header and a watermark across the figure say PREDICTED,
so neither the figure nor a table copied out of the page can pass for a measurement. The page
is never a result folder: ``compare`` and ``report`` read result files, and this is not one.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tokenwatt.errors import ReportError
from tokenwatt.report.plots import _figure, _styled, _to_svg
from tokenwatt.report.predicted import PREDICTED, prediction_notes, with_interval

__all__ = ["predicted_html", "predicted_plot", "write_predicted_html"]


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


@_styled
def predicted_plot(data: dict[str, Any]) -> str:
    """TPOT against B: measured on the source (solid), PREDICTED on the target (dashed, band)."""
    fig: Figure = _figure()
    ax = fig.axes[0]
    pts = sorted(data["points"], key=lambda p: p["measured"]["batch"])
    ax.plot(
        [p["measured"]["batch"] for p in pts], [p["measured"]["tpot_ms"] for p in pts],
        "o-", color="#333333", label=f"measured: {data['source']}",
    )  # fmt: skip
    xs = [p["predicted"]["batch"] for p in pts]
    ys = [p["predicted"]["tpot_ms"] for p in pts]
    lo = [p["predicted"]["interval"]["tpot_ms"][0] for p in pts]
    hi = [p["predicted"]["interval"]["tpot_ms"][1] for p in pts]
    target = data["target"]["display_name"]
    ax.fill_between(xs, lo, hi, color="#d9822b", alpha=0.2, label=f"{PREDICTED} 95 % interval")
    ax.plot(xs, ys, "s--", color="#d9822b", label=f"{PREDICTED} on {target}")
    ax.set_xlabel("B, sequences per decode step per replica")
    ax.set_ylabel("TPOT, ms")
    ax.legend(loc="best")
    fig.text(0.5, 0.5, PREDICTED, ha="center", va="center", fontsize=40, fontweight="bold",
             color="#d9822b", alpha=0.12, rotation=12, zorder=10)  # fmt: skip
    return _to_svg(fig, f"measured and {PREDICTED} TPOT against batch")


def _rows(data: dict[str, Any]) -> str:
    heads = ["point", "measured TPOT ms", f"{PREDICTED} TPOT ms", f"{PREDICTED} tok/J",
             f"{PREDICTED} TTFT ms", f"{PREDICTED} goodput tok/s",
             f"{PREDICTED} boundary req/s", f"{PREDICTED} $/Mtok"]  # fmt: skip
    body = []
    for p in data["points"]:
        pr, iv = p["predicted"], p["predicted"]["interval"]
        cells = [
            _e(p["label"]),
            f"{p['measured']['tpot_ms']:.2f}",
            with_interval(pr["tpot_ms"], iv["tpot_ms"], ".2f"),
            with_interval(pr["tokens_per_joule"], iv["tokens_per_joule"]),
            with_interval(pr.get("ttft_ms"), iv.get("ttft_ms")),
            with_interval(pr.get("goodput_tok_s"), iv.get("goodput_tok_s"), ".4g"),
            with_interval(pr.get("boundary_rps"), iv.get("boundary_rps")),
            with_interval(pr.get("usd_per_mtok"), iv.get("usd_per_mtok")),
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _notes(data: dict[str, Any]) -> str:
    """The notes the terminal prints (``prediction_notes``), as a list on the page."""
    notes = prediction_notes(data)
    if not notes:
        return ""
    return "<ul class='notes'>" + "".join(f"<li>note: {_e(n)}</li>" for n in notes) + "</ul>"


def predicted_html(data: dict[str, Any]) -> str:
    """The whole page."""
    if data.get("kind") != PREDICTED:
        raise ReportError("not a prediction: the page draws only `tokenwatt predict` output")
    target = _e(data["target"]["display_name"])
    cal = data["calibration"]
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{PREDICTED} on {target}</title></head><body>"
        f"<h1>{PREDICTED} on {target}: not a measurement</h1>"
        f"<p>source (measured): {_e(data['source'])}. Calibration: efficiency "
        f"{cal['efficiency']:.3f}, floor {cal['floor_ms']:.2f} ms, residual RMS "
        f"{cal['rms_residual']:.1%}; transfer error {data['transfer_error']:.0%}.</p>"
        f"{_notes(data)}"
        f"<figure>{predicted_plot(data)}<figcaption>measured TPOT (solid) and {PREDICTED} "
        f"TPOT on {target} (dashed, 95 % band)</figcaption></figure>"
        f"{_rows(data)}</body></html>"
    )


def write_predicted_html(path: Path, data: dict[str, Any]) -> None:
    """Write the page; a path that is a result folder's own report is refused."""
    if path.name in {"report.html", "result.json"}:
        raise ReportError(
            f"--html {path}: a prediction is never written as a result's report; "
            "name another file, e.g. predicted.html"
        )
    path.write_text(predicted_html(data), encoding="utf-8")
