"""What is sent and when: token-length distributions, a dataset, the arrival process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from tokenwatt.spec._base import MAX_COUNT, MAX_SECONDS, MAX_SEED, MAX_TOKENS, Section


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


# --- Production workloads: shared prefixes, trace replay, conversations -------------------


class SharedPrefix(Section):
    """N distinct shared prefixes (system prompts) of L tokens each, chosen per request by weight;
    the request's unique part (``workload.input_tokens``) follows the prefix."""

    count: int = Field(1, ge=1, le=MAX_COUNT, description="distinct prefixes")
    length: int = Field(ge=1, le=MAX_TOKENS, description="tokens per prefix")
    weights: list[float] | None = Field(
        None, description="relative weight of each prefix (count entries); equal when omitted"
    )

    @model_validator(mode="after")
    def _weights(self) -> Self:
        w = self.weights
        if w is not None and (len(w) != self.count or not all(0 < x < float("inf") for x in w)):
            raise ValueError(f"weights must be {self.count} positive numbers, one per prefix")
        return self


class Trace(Section):
    """A timestamped trace to replay: arrival times and per-request lengths come from it."""

    path: Path = Field(description="trace file")
    format: Literal["azure", "mooncake", "weka", "tracelab"] = Field(
        description="azure: CSV TIMESTAMP,ContextTokens,GeneratedTokens; mooncake: JSONL "
        "timestamp (ms), input_length, output_length, hash_ids; weka: a folder of agent "
        "conversations (kv-cache-tester JSON, 64-token hash_ids blocks); tracelab: TraceLab "
        "coding-agent rounds (JSONL, or .jsonl.gz; prefix_tokens made into 64-token blocks)"
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        le=1e6,
        description="multiplies every arrival offset: 0.5 replays at twice the rate",
    )
    block_tokens: int = Field(
        512, ge=1, le=MAX_TOKENS, description="tokens per hash_ids block (weka: always 64)"
    )

    @model_validator(mode="before")
    @classmethod
    def _weka_blocks(cls, data: Any) -> Any:
        """WEKA traces name 64-token blocks: the default there, and nothing else accepted."""
        if isinstance(data, dict) and data.get("format") in ("weka", "tracelab"):
            if data.get("block_tokens", 64) != 64:
                raise ValueError("block_tokens: agent traces use 64-token blocks")
            data = {**data, "block_tokens": 64}
        return data


class ThinkFixed(Section):
    kind: Literal["fixed"] = "fixed"
    value_s: float = Field(ge=0, le=MAX_SECONDS, description="seconds")


class ThinkExponential(Section):
    kind: Literal["exponential"] = "exponential"
    mean_s: float = Field(gt=0, le=MAX_SECONDS, description="seconds")


class ThinkUniform(Section):
    kind: Literal["uniform"] = "uniform"
    min_s: float = Field(ge=0, le=MAX_SECONDS, description="seconds, inclusive")
    max_s: float = Field(ge=0, le=MAX_SECONDS, description="seconds")

    @model_validator(mode="after")
    def _order(self) -> Self:
        if self.max_s < self.min_s:
            raise ValueError(f"max_s ({self.max_s}) must be >= min_s ({self.min_s})")
        return self


ThinkTime = Annotated[ThinkFixed | ThinkExponential | ThinkUniform, Field(discriminator="kind")]


class Sessions(Section):
    """Multi-turn conversations: each turn resends the history plus a new user message
    (``workload.input_tokens`` long) after the previous answer ended plus a think time."""

    turns: Distribution = Field(
        default_factory=lambda: Fixed(value=4), description="turns per session"
    )
    think_time_s: ThinkTime = Field(
        default_factory=lambda: ThinkExponential(mean_s=5.0),
        description="pause between an answer's end and the next turn",
    )
    rate_unit: Literal["sessions", "turns"] = Field(
        "sessions", description="what a probe's rate counts: new sessions/s or turns/s"
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and "turns" in data:
            data = {**data, "turns": _coerce_length(data["turns"])}
        return data


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
    shared_prefix: SharedPrefix | None = Field(
        None, description="shared system prompts before each request's unique part"
    )
    trace: Trace | None = Field(None, description="replay a timestamped trace")
    sessions: Sessions | None = Field(None, description="multi-turn conversations")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key in ("input_tokens", "output_tokens"):
                if key in data:
                    data[key] = _coerce_length(data[key])
        return data

    @model_validator(mode="after")
    def _kinds_combine(self) -> Self:
        """Only combinations with one clear meaning: a trace fixes each prompt's length and a
        dataset its text, so neither takes a shared prefix; conversations need made-up turns."""
        if self.trace is not None and self.dataset is not None:
            raise ValueError("give a trace or a dataset, not both")
        if self.shared_prefix is not None and (self.trace or self.dataset):
            raise ValueError("shared_prefix: a trace or dataset fixes each prompt; drop one")
        if self.sessions is not None and self.dataset is not None:
            raise ValueError("sessions: conversations use synthetic turns; drop the dataset")
        return self
