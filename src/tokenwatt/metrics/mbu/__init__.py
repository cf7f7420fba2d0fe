"""MBU from client timing: the seed's formula and every refinement of it, in one package."""

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

__all__ = [
    "LOW_LOAD_BATCH",
    "MOE_UNTOUCHED_FRACTION",
    "RATED_BANDWIDTH_LIMIT",
    "SMALL_BATCH",
    "StepRegime",
    "apply_regime",
    "check_rated_bandwidth",
    "compute_mbu",
    "kv_read_per_output_token",
]
