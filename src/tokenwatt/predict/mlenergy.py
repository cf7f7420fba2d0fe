"""ML.ENERGY Benchmark v3 leaderboard files as published rows.

One file per model and task (the ``ml-energy/leaderboard`` repository, ``public/data/models``),
one configuration per (GPU model, GPUs, parallelism, ``max_num_seqs``): closed loop at the
batch cap, ``avg_batch_size``, ``median_itl_ms``, ``output_throughput_tokens_per_sec`` and
``avg_power_watts`` (GPU power of all the configuration's GPUs, from NVML's energy counter
over a steady window), and the histogram of its requests' output lengths, from which the
mean context of a generated token is input + Σ n(n−1)/2 ÷ Σ n (bin midpoints for n; the
files publish the histogram, not the lengths). The files give no input length: the caller
states one.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tokenwatt.predict.points import PredictError
from tokenwatt.predict.rows import PublishedRow

__all__ = ["LengthHistogram", "MlEnergyConfig", "read_mlenergy", "to_row"]

GPU_NAMES = {"H100": "h100-sxm", "B200": "b200"}  # the benchmark ran H100 SXM 80 GB and B200
MAX_FILE_BYTES = 50_000_000


class Parallelization(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    tensor_parallel: int = Field(1, ge=1)
    data_parallel: int = Field(1, ge=1)
    expert_parallel: int = Field(1, ge=1)


class LengthHistogram(BaseModel):
    """Output lengths of a configuration's requests: ``counts[i]`` in [bins[i], bins[i+1])."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    bins: list[float] = Field(min_length=2, max_length=10_001)
    counts: list[int] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _shape(self) -> LengthHistogram:
        if len(self.bins) != len(self.counts) + 1:
            raise ValueError("bins must be one longer than counts")
        if any(b <= a for a, b in zip(self.bins, self.bins[1:], strict=False)) or self.bins[0] < 0:
            raise ValueError("bins must be non-negative and increasing")
        if any(c < 0 for c in self.counts) or sum(self.counts) == 0:
            raise ValueError("counts must be non-negative, not all zero")
        return self

    def context_offset_tokens(self) -> float:
        """Σ n(n−1)/2 ÷ Σ n, n the bin midpoints: the mean number of earlier output tokens a
        generated token reads (a request of n tokens contributes n tokens and n(n−1)/2)."""
        mids = [(a + b) / 2.0 for a, b in zip(self.bins, self.bins[1:], strict=False)]
        tokens = sum(c * m for c, m in zip(self.counts, mids, strict=True))
        pairs = sum(c * m * (m - 1.0) / 2.0 for c, m in zip(self.counts, mids, strict=True))
        return max(0.0, pairs / tokens)  # a midpoint under one token: no earlier tokens


class MlEnergyConfig(BaseModel):
    """One configuration's figures and, where published, its output-length histogram."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    gpu_model: str
    num_gpus: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)
    avg_batch_size: float = Field(gt=0)
    avg_output_len: float = Field(gt=0)
    median_itl_ms: float = Field(gt=0)
    output_throughput_tokens_per_sec: float = Field(gt=0)
    avg_power_watts: float | None = Field(None, gt=0)
    energy_per_token_joules: float | None = Field(None, gt=0)
    parallelization: Parallelization = Field(default_factory=Parallelization)
    output_length_distribution: LengthHistogram | None = None


def read_mlenergy(path: Path) -> tuple[str, list[MlEnergyConfig]]:
    """(model id, configurations) of one leaderboard file; one-line PredictError otherwise."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise PredictError(
                f"{path}: larger than {MAX_FILE_BYTES} bytes; not a leaderboard file"
            )
        data = json.loads(path.read_text("utf-8"))
        configs = [MlEnergyConfig.model_validate(c) for c in data["configurations"]]
        return str(data["model_id"]), configs
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, ValidationError):
            exc = ValueError(str(exc.errors()[0]["loc"]) + ": " + exc.errors()[0]["msg"])
        raise PredictError(f"{path}: not an ML.ENERGY leaderboard file ({exc})") from None


def to_row(config: MlEnergyConfig, model: str, input_tokens: float) -> PublishedRow:
    """The configuration as a published row of ``model`` (a geometry name) per replica."""
    hardware = GPU_NAMES.get(config.gpu_model)
    if hardware is None:
        raise PredictError(f"GPU model {config.gpu_model!r} is not one of {sorted(GPU_NAMES)}")
    dp = config.parallelization.data_parallel
    hist = config.output_length_distribution
    context = None if hist is None else input_tokens + hist.context_offset_tokens()
    return PublishedRow(
        model=model,
        hardware=hardware,
        gpus=config.num_gpus,
        replicas=dp,
        tpot_ms=config.median_itl_ms,
        input_tokens=input_tokens,
        output_tokens=config.avg_output_len,
        concurrency=float(config.max_num_seqs),
        batch=config.avg_batch_size / dp,
        output_tokens_per_s=config.output_throughput_tokens_per_sec,
        power_w=config.avg_power_watts,
        context_tokens=context,
        label=f"{config.gpu_model} x{config.num_gpus} seqs={config.max_num_seqs}",
    )
