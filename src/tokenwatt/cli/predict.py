"""CLI: ``tokenwatt predict SOURCE --to b200 [--to-gpus N] [--max-batch N] [--json]``.

SOURCE is a result folder (or its result.json: measured or imported) or a CSV of published
rows (``predict.rows``). The stack is calibrated on the source's decode points; each point's
step is priced on the target (``predict.transfer``) and its measured workload replayed on the
calibrated simulator of the target (``predict.served``: TTFT, the SLO boundary, goodput,
$/Mtok). Every printed figure is marked PREDICTED and carries its 95 % interval, and the
calibration's residuals are printed beside it (``report.predicted``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from tokenwatt.geometry.model import ModelGeometry
    from tokenwatt.hardware import Accelerator
    from tokenwatt.predict import Calibration, Prediction, StepPoint, Target
    from tokenwatt.predict.served import ServedPrediction, Span
    from tokenwatt.spec import SLO

__all__ = ["predict", "prediction_dict"]

PREDICTED = "PREDICTED"


@dataclass(frozen=True)
class _Source:
    points: list[StepPoint]
    accelerator: Accelerator | None
    geometry: ModelGeometry | None
    about: str
    slo: SLO
    price_per_gpu_hour: float | None


def _source(path: Path) -> _Source:
    """The source's points, accelerator, geometry, description, SLO and GPU price."""
    from tokenwatt.geometry import load_geometry
    from tokenwatt.hardware import get_accelerator
    from tokenwatt.predict import PredictError, points_from_result, points_from_rows
    from tokenwatt.predict.rows import read_rows_csv
    from tokenwatt.result import load_result
    from tokenwatt.spec import SLO

    if not path.exists():
        raise PredictError(f"SOURCE {path}: no such file or folder; give a result folder or CSV")
    if path.is_file() and path.suffix.lower() == ".csv":
        rows = read_rows_csv(path)
        geometry = load_geometry(rows[0].model)
        points = points_from_rows(rows, lambda _: geometry)
        acc = get_accelerator(rows[0].hardware)
        about = f"{len(rows)} published rows, {rows[0].model} on {acc.name}"
        return _Source(points, acc, geometry, about, SLO(), None)
    result = load_result(path)
    points = points_from_result(result)
    measured_on = result.accelerator
    where = measured_on.name if measured_on else "?"
    about = f"{result.name}: {len(points)} measured points on {where}"
    price = result.spec.hardware.price_per_gpu_hour
    return _Source(points, measured_on, result.geometry, about, result.spec.slo, price)


def _pair(lo: float, hi: float, scale: float = 1.0) -> list[float]:
    return [lo * scale, hi * scale]


def _span_pair(span: Span | None) -> list[float | None] | None:
    """[low, high]; an unbounded end (+inf: e.g. $/Mtok where no token is good) is None."""
    if span is None:
        return None
    return [x if math.isfinite(x) else None for x in (span.low, span.high)]


