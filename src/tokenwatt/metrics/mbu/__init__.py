"""MBU from client timing: the seed's formula and every refinement of it, in one package.

``window_mbu`` is the entry point: one probe window (``MbuWindow``: its records, counted
requests, T, τ, steps and the probe's records swept once, ``RequestSweep``) on one node
(``MbuNode``) → ``result.Mbu``. ``compute_mbu`` is the formula itself, for figures measured
elsewhere (``metrics.published``).
"""

from tokenwatt.metrics.mbu.formula import (
    LOW_LOAD_BATCH,
    MOE_UNTOUCHED_FRACTION,
    RATED_BANDWIDTH_LIMIT,
    SMALL_BATCH,
    StepRegime,
    apply_regime,
    check_rated_bandwidth,
    compute_mbu,
    kv_read_per_output_token,
)
from tokenwatt.metrics.mbu.spans import RequestSweep
from tokenwatt.metrics.mbu.window import MbuNode, MbuWindow, window_mbu

__all__ = [
    "LOW_LOAD_BATCH",
    "MOE_UNTOUCHED_FRACTION",
    "RATED_BANDWIDTH_LIMIT",
    "SMALL_BATCH",
    "MbuNode",
    "MbuWindow",
    "RequestSweep",
    "StepRegime",
    "apply_regime",
    "check_rated_bandwidth",
    "compute_mbu",
    "kv_read_per_output_token",
    "window_mbu",
]
