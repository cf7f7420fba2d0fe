"""Unknown flags answered from a table of the peers' flags, not from string similarity alone.

Click suggests the flag whose spelling is closest, which for a peer's habit is usually wrong:
``--output-json`` came back as ``--slo-tpot-ms``, ``--tokenizer`` as ``--workers``. A flag
that ``vllm bench serve``, GuideLLM, AIPerf or inference-perf users type is looked up here and
answered with what does the same job in TokenWatt; any other flag keeps a suggestion only when
its spelling is really close (a typo), never a far match. ``docs/howto/flags.md`` is the same
map for readers. A pasted peer command line often holds several such flags; click stops at the
first, so the whole command line is read and every unknown flag answered at once.
"""

from __future__ import annotations

import difflib

__all__ = [
    "PEER_FLAG_HINTS",
    "TYPO_CUTOFF",
    "hint_for",
    "typo_suggestions",
    "unknown_flags",
    "unknown_flags_message",
]

_SAVED = "results are always saved: use --out DIR"
_SLO = "give the SLO as --slo-ttft-ms MS and --slo-tpot-ms MS (p99 limits)"
_URL = "give the server as --base-url http://HOST:PORT (/v1 is added)"
_SEARCH = (
    "bench searches the rate itself (a sweep); for one point use probe --rate R (Poisson) "
    "or --concurrency N"
)

# peer flag -> what to type in TokenWatt (vLLM: vllm bench serve; GuideLLM: guidellm
# benchmark; AIPerf: aiperf profile; inference-perf: its config keys as flags)
PEER_FLAG_HINTS: dict[str, str] = {
    "--output-json": _SAVED,
    "--save-result": _SAVED,
    "--save-detailed": _SAVED + " (every request is in requests.jsonl)",
    "--result-dir": _SAVED,
    "--result-filename": _SAVED + " (result.json inside it)",
    "--output-path": _SAVED,
    "--output-dir": _SAVED,
    "--artifact-dir": _SAVED,
    "--tokenizer": "no tokenizer is needed: token counts come from the server's usage",
    "--processor": "no tokenizer or processor is needed: token counts come from the server's usage",
    "--goodput": _SLO,
    "--slo": _SLO,
    "--target": _URL,
    "--url": _URL,
    "--host": _URL,
    "--port": _URL,
    "--backend": "choose the API with --api completions or --api chat",
    "--endpoint": "choose the API with --api completions or --api chat",
    "--endpoint-type": "choose the API with --api completions or --api chat",
    "--served-model-name": "give the served name as --model NAME",
    "--dataset-path": "give --dataset sharegpt:PATH",
    "--data": "give lengths as --input-tokens N --output-tokens N, or --dataset sharegpt:PATH",
    "--max-seconds": "give each window's length as --duration S",
    "--benchmark-duration": "give each window's length as --duration S",
    "--warmup-request-count": "give the warm-up in seconds: --warmup S",
    "--profile": _SEARCH,
    "--request-count": "give --max-requests N (alias --num-prompts)",
    "--synthetic-input-tokens-mean": "give --input-tokens N",
    "--isl": "give --input-tokens N",
    "--output-tokens-mean": "give --output-tokens N",
    "--osl": "give --output-tokens N",
    "--burstiness": "give --set workload.arrival.kind=gamma --set workload.arrival.burstiness=K",
    "--percentile-metrics": "every percentile is in result.json; tokenwatt report shows them",
    "--metric-percentiles": "every percentile is in result.json; tokenwatt report shows them",
}

TYPO_CUTOFF = 0.8  # difflib ratio: "--duraton" → "--duration" stays, "--output-json" → no


def hint_for(option_name: str) -> str | None:
    """What the peers' flag ``option_name`` is called here (``--x=1`` is looked up as ``--x``)."""
    return PEER_FLAG_HINTS.get(option_name.split("=", 1)[0])


def typo_suggestions(option_name: str, possibilities: list[str]) -> list[str]:
    """The suggestions click offered, kept only when the spelling is really close."""
    return difflib.get_close_matches(option_name, possibilities, n=3, cutoff=TYPO_CUTOFF)


def unknown_flags(args: list[str], known: set[str]) -> list[str]:
    """The ``--long`` flags of ``args`` that the command does not know, in order, each once
    (``--x=1`` as ``--x``; nothing after a bare ``--``)."""
    out: list[str] = []
    for arg in args:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name.startswith("--") and name not in known and name not in out:
            out.append(name)
    return out


def _answer(flag: str, known: list[str]) -> str:
    hint = hint_for(flag)
    if hint is not None:
        return f"{flag}; {hint}"
    close = typo_suggestions(flag, known)
    return f"{flag} (did you mean {' or '.join(close)}?)" if close else flag


def unknown_flags_message(flags: list[str], known: list[str]) -> str:
    """One line per unknown flag, each with the table's hint or a typo's suggestion."""
    return "\n".join(f"No such option: {_answer(f, known)}" for f in flags)
