"""Predict before you buy: calibrate the serving stack on measured points, transfer it.

``points`` turns a result (or published rows) into decode operating points (B, step time,
bytes per step); ``calibrate`` fits the stack's two constants (bandwidth efficiency and the
per-step floor) and the power-vs-load line with their residuals; ``transfer`` replays each
point on a target accelerator through the same roofline and attaches an interval.
"""

from __future__ import annotations

from tokenwatt.predict.calibrate import Calibration, calibrate
from tokenwatt.predict.points import (
    PredictError,
    StepPoint,
    points_from_probes,
    points_from_result,
)
from tokenwatt.predict.rows import PublishedRow, points_from_rows, read_rows_csv
from tokenwatt.predict.transfer import Prediction, Target, predict_points, transfer_error

__all__ = [
    "Calibration",
    "PredictError",
    "Prediction",
    "PublishedRow",
    "StepPoint",
    "Target",
    "calibrate",
    "points_from_probes",
    "points_from_result",
    "points_from_rows",
    "predict_points",
    "read_rows_csv",
    "transfer_error",
]
