"""The peers' load flags on ``bench`` and ``probe``, one definition for both commands.

A newcomer types what ``vllm bench serve``, GuideLLM or AIPerf taught them: ``--num-prompts``,
``--request-rate``, ``--max-concurrency``, ``--random-input-len``. Each is an alias of the
TokenWatt flag with the same meaning, and each lands in the spec as the dotted field it stands
for (``workload.input_tokens``, ``workload.dataset.path``), so it is checked like that field
written in the spec. Where a peer's meaning cannot hold here the flag says so in one line:
``--max-concurrency`` beside a finite ``--rate`` caps an open loop, which hides the queue the
SLO must see, so it is refused rather than silently ignored; beside ``--request-rate inf``
(vLLM's default pairing: no arrival process, N in flight) it is the closed loop it means.
``--rate-type`` (GuideLLM) picks the arrival process it names. Flags that change nothing here
(``--dataset-name random``, ``--ignore-eos``, ``--streaming``: what this tool always does) are
accepted with one note, so a pasted peer command line runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from tokenwatt.errors import SpecError

__all__ = [
    "ConcurrencyOption",
    "DatasetNameOption",
    "DatasetOption",
    "IgnoreEosOption",
    "InputTokensOption",
    "MaxConcurrencyOption",
    "MaxRequestsOption",
    "OutputTokensOption",
    "PeerFlags",
    "RateOption",
    "RateTypeOption",
    "SeedOption",
    "StreamingOption",
    "check_window",
    "dataset_fields",
    "show_notes",
]

RateOption = Annotated[
    float | None,
    typer.Option(
        "--rate",
        "--request-rate",
        "-r",
        help="probe: offered load, requests/s; bench: rate of the first probe "
        "(search.start_rate_rps); inf with --max-concurrency N: a closed loop of N",
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
        help="as vllm bench serve with an unlimited rate (no --rate, or --request-rate inf): "
        "the same as --concurrency N; beside a finite --rate it is refused (a cap on an open "
        "loop hides the queue)",
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


RateTypeOption = Annotated[
    str | None,
    typer.Option(
        "--rate-type",
        help="as GuideLLM: poisson or constant arrivals at --rate (workload.arrival.kind); "
        "synchronous: one request at a time (--concurrency 1)",
    ),
]
DatasetNameOption = Annotated[
    str | None,
    typer.Option(
        "--dataset-name",
        help="as vllm bench serve: random is the default here (a note, nothing changes); "
        "ShareGPT prompts: --dataset sharegpt:PATH",
    ),
]
IgnoreEosOption = Annotated[
    bool,
    typer.Option("--ignore-eos", help="accepted: output lengths are exact by default (a note)"),
]
StreamingOption = Annotated[
    bool, typer.Option("--streaming", help="accepted: requests always stream (a note)")
]

# --rate-type values: the spec's arrival kind they name, or why they do not apply here
_RATE_TYPE_ARRIVAL = {"poisson": "poisson", "constant": "constant"}
_RATE_TYPE_REFUSED = {
    "sweep": "tokenwatt bench searches the rate itself (its sweep): drop --rate-type sweep",
    "throughput": "all requests at once finds peak throughput, not an SLO operating point: "
    "give --concurrency N (a closed loop) or bench's search",
    "concurrent": "give --concurrency N (a closed loop of N streams)",
}
# flags that change nothing here, and what this tool does instead
_NO_OP_NOTES = {
    "--dataset-name random": "random prompts are the default",
    "--ignore-eos": "output lengths are exact (workload.ignore_eos)",
    "--streaming": "requests always stream",
}


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
    rate_type: str | None = None
    dataset_name: str | None = None
    ignore_eos: bool = False
    streaming: bool = False

    def open_rate(self) -> float | None:
        """The open-loop rate: ``--request-rate inf`` is vLLM's "no arrival process", not a
        rate (with ``--max-concurrency N`` it is the closed loop ``closed_loop`` returns)."""
        return None if self.rate == math.inf else self.rate

    def _rate_type(self) -> str | None:
        """``--rate-type`` checked; its arrival kind (or ``synchronous``), one line if not."""
        if self.rate_type is None:
            return None
        kind = self.rate_type.strip().lower()
        if kind in _RATE_TYPE_REFUSED:
            raise SpecError(f"--rate-type {kind}: {_RATE_TYPE_REFUSED[kind]}")
        if kind not in (*_RATE_TYPE_ARRIVAL, "synchronous"):
            raise SpecError(
                f"--rate-type: {self.rate_type!r} is not one of poisson, constant, synchronous "
                "(GuideLLM's sweep, throughput and concurrent: see docs/howto/flags.md)"
            )
        return kind

    def _infinite_rate(self) -> None:
        if self.rate != math.inf:
            return
        if self.max_concurrency is None and self.concurrency is None:
            raise SpecError(
                "--request-rate inf sends every request at once (a burst, no arrival process): "
                "give --max-concurrency N with it (a closed loop of N, as vllm bench serve) or "
                "a finite --rate R"
            )

    def closed_loop(self) -> int | None:
        """The closed-loop concurrency asked for, by ``--concurrency`` or ``--max-concurrency``
        (vLLM's habit: ``--max-concurrency N`` at an unlimited rate, ``--request-rate inf``
        included), or ``--rate-type synchronous`` (one at a time)."""
        for flag, value in (
            ("--concurrency", self.concurrency),
            ("--max-concurrency", self.max_concurrency),
            ("--max-requests", self.max_requests),
            ("--input-tokens", self.input_tokens),
            ("--output-tokens", self.output_tokens),
        ):
            _positive(flag, value)
        self._infinite_rate()
        rate = self.open_rate()
        if self.max_concurrency is not None and rate is not None:
            raise SpecError(
                "--max-concurrency beside a finite --rate caps an open loop, which hides the "
                "queue the SLO must see: give --rate R (open loop), or --max-concurrency N alone "
                "or with --request-rate inf (closed loop)"
            )
        c, mc = self.concurrency, self.max_concurrency
        if c is not None and mc is not None and c != mc:
            raise SpecError(f"--concurrency {c} and --max-concurrency {mc} disagree: give one")
        if rate is not None and c is not None:
            raise SpecError("give --rate (open loop) or --concurrency (closed loop), not both")
        closed = c if c is not None else mc
        if self._rate_type() == "synchronous":
            if rate is not None or closed not in (None, 1):
                raise SpecError(
                    "--rate-type synchronous sends one request at a time: drop --rate and "
                    "--concurrency (or give --concurrency 1)"
                )
            return 1
        return closed

    def notes(self) -> list[str]:
        """One line naming every flag given that changes nothing here, and why; [] if none."""
        given = []
        if self.dataset_name is not None:
            name = self.dataset_name.strip().lower()
            if name != "random":
                raise SpecError(
                    f"--dataset-name {self.dataset_name}: give real prompts as --dataset "
                    "sharegpt:PATH (random prompts are the default)"
                )
            given.append("--dataset-name random")
        if self.ignore_eos:
            given.append("--ignore-eos")
        if self.streaming:
            given.append("--streaming")
        if not given:
            return []
        why = "; ".join(_NO_OP_NOTES[g] for g in given)
        return [f"{', '.join(given)} change nothing here: {why}"]

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
        kind = self._rate_type()
        if kind in _RATE_TYPE_ARRIVAL:
            fields["workload.arrival.kind"] = _RATE_TYPE_ARRIVAL[kind]
        return fields


def check_window(max_requests: int | None, duration_s: float | None, closed: bool) -> None:
    """``probe``: ``--num-prompts N`` and ``--duration S`` each end the probe, so together one
    of them was silently ignored (10 prompts in a 3 s window at 1 req/s counted 3). Refused in
    one line saying what each means."""
    if max_requests is None or duration_s is None:
        return
    what = "sends and counts exactly N requests" if closed else "counts at least N requests"
    raise SpecError(
        f"--num-prompts {max_requests} and --duration {duration_s:g} both set where the probe "
        f"ends: --num-prompts {what}, --duration measures exactly that many seconds; give one"
    )


def show_notes(peer: PeerFlags) -> None:
    """Print ``peer.notes()`` (one line) on stderr, where a pasted command line's output is
    not mixed with the run's."""
    from rich.console import Console
    from rich.markup import escape

    for line in peer.notes():
        Console(stderr=True).print(
            f"[yellow]note:[/] {escape(line)}", highlight=False, soft_wrap=True
        )
