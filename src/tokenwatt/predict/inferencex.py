"""InferenceX (SemiAnalysis) benchmark rows as published rows.

InferenceX runs one model per (accelerator, framework, weight precision, parallelism, nominal
input/output length, concurrency) nightly, closed loop at ``conc`` requests, and publishes per
row the median TPOT (seconds; per request, the time after the first token over the tokens
after it), the median TTFT and the output throughput per GPU. The app's API serves the rows
as a JSON list; this reads that list.

Read as a row: GPUs = ``decode_tp`` (an aggregated single-node run; its expert parallelism and
attention data parallelism split the same GPUs, and the file's ``num_decode_gpu`` counts
tp × ep, not GPUs), τ = ``median_tpot`` (the per-request figure: the files' ``median_itl``
counts the engine's streamed chunks, up to ten times τ), the nominal ``isl`` and ``osl`` as
the mean lengths (stated, not measured: the benchmark draws lengths below the nominal ones),
and the output throughput = per GPU × GPUs. No power is published in these rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokenwatt.predict.points import PredictError
from tokenwatt.predict.rows import PublishedRow

__all__ = ["InferenceXRow", "pair_key", "read_inferencex", "to_row"]

# InferenceX hardware key → the catalog's accelerator
HARDWARE = {
    "h100": "h100-sxm", "h200": "h200", "b200": "b200", "b300": "b300", "gb200": "gb200",
    "mi300x": "mi300x", "mi325x": "mi325x", "mi355x": "mi355x",
}  # fmt: skip
MODELS = {"dsr1": "deepseek-r1"}  # InferenceX model key → the geometry tokenwatt reads
MODEL_WEIGHTS = {"dsr1": "fp8"}  # the geometry's weight dtype: rows of another are refused
MAX_FILE_BYTES = 50_000_000
MAX_ROWS = 100_000


class InferenceXMetrics(BaseModel):
    """The figures of one row this reader uses (seconds and tokens/s per GPU)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    median_tpot: float = Field(gt=0, le=1e3, allow_inf_nan=False)
    median_ttft: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False)
    output_tput_per_gpu: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False)


class InferenceXRow(BaseModel):
    """One InferenceX operating point."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    framework: str = Field(min_length=1)
    precision: str = Field(min_length=1)
    spec_method: str = "none"
    disagg: bool = False
    is_multinode: bool = False
    decode_tp: int = Field(ge=1, le=4096)
    decode_ep: int = Field(1, ge=1, le=4096)
    decode_dp_attention: bool = False
    isl: int = Field(ge=1, le=10_000_000)
    osl: int = Field(ge=1, le=10_000_000)
    conc: int = Field(ge=1, le=10_000_000)
    date: str = Field(min_length=1)
    metrics: InferenceXMetrics


def read_inferencex(path: Path) -> list[InferenceXRow]:
    """Every row of an InferenceX benchmarks JSON list; one-line PredictError otherwise."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise PredictError(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a rows file")
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise PredictError(f"{path}: not an InferenceX benchmarks file ({exc})") from None
    if not isinstance(data, list) or not data or len(data) > MAX_ROWS:
        raise PredictError(
            f"{path}: not an InferenceX benchmarks file (a JSON list of 1 to {MAX_ROWS} rows)"
        )
    rows = []
    for n, raw in enumerate(data):
        try:
            rows.append(InferenceXRow.model_validate(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(x) for x in err["loc"]) or "row"
            raise PredictError(f"{path}: row {n}: {field}: {err['msg']}") from None
    return rows


def pair_key(row: InferenceXRow) -> tuple[object, ...]:
    """What two rows on two accelerators must share to be a pair: model, software, weights,
    parallelism, workload and the night they ran (the software image is not in the rows)."""
    return (
        row.model, row.framework, row.precision, row.spec_method, row.disagg, row.is_multinode,
        row.decode_tp, row.decode_ep, row.decode_dp_attention, row.isl, row.osl, row.date,
    )  # fmt: skip


def to_row(row: InferenceXRow) -> PublishedRow:
    """The row as a published row of the geometry its model maps to (one replica)."""
    hardware = HARDWARE.get(row.hardware)
    model = MODELS.get(row.model)
    if hardware is None:
        raise PredictError(f"hardware {row.hardware!r} is not one of {sorted(HARDWARE)}")
    if model is None:
        raise PredictError(f"model {row.model!r} is not one of {sorted(MODELS)}")
    if row.precision != MODEL_WEIGHTS[row.model]:
        raise PredictError(
            f"{row.model} {row.precision}: the geometry reads {MODEL_WEIGHTS[row.model]} weights"
        )
    if row.disagg or row.is_multinode or row.spec_method != "none":
        raise PredictError(
            f"{row.model} {row.hardware} conc {row.conc}: disaggregated, multi-node or "
            "speculative runs are not one replica's plain decode steps"
        )
    tput = row.metrics.output_tput_per_gpu
    return PublishedRow(
        model=model,
        hardware=hardware,
        gpus=row.decode_tp,
        tpot_ms=row.metrics.median_tpot * 1e3,
        input_tokens=float(row.isl),
        output_tokens=float(row.osl),
        concurrency=float(row.conc),
        output_tokens_per_s=None if tput is None else tput * row.decode_tp,
        label=f"{row.framework} {row.hardware} x{row.decode_tp} conc={row.conc} {row.date}",
    )
