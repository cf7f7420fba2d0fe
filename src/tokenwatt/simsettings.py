"""The simulator's knobs, defined and validated once.

The spec's ``sim:`` section (``tokenwatt.spec.sim``), the ``tokenwatt sim`` command's flags
(``tokenwatt.cli.sim``) and the simulator's own ``SimConfig`` (``tokenwatt.sim.config``) all
go through ``SimSettings``, so a value cannot pass one and fail another (``zipf:inf`` once
passed the spec and failed the simulator). It lives at the package's base, importing nothing
of tokenwatt, because the spec may not import the simulator and the simulator may not import
the spec.

Fields are in the units a person writes (``step_overhead_ms``, ``kv_cache_gib``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "AnswerErrorSettings",
    "OutputLength",
    "SimSettings",
    "SpeculativeSettings",
    "parse_output_len",
    "parse_reasoning",
    "parse_routing",
    "reasoning_tokens",
    "settings_error",
]


@dataclass(frozen=True, slots=True)
class OutputLength:
    """How long a request runs when ``ignore_eos`` is false (always capped by max_tokens).

    ``max``: until max_tokens; ``fixed``: a; ``uniform``: integer uniform in [a, b];
    ``geometric``: geometric with mean a (at least 1 token), like an EOS that is equally
    likely after every token.
    """

    kind: str
    a: float = 0.0
    b: float = 0.0


def parse_output_len(text: str) -> OutputLength:
    """``max`` | ``fixed:N`` | ``uniform:A:B`` | ``geometric:MEAN``; ValueError otherwise."""
    parts = text.strip().split(":")
    try:
        if parts == ["max"]:
            return OutputLength("max")
        if parts[0] == "fixed" and len(parts) == 2 and int(parts[1]) >= 1:
            return OutputLength("fixed", float(int(parts[1])))
        if parts[0] == "uniform" and len(parts) == 3:
            a, b = int(parts[1]), int(parts[2])
            if 1 <= a <= b:
                return OutputLength("uniform", float(a), float(b))
        if parts[0] == "geometric" and len(parts) == 2:
            mean = float(parts[1])
            if mean >= 1 and math.isfinite(mean):
                return OutputLength("geometric", mean)
    except ValueError:
        pass
    raise ValueError(
        f"{text!r} is invalid; use max, fixed:N, uniform:A:B or geometric:MEAN (MEAN >= 1)"
    )


def parse_reasoning(text: str) -> tuple[str, float]:
    """``off`` → ("off", 0); ``tokens:N`` → the first N output tokens (N ≥ 1);
    ``fraction:F`` → the first ⌊F × n⌋ of a request's n output tokens (0 < F ≤ 1).
    ValueError otherwise."""
    parts = text.strip().split(":")
    try:
        if parts == ["off"]:
            return ("off", 0.0)
        if parts[0] == "tokens" and len(parts) == 2 and int(parts[1]) >= 1:
            return ("tokens", float(int(parts[1])))
        if parts[0] == "fraction" and len(parts) == 2:
            f = float(parts[1])
            if 0 < f <= 1:
                return ("fraction", f)
    except ValueError:
        pass
    raise ValueError(f"{text!r} is invalid; use off, tokens:N (N >= 1) or fraction:F (0 < F <= 1)")


def reasoning_tokens(rule: tuple[str, float], output_tokens: int) -> int:
    """How many of a request's ``output_tokens`` the simulator streams as reasoning."""
    kind, value = rule
    if kind == "tokens":
        return min(int(value), output_tokens)
    if kind == "fraction":
        return math.floor(value * output_tokens)
    return 0


def parse_routing(text: str) -> float | None:
    """``uniform`` → None; ``zipf:S`` → S (finite, > 0); ValueError otherwise."""
    if text == "uniform":
        return None
    if text.startswith("zipf:"):
        try:
            s = float(text.split(":", 1)[1])
        except ValueError:
            s = -1.0
        if s > 0 and math.isfinite(s):
            return s
    raise ValueError(f"{text!r} is invalid; use uniform or zipf:S with finite S > 0, e.g. zipf:1.2")


