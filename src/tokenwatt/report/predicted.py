"""Terminal view of a prediction (``tokenwatt predict``): every predicted figure says PREDICTED.

Reads the one object ``--json`` prints, so the terminal and the JSON cannot disagree. The
measured column is the source's own figure and is headed "measured"; every other figure sits
under a title or header that starts with PREDICTED and carries its 95 % interval.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["PREDICTED", "predicted_tables", "prediction_notes", "print_prediction", "with_interval"]

PREDICTED = "PREDICTED"


def with_interval(value: float | None, pair: list[float | None] | None, fmt: str = ".3g") -> str:
    """``value (low–high)``; an unbounded end (None in the JSON) shows as ∞, no value as —."""
    if value is None:
        return "—"
    if pair is None:
        return f"{value:{fmt}}"
    lo, hi = ("∞" if x is None else f"{x:{fmt}}" for x in pair)
    return f"{value:{fmt}} ({lo}–{hi})"


def _step_table(data: dict[str, Any]) -> Table:
    table = Table(title=f"{PREDICTED} on {data['target']['display_name']} (95 % intervals)")
    cols = ("point", "B", "measured TPOT ms", "PREDICTED TPOT ms", "PREDICTED output tok/s",
            "PREDICTED tok/J")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right" if col != "point" else "left")
    for p in data["points"]:
        pr, iv = p["predicted"], p["predicted"]["interval"]
        table.add_row(
            p["label"],
            f"{pr['batch']:.1f}",
            f"{p['measured']['tpot_ms']:.2f}",
            with_interval(pr["tpot_ms"], iv["tpot_ms"], ".2f"),
            f"{pr['output_tokens_per_s']:.4g}",
            with_interval(pr["tokens_per_joule"], iv["tokens_per_joule"]),
        )
    return table


def _served_table(data: dict[str, Any]) -> Table | None:
    rows = [p for p in data["points"] if p["predicted"].get("replay_rate_rps") is not None]
    if not rows:
        return None
    slo = data["slo"]
    limits = ", ".join(f"{k} {slo[k]:g}" for k in ("ttft_ms", "tpot_ms") if k in slo)
    table = Table(
        title=f"{PREDICTED} serving on {data['target']['display_name']}, replayed in virtual "
        f"time (SLO {slo.get('kind', '')} {limits}; 95 % intervals)"
    )
    cols = ("point", "rate req/s", "PREDICTED TTFT ms", "PREDICTED SLO", "PREDICTED goodput tok/s",
            "PREDICTED boundary req/s", "PREDICTED $/Mtok")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right" if col != "point" else "left")
    for p in rows:
        pr, iv = p["predicted"], p["predicted"]["interval"]
        table.add_row(
            p["label"],
            f"{pr['replay_rate_rps']:.3g}",
            with_interval(pr["ttft_ms"], iv["ttft_ms"]),
            "pass" if pr["slo_passed"] else "fail",
            with_interval(pr["goodput_tok_s"], iv["goodput_tok_s"], ".4g"),
            with_interval(pr["boundary_rps"], iv["boundary_rps"]),
            with_interval(pr["usd_per_mtok"], iv["usd_per_mtok"]),
        )
    return table


def predicted_tables(data: dict[str, Any]) -> list[Table]:
    """The step table and, where a workload was replayed, the serving table."""
    served = _served_table(data)
    return [_step_table(data)] + ([] if served is None else [served])


def prediction_notes(data: dict[str, Any]) -> list[str]:
    """The calibration's notes, then what the target changes that the model holds fixed
    (``assumptions``): said beside the figures in every view."""
    return [*data["calibration"].get("notes", []), *data.get("assumptions", [])]


def print_prediction(data: dict[str, Any], console: Console | None = None) -> None:
    """The calibration, its notes and the PREDICTED tables."""
    console = console or Console()
    cal = data["calibration"]
    console.print(f"source: {data['source']}", highlight=False)
    console.print(
        f"calibration: efficiency {cal['efficiency']:.3f}, floor {cal['floor_ms']:.2f} ms, "
        f"residual RMS {cal['rms_residual']:.1%} over {len(cal['residuals'])} points; "
        f"transfer error {data['transfer_error']:.0%}; held-out extrapolation error "
        f"{cal.get('extrapolation_per_log_x', 0.0):.1%} per unit of ln x moved",
        highlight=False,
    )
    for note in prediction_notes(data):
        console.print(f"note: {note}", highlight=False)
    for table in predicted_tables(data):
        console.print(table)
    bare = [p["label"] for p in data["points"] if p["predicted"].get("replay_rate_rps") is None]
    if bare:
        console.print(
            f"not replayed ({', '.join(bare)}): the source records no prompt and output lengths "
            "or rate, so no TTFT, SLO boundary, goodput or $/Mtok is predicted for it",
            highlight=False,
        )
    if data.get("price_per_gpu_hour") is None:
        console.print("no GPU price: give --price-per-gpu-hour for $/Mtok", highlight=False)
