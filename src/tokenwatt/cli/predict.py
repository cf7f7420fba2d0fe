"""CLI: ``tokenwatt predict SOURCE --to b200 [--to-gpus N] [--max-batch N] [--json]``.

SOURCE is a result folder (or its result.json: measured or imported) or a CSV of published
rows (``predict.rows``). The stack is calibrated on the source's decode points and each point
replayed on the target; every printed figure is marked PREDICTED and carries its 95 %
interval, and the calibration's residuals are printed beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from tokenwatt.geometry.model import ModelGeometry
    from tokenwatt.hardware import Accelerator
    from tokenwatt.predict import Calibration, Prediction, StepPoint

__all__ = ["predict", "prediction_dict"]

PREDICTED = "PREDICTED"


def _source(
    path: Path,
) -> tuple[list[StepPoint], Accelerator | None, ModelGeometry | None, str]:
    """The source's points, accelerator, geometry and a one-line description."""
    from tokenwatt.geometry import load_geometry
    from tokenwatt.hardware import get_accelerator
    from tokenwatt.predict import PredictError, points_from_result, points_from_rows
    from tokenwatt.predict.rows import read_rows_csv
    from tokenwatt.result import load_result

    if not path.exists():
        raise PredictError(f"SOURCE {path}: no such file or folder; give a result folder or CSV")
    if path.is_file() and path.suffix.lower() == ".csv":
        rows = read_rows_csv(path)
        geometry = load_geometry(rows[0].model)
        points = points_from_rows(rows, lambda _: geometry)
        acc = get_accelerator(rows[0].hardware)
        return points, acc, geometry, f"{len(rows)} published rows, {rows[0].model} on {acc.name}"
    result = load_result(path)
    points = points_from_result(result)
    measured_on = result.accelerator
    where = measured_on.name if measured_on else "?"
    about = f"{result.name}: {len(points)} measured points on {where}"
    return points, measured_on, result.geometry, about


def _pair(lo: float, hi: float, scale: float = 1.0) -> list[float]:
    return [lo * scale, hi * scale]


def _point_dict(point: StepPoint, pred: Prediction) -> dict[str, Any]:
    tpj_iv = pred.tokens_per_joule_interval
    return {
        "label": point.label,
        "measured": {
            "batch": point.batch,
            "tpot_ms": point.step_s * 1e3,
            "output_tokens_per_s": point.output_tokens_per_s,
        },
        "predicted": {
            "batch": pred.batch,
            "tpot_ms": pred.tpot_s * 1e3,
            "output_tokens_per_s": pred.output_tokens_per_s,
            "tokens_per_joule": pred.tokens_per_joule,
            "power_w_per_gpu": pred.power_w_per_gpu,
            "interval": {
                "level": 0.95,
                "relative_sigma": pred.relative_sigma,
                "tpot_ms": _pair(pred.tpot_interval_s.low, pred.tpot_interval_s.high, 1e3),
                "output_tokens_per_s": _pair(
                    pred.output_tokens_per_s_interval.low, pred.output_tokens_per_s_interval.high
                ),
                "tokens_per_joule": None if tpj_iv is None else _pair(tpj_iv.low, tpj_iv.high),
            },
        },
    }


def prediction_dict(
    about: str,
    target: Accelerator,
    cal: Calibration,
    points: list[StepPoint],
    preds: list[Prediction],
    *,
    transfer: float,
) -> dict[str, Any]:
    """What ``--json`` prints: one object, every predicted figure under ``predicted``."""
    power = cal.power
    return {
        "kind": PREDICTED,
        "source": about,
        "target": {"accelerator": target.name, "display_name": target.display_name},
        "calibration": {
            "model": "tau = floor + bytes / (gpus * rated_bandwidth * efficiency)",
            "efficiency": cal.efficiency,
            "floor_ms": cal.floor_s * 1e3,
            "residuals": list(cal.residuals),
            "rms_residual": cal.rms_residual,
            "power": None
            if power is None
            else {
                "idle_share_of_tdp": power.idle_share,
                "slope_per_read_share": power.slope,
                "residuals": list(power.residuals),
            },
            "notes": list(cal.notes),
        },
        "transfer_error": transfer,
        "points": [_point_dict(pt, pr) for pt, pr in zip(points, preds, strict=True)],
    }


def _print(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    cal = data["calibration"]
    console = Console()
    console.print(f"source: {data['source']}", highlight=False)
    console.print(
        f"calibration: efficiency {cal['efficiency']:.3f}, floor {cal['floor_ms']:.2f} ms, "
        f"residual RMS {cal['rms_residual']:.1%} over {len(cal['residuals'])} points; "
        f"transfer error {data['transfer_error']:.0%}",
        highlight=False,
    )
    for note in cal["notes"]:
        console.print(f"note: {note}", highlight=False)
    table = Table(title=f"{PREDICTED} on {data['target']['display_name']} (95 % intervals)")
    for col in ("point", "B", "measured TPOT ms", "TPOT ms", "output tok/s", "tok/J"):
        table.add_column(col, justify="right" if col != "point" else "left")
    for p in data["points"]:
        pr, iv = p["predicted"], p["predicted"]["interval"]
        tpj = "—"
        if pr["tokens_per_joule"] is not None:
            lo, hi = iv["tokens_per_joule"]
            tpj = f"{pr['tokens_per_joule']:.3g} ({lo:.3g}–{hi:.3g})"
        table.add_row(
            p["label"],
            f"{pr['batch']:.1f}",
            f"{p['measured']['tpot_ms']:.2f}",
            f"{pr['tpot_ms']:.2f} ({iv['tpot_ms'][0]:.2f}–{iv['tpot_ms'][1]:.2f})",
            f"{pr['output_tokens_per_s']:.4g}",
            tpj,
        )
    console.print(table)


def predict(  # noqa: PLR0917 - one parameter per flag
    source: Annotated[
        Path, typer.Argument(metavar="SOURCE", help="a result folder or a CSV of published rows")
    ],
    to: Annotated[str, typer.Option("--to", help="target accelerator, e.g. b200")],
    to_gpus: Annotated[
        int | None, typer.Option("--to-gpus", min=1, help="GPUs per replica on the target")
    ] = None,
    to_replicas: Annotated[
        int | None, typer.Option("--to-replicas", min=1, help="replicas on the target")
    ] = None,
    max_batch: Annotated[
        int | None, typer.Option("--max-batch", min=1, help="the target's batch cap")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """Predict TPOT, throughput and tokens/J on other hardware from a measured run.

    e.g. tokenwatt predict results/my-run --to b200 --json
    """
    from tokenwatt.hardware import get_accelerator
    from tokenwatt.predict import Target, calibrate, predict_points, transfer_error

    target = get_accelerator(to)
    points, src_acc, geometry, about = _source(source)
    cal = calibrate(points)
    tgt = Target(target, to_gpus, to_replicas, max_batch)
    preds = predict_points(cal, points, tgt, source=src_acc, geometry=geometry)
    transfer = transfer_error(src_acc, target)
    data = prediction_dict(about, target, cal, points, preds, transfer=transfer)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print(data)


def register(app: typer.Typer) -> None:
    """Add this module's command to the app."""
    app.command("predict")(predict)