class SpeculativeSettings(BaseModel):
    """Speculative decoding in the simulated engine (``sim.speculative``).

    Each decode step of a sequence is a verify step: the drafter proposes ``num_tokens`` (k)
    tokens, the target checks all k + 1 positions in one pass, and the first rejected
    position ends the run, so a step emits 1 + (accepted) tokens. ``acceptance`` is the
    probability that draft position i is accepted given position i − 1 was: one number for
    every position, or one per position (k of them). The spec's string form is
    ``METHOD:K:ACCEPTANCE`` (``mtp:3:0.8``), which the ``tokenwatt sim --speculative`` flag
    takes too.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["draft", "mtp", "ngram"] = Field(
        description="draft: a second model proposes; mtp: the model's own MTP layers; ngram: "
        "prompt lookup (no bytes read)"
    )
    num_tokens: int = Field(ge=1, le=16, description="tokens proposed per step (k)")
    acceptance: float | list[float] = Field(
        description="per-position acceptance probability: one number, or one per position"
    )
    draft_model: str | None = Field(
        None, description="method draft: the draft model (preset name, config.json or folder)"
    )

    @field_validator("acceptance")
    @classmethod
    def _acceptance(cls, v: float | list[float]) -> float | list[float]:
        values = v if isinstance(v, list) else [v]
        if not values or not all(math.isfinite(p) and 0 <= p <= 1 for p in values):
            raise ValueError("acceptance must be probabilities in [0, 1], e.g. 0.8")
        return v

    def model_post_init(self, _: Any) -> None:
        if isinstance(self.acceptance, list) and len(self.acceptance) != self.num_tokens:
            raise ValueError(
                f"acceptance lists {len(self.acceptance)} positions; give one per proposed "
                f"token (num_tokens = {self.num_tokens}) or a single number"
            )
        if self.method != "draft" and self.draft_model is not None:
            raise ValueError("draft_model goes with method draft only")

    def profile(self) -> list[float]:
        """The acceptance probability of each of the k positions."""
        a = self.acceptance
        return list(a) if isinstance(a, list) else [a] * self.num_tokens

    def mean_acceptance_length(self) -> float:
        """Expected tokens per verify step: 1 + Σ_i Π_{j≤i} p_j (no output-length cap)."""
        out, run = 1.0, 1.0
        for p in self.profile():
            run *= p
            out += run
        return out


def parse_speculative(value: object) -> object:
    """``METHOD:K:ACCEPTANCE[:DRAFT]`` → the dict ``SpeculativeSettings`` takes; anything else
    as given (a mapping from the spec, or None)."""
    if not isinstance(value, str):
        return value
    parts = value.split(":", 3)
    if len(parts) < 3:
        raise ValueError(
            f"{value!r} is invalid; use METHOD:K:ACCEPTANCE, e.g. mtp:3:0.8 (or draft:3:0.8:MODEL)"
        )
    out: dict[str, object] = {"method": parts[0], "num_tokens": parts[1], "acceptance": parts[2]}
    if len(parts) == 4:
        out["draft_model"] = parts[3]
    return out


class AnswerErrorSettings(BaseModel):
    """Graded answers that degrade with batch size (``sim.answer_error``): an answer first
    emitted in a step of B sequences is wrong with probability min(1, base + per_batch × (B−1))."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: float = Field(
        0.0, ge=0, le=1, allow_inf_nan=False, description="error probability of a lone request"
    )
    per_batch: float = Field(
        0.0,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="added error probability per further sequence in the step",
    )


