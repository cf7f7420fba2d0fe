"""The peers' load flags on ``bench`` and ``probe``, one definition for both commands.

A newcomer types what ``vllm bench serve``, GuideLLM or AIPerf taught them: ``--num-prompts``,
``--request-rate``, ``--max-concurrency``, ``--random-input-len``. Each is an alias of the
TokenWatt flag with the same meaning, and each lands in the spec as the dotted field it stands
for (``workload.input_tokens``, ``workload.dataset.path``), so it is checked like that field
written in the spec. Where a peer's meaning cannot hold here the flag says so in one line:
``--max-concurrency`` beside ``--rate`` caps an open loop, which hides the queue the SLO must
see, so it is refused rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from tokenwatt.errors import SpecError

__all__ = [
    "ConcurrencyOption",
    "DatasetOption",
    "InputTokensOption",
    "MaxConcurrencyOption",
    "MaxRequestsOption",
    "OutputTokensOption",
    "PeerFlags",
    "RateOption",
    "SeedOption",
    "dataset_fields",
]

RateOption = Annotated[
    float | None,
    typer.Option(
        "--rate",
        "--request-rate",
        "-r",
        help="probe: offered load, requests/s; bench: rate of the first probe "
        "(search.start_rate_rps)",
    ),
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        "-c",
        help="closed loop: keep N requests in flight (bench: one closed-loop point, no search)",
    ),
]
MaxConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        "--max-concurrency",
        help="as vllm bench serve with an unlimited rate: the same as --concurrency N; "
        "beside --rate it is refused (a cap on an open loop hides the queue)",
    ),
]
MaxRequestsOption = Annotated[
    int | None,
    typer.Option(
        "--max-requests",
        "--num-prompts",
        help="closed loop: send and count exactly N requests; open loop: count at least N "
        "in each window (search.probe.min_requests)",
    ),
]
SeedOption = Annotated[
    int | None, typer.Option("--seed", help="seed for lengths, prompts, arrivals (workload.seed)")
]
InputTokensOption = Annotated[
    int | None,
    typer.Option(
        "--input-tokens",
        "--random-input-len",
        help="prompt length, tokens (workload.input_tokens)",
    ),
]
OutputTokensOption = Annotated[
    int | None,
    typer.Option(
        "--output-tokens",
        "--random-output-len",
        help="output length, tokens (workload.output_tokens)",
    ),
]
DatasetOption = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        help="real prompts: sharegpt:PATH (a ShareGPT JSON file; workload.dataset.path)",
    ),
]


def dataset_fields(text: str) -> dict[str, Any]:
    """``sharegpt:PATH`` as the spec's ``workload.dataset`` fields; anything else is the one
    line that shows the form (a bare ``sharegpt`` names no file to read)."""
    kind, sep, path = text.partition(":")
    if kind.strip().lower() != "sharegpt" or not sep or not path.strip():
        raise SpecError(
            f"--dataset: {text!r} is not FORMAT:PATH; give sharegpt:PATH, e.g. "
            "--dataset sharegpt:ShareGPT_V3_unfiltered_cleaned_split.json"
        )
    return {"workload.dataset.format": "sharegpt", "workload.dataset.path": path.strip()}


def _positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise SpecError(f"{flag} must be at least 1, got {value}")


@dataclass(frozen=True, slots=True)
class PeerFlags:
    """The load flags as typed; ``closed_loop`` and ``spec_fields`` say what they ask for."""

    rate: float | None = None
    concurrency: int | None = None
    max_concurrency: int | None = None
    max_requests: int | None = None
    seed: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    dataset: str | None = None

    def closed_loop(self) -> int | None:
        """The closed-loop concurrency asked for, by ``--concurrency`` or ``--max-concurrency``
        (vLLM's habit: ``--max-concurrency N`` at an unlimited rate)."""
        for flag, value in (
            ("--concurrency", self.concurrency),
            ("--max-concurrency", self.max_concurrency),
            ("--max-requests", self.max_requests),
            ("--input-tokens", self.input_tokens),
            ("--output-tokens", self.output_tokens),
        ):
            _positive(flag, value)
        if self.max_concurrency is not None and self.rate is not None:
            raise SpecError(
                "--max-concurrency beside --rate caps an open loop, which hides the queue the "
                "SLO must see: give --rate R (open loop) or --concurrency N (closed loop)"
            )
        c, mc = self.concurrency, self.max_concurrency
        if c is not None and mc is not None and c != mc:
            raise SpecError(f"--concurrency {c} and --max-concurrency {mc} disagree: give one")
        if self.rate is not None and c is not None:
            raise SpecError("give --rate (open loop) or --concurrency (closed loop), not both")
        return c if c is not None else mc

    def spec_fields(self) -> dict[str, Any]:
        """The dotted spec fields these flags set (checked like the same fields in a spec)."""
        fields: dict[str, Any] = {}
        if self.seed is not None:
            fields["workload.seed"] = self.seed
        if self.input_tokens is not None:
            fields["workload.input_tokens"] = self.input_tokens
        if self.output_tokens is not None:
            fields["workload.output_tokens"] = self.output_tokens
        if self.dataset is not None:
            fields.update(dataset_fields(self.dataset))
        return fields