def _served_dict(served: ServedPrediction | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The replayed figures and their intervals (every value None where nothing was replayed)."""
    names = ("ttft_ms", "ttft_p99_ms", "boundary_rps", "goodput_tok_s", "usd_per_mtok")
    if served is None:
        return {"replay_rate_rps": None, "slo_passed": None, **dict.fromkeys(names)}, dict.fromkeys(
            names
        )
    spans = {n: getattr(served, n) for n in names}
    values = {n: None if sp is None else sp.value for n, sp in spans.items()}
    values["replay_tpot_ms"] = served.tpot_ms.value
    return (
        {"replay_rate_rps": served.rate_rps, "slo_passed": served.slo_passed, **values},
        {n: _span_pair(sp) for n, sp in spans.items()},
    )


def _point_dict(
    point: StepPoint, pred: Prediction, served: ServedPrediction | None
) -> dict[str, Any]:
    tpj_iv = pred.tokens_per_joule_interval
    values, intervals = _served_dict(served)
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
            **values,
            "interval": {
                "level": 0.95,
                "relative_sigma": pred.relative_sigma,
                "transfer_error": pred.transfer_sigma,
                "power_transfer_error": pred.power_transfer_sigma,
                "tpot_ms": _pair(pred.tpot_interval_s.low, pred.tpot_interval_s.high, 1e3),
                "output_tokens_per_s": _pair(
                    pred.output_tokens_per_s_interval.low, pred.output_tokens_per_s_interval.high
                ),
                "tokens_per_joule": None if tpj_iv is None else _pair(tpj_iv.low, tpj_iv.high),
                **intervals,
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
    served: list[ServedPrediction | None],
    transfer: float,
    slo: SLO,
    price_per_gpu_hour: float | None,
    gpus_per_replica: int | None = None,
    source: Accelerator | None = None,
) -> dict[str, Any]:
    """What ``--json`` prints: one object, every predicted figure under ``predicted``."""
    from tokenwatt.predict.transfer import assumptions

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
            "loo_residuals": list(cal.loo_residuals),
            "out_of_sample_rms": cal.out_of_sample_rms,
            "extrapolation_per_log_x": cal.extrapolation_per_log_x,
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
        "assumptions": assumptions(points, gpus_per_replica, source, target),
        "slo": slo.model_dump(exclude_none=True),
        "price_per_gpu_hour": price_per_gpu_hour,
        "points": [
            _point_dict(pt, pr, sv) for pt, pr, sv in zip(points, preds, served, strict=True)
        ],
    }


def _served(
    src: _Source, cal: Calibration, tgt: Target, slo: SLO, *, sigmas: list[float],
    price: float | None, requests: int, power_sigmas: list[float],
) -> list[ServedPrediction | None]:  # fmt: skip
    """Each point's workload replayed on the calibrated simulator of the target."""
    from tokenwatt.metrics.slo import Limits
    from tokenwatt.predict.replay import TargetNode
    from tokenwatt.predict.served import predict_served

    if src.geometry is None:
        return [None] * len(src.points)
    first = src.points[0]
    node = TargetNode(
        tgt.accelerator,
        tgt.gpus_per_replica or first.gpus_per_replica,
        tgt.replicas or first.replicas,
        tgt.max_batch,
    )
    return predict_served(
        cal, src.points, node, src.geometry, Limits.from_spec(slo), sigmas=sigmas,
        price_per_gpu_hour=price, requests=requests, power_sigmas=power_sigmas,
    )  # fmt: skip


def _slo(base: SLO, ttft_ms: float | None, tpot_ms: float | None) -> SLO:
    from tokenwatt.spec import SLO

    if ttft_ms is None and tpot_ms is None:
        return base
    data = base.model_dump(exclude={"preset"})
    data.update({k: v for k, v in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)) if v is not None})
    return SLO.model_validate(data)


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
    to_weight_dtype: Annotated[
        str | None,
        typer.Option(
            "--to-weight-dtype",
            help="the target's weight dtype; only the source's is accepted (not modelled)",
        ),
    ] = None,
    price_per_gpu_hour: Annotated[
        float | None,
        typer.Option(
            "--price-per-gpu-hour",
            min=1e-9,
            help="target GPU price per hour for $/Mtok (default: the source spec's)",
        ),
    ] = None,
    slo_ttft_ms: Annotated[
        float | None, typer.Option("--slo-ttft-ms", min=1e-9, help="TTFT limit")
    ] = None,
    slo_tpot_ms: Annotated[
        float | None, typer.Option("--slo-tpot-ms", min=1e-9, help="TPOT limit")
    ] = None,
    replay_requests: Annotated[
        int, typer.Option("--replay-requests", min=20, help="requests per virtual replay")
    ] = 400,
    html: Annotated[
        Path | None, typer.Option("--html", help="write a PREDICTED page beside the measured")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """Predict TPOT, TTFT, the SLO boundary, goodput, tokens/J and $/Mtok on other hardware.

    e.g. tokenwatt predict results/my-run --to b200 --price-per-gpu-hour 6 --json
    """
    from tokenwatt.hardware import get_accelerator
    from tokenwatt.predict import Target, calibrate, predict_points

    target = get_accelerator(to)
    src = _source(source)
    cal = calibrate(src.points)
    tgt = Target(target, to_gpus, to_replicas, max_batch, to_weight_dtype)
    preds = predict_points(cal, src.points, tgt, source=src.accelerator, geometry=src.geometry)
    slo = _slo(src.slo, slo_ttft_ms, slo_tpot_ms)
    price = price_per_gpu_hour if price_per_gpu_hour is not None else src.price_per_gpu_hour
    sigmas = [p.relative_sigma for p in preds]
    served = _served(
        src, cal, tgt, slo, sigmas=sigmas, price=price, requests=replay_requests,
        power_sigmas=[p.power_transfer_sigma for p in preds],
    )  # fmt: skip
    transfer = max(p.transfer_sigma for p in preds)  # the widest held-out transfer error
    data = prediction_dict(
        src.about, target, cal, src.points, preds, served=served, transfer=transfer, slo=slo,
        price_per_gpu_hour=price, gpus_per_replica=to_gpus, source=src.accelerator,
    )  # fmt: skip
    if html is not None:
        from tokenwatt.report.predicted_html import write_predicted_html

        write_predicted_html(html, data)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        from tokenwatt.report.predicted import print_prediction

        print_prediction(data)


def register(app: typer.Typer) -> None:
    """Add this module's command to the app."""
    app.command("predict")(predict)