class SimSettings(BaseModel):
    """Every knob of a simulated node except its model and hardware (spec sections of their
    own): the engine, its power model, the wire-format test knobs and its truth log."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    efficiency: float = Field(
        0.5,
        description="fraction of rated bandwidth the stack achieves in decode",
        gt=0,
        le=1,
        allow_inf_nan=False,
    )
    prefill_efficiency: float = Field(
        0.5,
        description="fraction of peak FLOP/s achieved in prefill",
        gt=0,
        le=1,
        allow_inf_nan=False,
    )
    prefill_cost: bool = Field(True, description="charge prefill compute time (false: zero)")
    step_overhead_ms: float = Field(
        0.0, description="fixed time added to every step, ms", ge=0, allow_inf_nan=False
    )
    routing: str = Field("uniform", description="expert routing: uniform or zipf:S")
    max_num_seqs: int = Field(256, ge=1, description="cap on running sequences per replica")
    max_batched_tokens: int = Field(8192, ge=1, description="token budget per step")
    kv_cache_gib: float | None = Field(
        None,
        description="KV capacity per replica, GiB; unset: memory × 0.9 − weights",
        gt=0,
        allow_inf_nan=False,
    )
    kv_cache_blocks: int | None = Field(
        None, ge=1, description="KV capacity per replica in 16-token blocks (wins over GiB)"
    )
    max_model_len: int = Field(32768, ge=2, description="longest prompt + output accepted")
    output_len: str = Field(
        "geometric:256",
        description="length without ignore_eos: max, fixed:N, uniform:MIN:MAX, geometric:MEAN",
    )
    prefix_caching: bool = Field(
        False, description="reuse cached 16-token prompt blocks (vLLM automatic prefix caching)"
    )
    seed: int = Field(0, description="random seed of routing and output lengths")
    reasoning: str = Field(
        "off",
        description="chat only: the first output tokens streamed as delta.reasoning_content "
        "before the answer: off, tokens:N or fraction:F of each request's output",
    )
    idle_power_fraction: float = Field(
        0.15, description="idle power per GPU as a fraction of TDP", ge=0, le=1, allow_inf_nan=False
    )
    idle_w: float | None = Field(
        None,
        description="idle power per GPU, W (wins over the fraction)",
        ge=0,
        allow_inf_nan=False,
    )
    tdp_w: float | None = Field(
        None, description="TDP per GPU, W; unset: the catalog's", gt=0, allow_inf_nan=False
    )
    tokens_per_chunk: int = Field(1, ge=1, description="tokens per streamed chunk (test knob)")
    steps_per_chunk: int = Field(
        1, ge=1, description="engine steps per streamed chunk after the first (test knob)"
    )
    keepalive_s: float | None = Field(
        None,
        description="SSE keep-alive comment interval, s (test knob)",
        gt=0,
        allow_inf_nan=False,
    )
    error_after_tokens: int | None = Field(
        None, ge=0, description="abort each stream after N tokens (test knob)"
    )
    stall_after_tokens: int | None = Field(
        None, ge=0, description="stall each stream after N tokens (test knob)"
    )
    spin_s: float = Field(
        0.0015,
        description="busy-wait before each step deadline, s (driver timing)",
        ge=0,
        allow_inf_nan=False,
    )
    truth_log: str | None = Field(None, description="JSONL file, one object per engine step")
    answer_error: AnswerErrorSettings | None = Field(
        None,
        description="graded answers wrong more often at larger batch: {base, per_batch} "
        "(off when unset: every graded task answered right)",
    )
    speculative: SpeculativeSettings | None = Field(
        None,
        description="speculative decoding: METHOD:K:ACCEPTANCE, e.g. mtp:3:0.8 (off when unset)",
    )

    @field_validator("truth_log", mode="before")
    @classmethod
    def _truth_log(cls, v: object) -> object:
        return os.fspath(v) if isinstance(v, os.PathLike) else v

    @field_validator("speculative", mode="before")
    @classmethod
    def _speculative(cls, v: object) -> object:
        return parse_speculative(v)

    @field_validator("routing")
    @classmethod
    def _routing(cls, v: str) -> str:
        parse_routing(v)
        return v

    @field_validator("reasoning")
    @classmethod
    def _reasoning(cls, v: str) -> str:
        parse_reasoning(v)
        return v

    @field_validator("output_len")
    @classmethod
    def _output_len(cls, v: str) -> str:
        parse_output_len(v)
        return v


def settings_error(exc: ValidationError, source: str = "sim") -> str:
    """One line naming each bad knob, what is wrong and the value given."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        parts.append(f"{loc or '<root>'}: {msg}{shown}")
    return f"{source} " + "; ".join(parts)
