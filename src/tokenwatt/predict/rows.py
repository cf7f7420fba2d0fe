"""Published rows as decode points: the figures a leaderboard or a paper's table gives.

A row names the model, the hardware and GPUs, the load (concurrency, or the mean batch the
source measured), the median or mean TPOT/ITL and the mean lengths; throughput and power
when the source measured them. B is the row's batch, else T·τ/R, else its concurrency. The
KV a step reads is B × the KV bytes one token reads at the mean context of a generated
token: the row's ``context_tokens`` where the source publishes its output lengths (input +
Σ n(n−1)/2 ÷ Σ n over the requests, the definition a measured run's MBU uses: long outputs
weigh by their length), else input + output/2, exact only when every output has the mean
length. The prompt tokens a step carries are B × input ÷ output: in a steady closed loop each
request's prompt is prefilled once per its output tokens' worth of steps (a row may give its
own count).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.predict.points import PredictError, StepPoint

__all__ = ["PublishedRow", "points_from_rows", "read_rows_csv"]

MAX_ROWS = 10_000


class PublishedRow(BaseModel):
    """One published operating point (units in the names; power is the node's, all GPUs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    gpus: int = Field(ge=1, le=4096)
    replicas: int = Field(1, ge=1, le=4096)
    tpot_ms: float = Field(gt=0, le=1e6, allow_inf_nan=False)
    input_tokens: float = Field(gt=0, le=1e8, allow_inf_nan=False)
    output_tokens: float = Field(gt=0, le=1e8, allow_inf_nan=False)
    concurrency: float | None = Field(None, gt=0, le=1e7, allow_inf_nan=False)
    batch: float | None = Field(None, gt=0, le=1e7, allow_inf_nan=False)
    output_tokens_per_s: float | None = Field(None, gt=0, le=1e12, allow_inf_nan=False)
    power_w: float | None = Field(None, gt=0, le=1e8, allow_inf_nan=False)
    context_tokens: float | None = Field(
        None, gt=0, le=1e9, allow_inf_nan=False,
        description="mean context per generated token; None: input + output ÷ 2",
    )  # fmt: skip
    prompt_tokens_per_step: float | None = Field(
        None, ge=0, le=1e9, allow_inf_nan=False,
        description="prompt tokens one decode step carries; None: B × input ÷ output",
    )  # fmt: skip
    label: str | None = None

    def batch_per_replica(self) -> float:
        if self.batch is not None:
            return self.batch
        if self.output_tokens_per_s is not None:
            return self.output_tokens_per_s * self.tpot_ms / 1e3 / self.replicas
        if self.concurrency is not None:
            return self.concurrency / self.replicas
        raise PredictError(
            f"{self.label or self.model}: give batch, output_tokens_per_s or concurrency (B)"
        )

    def mean_context_tokens(self) -> float:
        """The context one generated token reads, averaged over the generated tokens."""
        if self.context_tokens is not None:
            return self.context_tokens
        return self.input_tokens + self.output_tokens / 2.0

    def request_rate_rps(self, batch: float) -> float:
        """Requests per second the row's node served: T ÷ output, else (Little's law over
        the decode) R × B ÷ (output × τ)."""
        if self.output_tokens_per_s is not None:
            return self.output_tokens_per_s / self.output_tokens
        return self.replicas * batch / (self.output_tokens * self.tpot_ms / 1e3)


def read_rows_csv(path: Path) -> list[PublishedRow]:
    """A CSV with a header naming ``PublishedRow``'s fields; empty cells are absent figures."""
    rows: list[PublishedRow] = []
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            for n, raw in enumerate(csv.DictReader(fh), start=2):
                if n > MAX_ROWS + 1:
                    raise PredictError(f"{path}: more than {MAX_ROWS} rows; split the file")
                data = {k.strip(): v.strip() for k, v in raw.items() if k and v and v.strip()}
                try:
                    rows.append(PublishedRow.model_validate({"label": f"row {n}", **data}))
                except ValidationError as exc:
                    err = exc.errors()[0]
                    field = ".".join(str(x) for x in err["loc"]) or "row"
                    raise PredictError(f"{path} line {n}: {field}: {err['msg']}") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PredictError(f"{path}: cannot read it as CSV ({exc})") from None
    if not rows:
        raise PredictError(f"{path}: no rows; the header names model, hardware, gpus, tpot_ms, ...")
    return rows


def _point(row: PublishedRow, geometry: ModelGeometry) -> StepPoint:
    acc = get_accelerator(row.hardware)
    batch = row.batch_per_replica()
    context = round(row.mean_context_tokens())
    power = None if row.power_w is None else row.power_w / row.gpus
    prompt_tokens = row.prompt_tokens_per_step
    if prompt_tokens is None:
        prompt_tokens = batch * row.input_tokens / row.output_tokens
    return StepPoint(
        label=row.label or f"{row.model} {row.hardware} B={batch:g}",
        batch=batch,
        step_s=row.tpot_ms / 1e3,
        weight_bytes_per_step=geometry.weight_bytes_per_step(batch),
        kv_bytes_per_step=batch * geometry.kv_bytes_read(context),
        prefill_flops_per_step=2.0 * geometry.active_params * prompt_tokens,
        peak_flops_per_gpu=acc.peak_flops(geometry.weight_dtype),
        gpus_per_replica=max(1, row.gpus // row.replicas),
        replicas=row.replicas,
        bandwidth_bytes_per_s_per_gpu=acc.bandwidth_bytes_per_s,
        concurrency=row.concurrency,
        output_tokens_per_s=row.output_tokens_per_s,
        power_w_per_gpu=power,
        tdp_w_per_gpu=acc.tdp_w,
        prompt_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        rate_rps=row.request_rate_rps(batch),
    )


def points_from_rows(
    rows: Sequence[PublishedRow],
    geometry_of: Callable[[str], ModelGeometry] = load_geometry,
) -> list[StepPoint]:
    """Rows of one model on one accelerator as points (mixing either would fit nonsense)."""
    models = {r.model for r in rows}
    hardware = {get_accelerator(r.hardware).name for r in rows}
    if len(models) != 1 or len(hardware) != 1:
        raise PredictError(
            f"rows name {len(models)} models and {len(hardware)} accelerators; calibrate on one "
            "model on one accelerator at a time"
        )
    geometry = geometry_of(rows[0].model)
    return [_point(r, geometry) for r in rows]
