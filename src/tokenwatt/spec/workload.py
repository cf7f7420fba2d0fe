"""What is sent and when: token-length distributions, a dataset, the arrival process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from tokenwatt.spec._base import MAX_COUNT, MAX_SEED, MAX_TOKENS, Section


class Fixed(Section):
    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=1, le=MAX_TOKENS, description="tokens")


class Uniform(Section):
    kind: Literal["uniform"] = "uniform"
    min: int = Field(ge=1, le=MAX_TOKENS, description="tokens, inclusive")
    max: int = Field(ge=1, le=MAX_TOKENS, description="tokens, inclusive")

    @model_validator(mode="after")
    def _order(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class Normal(Section):
    kind: Literal["normal"] = "normal"
    mean: float = Field(gt=0, le=MAX_TOKENS, description="tokens")
    std: float = Field(ge=0, le=MAX_TOKENS, description="tokens")
    min: int = Field(1, ge=1, le=MAX_TOKENS, description="clip below, tokens")
    max: int | None = Field(None, ge=1, le=MAX_TOKENS, description="clip above, tokens")


class LogNormal(Section):
    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(
        gt=0, le=MAX_TOKENS, description="tokens (exp of the underlying normal's mean)"
    )
    sigma: float = Field(ge=0, le=10, description="shape: std of the underlying normal")
    min: int = Field(1, ge=1, le=MAX_TOKENS, description="clip below, tokens")
    max: int | None = Field(None, ge=1, le=MAX_TOKENS, description="clip above, tokens")


class Empirical(Section):
    kind: Literal["empirical"] = "empirical"
    values: list[int] | None = Field(None, description="lengths sampled uniformly with replacement")
    file: Path | None = Field(None, description="text file with one length per line")

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.values is None) == (self.file is None):
            raise ValueError("give exactly one of values or file")
        if self.values is not None and (
            not self.values or min(self.values) < 1 or max(self.values) > MAX_TOKENS
        ):
            raise ValueError(f"values must be a non-empty list of lengths in 1..{MAX_TOKENS}")
        return self


Distribution = Annotated[
    Fixed | Uniform | Normal | LogNormal | Empirical, Field(discriminator="kind")
]


def _coerce_length(v: Any) -> Any:
    """Let `input_tokens: 512` stand for `{kind: fixed, value: 512}`."""
    if isinstance(v, int) and not isinstance(v, bool):
        return {"kind": "fixed", "value": v}
    return v


class Dataset(Section):
    path: Path = Field(description="dataset file")
    format: Literal["sharegpt"] = Field("sharegpt", description="ShareGPT JSON (conversations)")
    output_lengths: Literal["distribution", "reply"] = Field(
        "distribution",
        description="max_tokens from workload.output_tokens, or estimated from each "
        "conversation's first reply (4/3 tokens per whitespace-separated word)",
    )


class Poisson(Section):
    kind: Literal["poisson"] = "poisson"


class Gamma(Section):
    kind: Literal["gamma"] = "gamma"
    burstiness: float = Field(
        1.0,
        ge=0.001,
        le=1000,
        description="gamma shape k; 1 is Poisson, < 1 burstier, > 1 smoother",
    )


class Constant(Section):
    kind: Literal["constant"] = "constant"


class Concurrency(Section):
    kind: Literal["concurrency"] = "concurrency"
    concurrency: int = Field(
        ge=1, le=MAX_COUNT, description="requests kept in flight (closed loop)"
    )


Arrival = Annotated[Poisson | Gamma | Constant | Concurrency, Field(discriminator="kind")]


class Workload(Section):
    input_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=1024), description="prompt length"
    )
    output_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=256), description="output length (max_tokens)"
    )
    dataset: Dataset | None = Field(
        None, description="real prompts instead of synthetic ones (lengths then come from it)"
    )
    ignore_eos: bool = Field(
        True, description="send ignore_eos and min_tokens so output lengths are exact"
    )
    arrival: Arrival = Field(default_factory=Poisson, description="arrival process")
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="seed for lengths, prompts and arrival schedules"
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key in ("input_tokens", "output_tokens"):
                if key in data:
                    data[key] = _coerce_length(data[key])
        return data
