"""Requests to send: prompt and output lengths from the spec, prompts built to those lengths.

Everything is drawn from the probe's seed in a fixed order (one random stream per purpose,
drawn in blocks), so request i of a given seed is the same in every probe and every rerun.

Prompt forms:
* token ids — a list of random ids in [1000, 30000), valid in every current vocabulary of
  32k entries or more and clear of the low special-token range; exact length for any server
  that accepts token-id prompts (vLLM, SGLang, the simulator). Random ids make accidental
  prefix-cache hits between requests negligible.
* text — N words drawn from common short English words, joined by single spaces. The
  simulator counts a text prompt as its number of whitespace-separated words, so the length
  is exact there; real tokenizers give about one token per such word (plus BOS or a chat
  template), which is why lengths used in figures come from the server's usage.prompt_tokens.

A ShareGPT dataset gives real prompts instead: the first human turn of each conversation
(empty ones skipped), in an order shuffled by the seed. Without a tokenizer its length is
counted in words (``prompt_tokens_client``); the server's usage reports the true count.

Shared prefixes (``workload.shared_prefix``): N prefixes of L tokens, each a pure function of
(seed, prefix number), so every request that picks prefix k starts with the same L ids (or
words) and a prefix cache can hit them; the request's own part, drawn exactly as without a
prefix, follows. A plan carries its prefix number and shared length, so figures can say how
much of a prompt was cacheable.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from tokenwatt.bounded import DATASET_MAX_BYTES, IMPORT_MAX_BYTES, read_bounded
from tokenwatt.errors import SpecError
from tokenwatt.spec import BenchSpec
from tokenwatt.spec.workload import (
    Dataset,
    Distribution,
    Empirical,
    Fixed,
    LogNormal,
    Normal,
    SharedPrefix,
)
from tokenwatt.spec.workload import Workload as WorkloadSpec
from tokenwatt.traffic.graded import GradedTask

__all__ = [
    "TOKEN_ID_RANGE",
    "WORDS",
    "PromptFormat",
    "RequestPlan",
    "SharedPrefixes",
    "WorkloadGenerator",
    "load_sharegpt",
    "random_prompt",
    "resolve_prompt_format",
    "sample_lengths",
]

PromptFormat = Literal["token_ids", "text"]
TOKEN_ID_RANGE = (1000, 30000)
# Estimated tokens per English word for dataset replies (no tokenizer at hand).
TOKENS_PER_WORD = 4 / 3

_BLOCK = 1024
_STREAM_INPUT, _STREAM_OUTPUT, _STREAM_PROMPT, _STREAM_DATASET = 1, 2, 3, 4
_STREAM_PREFIX, _STREAM_PREFIX_CHOICE = 5, 6

# Short, frequent English words; each is a single token in the BPE and SentencePiece
# vocabularies of current LLMs when preceded by a space.
_WORD_TEXT = """
    the of and to in is was for on that with as by at from his her it an were are which this
    be or has had not but also have one their its first new after who they two time been more
    other when there all during into school year city can only over world some most would
    made than where later about up out many national then state she used people known may
    both such team three while being through these war part each well film under between
    year just around home music like him season before since early any very best same
    family work high back life four group water began five number area last name found
    second main public local place day game even own off form long old based did because
    made left took death play large end own major series still small several line near
    house book often great power town good three women south north east west men road way
    came around among day war end set light hand side again head began open red power
    """
WORDS: tuple[str, ...] = tuple(dict.fromkeys(_WORD_TEXT.split()))


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """One request to send: its prompt and the lengths the client expects."""

    index: int
    prompt: str | list[int] | list[dict[str, str]]  # text, token ids, or a chat history
    prompt_tokens_client: int  # exact for token ids and for the simulator's word count
    max_tokens: int
    prefix_id: int | None = None  # which shared prefix the prompt starts with, if any
    shared_prefix_tokens: int = 0  # leading tokens (client count) shared with other requests
    task: GradedTask | None = None  # a graded request's task (traffic.graded), else None


def resolve_prompt_format(spec: BenchSpec) -> PromptFormat:
    """Token ids where they are exact and accepted, text otherwise; contradictions are errors."""
    ep = spec.endpoint
    if spec.workload.sessions is not None and ep.api != "chat":
        raise SpecError(
            "workload.sessions: conversations resend their history as chat messages; "
            "set endpoint.api: chat"
        )
    if spec.workload.dataset is not None:
        if ep.prompt_format == "token_ids":
            raise SpecError(
                "endpoint.prompt_format: a dataset's prompts are text; set it to text or auto"
            )
        return "text"
    if ep.api == "chat":
        if ep.prompt_format == "token_ids":
            raise SpecError(
                "endpoint.prompt_format: chat messages are text; use text or auto with api: chat"
            )
        return "text"
    if ep.prompt_format == "auto":
        return "token_ids" if ep.is_sim else "text"
    return ep.prompt_format


def _read_lengths_file(path: Path, where: str) -> list[int]:
    data = read_bounded(path, max_bytes=IMPORT_MAX_BYTES, error=SpecError, what=f"{where}.file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{where}.file: {path} is not UTF-8 text (byte {exc.start})") from None
    out: list[int] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            v = int(line)
        except ValueError:
            v = 0
        if v < 1:
            raise SpecError(
                f"{where}.file: {path} line {lineno}: expected a length >= 1, got {line!r}"
            )
        out.append(v)
    if not out:
        raise SpecError(f"{where}.file: {path} holds no lengths (one integer per line)")
    return out


def sample_lengths(
    dist: Distribution, rng: np.random.Generator, size: int, *, where: str = "length"
) -> np.ndarray:
    """``size`` lengths (int64, each ≥ 1) from a spec distribution."""
    if isinstance(dist, Fixed):
        return np.full(size, dist.value, dtype=np.int64)
    if isinstance(dist, Normal | LogNormal):
        if isinstance(dist, Normal):
            raw = rng.normal(dist.mean, dist.std, size=size)
        else:
            raw = dist.median * np.exp(dist.sigma * rng.standard_normal(size))
        hi = dist.max if dist.max is not None else np.iinfo(np.int64).max // 4
        return np.clip(np.rint(raw), dist.min, hi).astype(np.int64)
    if isinstance(dist, Empirical):
        values = dist.values if dist.values is not None else None
        if values is None:
            assert dist.file is not None
            values = _read_lengths_file(dist.file, where)
        return np.asarray(values, dtype=np.int64)[rng.integers(0, len(values), size=size)]
    return rng.integers(dist.min, dist.max + 1, size=size, dtype=np.int64)


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text.split()) * TOKENS_PER_WORD))


def load_sharegpt(dataset: Dataset) -> list[tuple[str, int | None]]:
    """(first human turn, estimated reply tokens or None) per usable conversation, file order."""
    path = dataset.path
    raw = read_bounded(
        path, max_bytes=DATASET_MAX_BYTES, error=SpecError, what="workload.dataset.path"
    )
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SpecError(f"workload.dataset.path: {path} is not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise SpecError(
            f"workload.dataset.path: {path} must hold a JSON list of conversations "
            "(ShareGPT: [{'conversations': [{'from': 'human', 'value': ...}, ...]}, ...])"
        )
    out: list[tuple[str, int | None]] = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            continue
        prompt: str | None = None
        reply: int | None = None
        for turn in turns:
            if not isinstance(turn, dict):
                continue
            who, value = turn.get("from"), turn.get("value")
            if not isinstance(value, str):
                continue
            if prompt is None and who in ("human", "user"):
                if not value.strip():
                    break  # an empty first question: skip the conversation
                prompt = value
            elif prompt is not None and who in ("gpt", "assistant", "chatgpt", "bing", "bard"):
                reply = _estimate_tokens(value) if value.strip() else None
                break
        if prompt is None:
            continue
        if dataset.output_lengths == "reply" and reply is None:
            continue
        out.append((prompt, reply))
    if not out:
        raise SpecError(
            f"workload.dataset.path: {path} has no usable conversation "
            "(a non-empty first human turn"
            + (" followed by a reply" if dataset.output_lengths == "reply" else "")
            + ")"
        )
    return out


def random_prompt(rng: np.random.Generator, n: int, fmt: PromptFormat) -> str | list[int]:
    """``n`` random token ids, or ``n`` words joined by single spaces."""
    if fmt == "token_ids":
        lo, hi = TOKEN_ID_RANGE
        ids: list[int] = rng.integers(lo, hi, size=n).tolist()
        return ids
    idx = rng.integers(0, len(WORDS), size=n).tolist()
    return " ".join([WORDS[k] for k in idx])


def join_prompts(head: str | list[int], tail: str | list[int]) -> str | list[int]:
    """Two prompt pieces of one form as one prompt (text joined by one space)."""
    if isinstance(head, list) and isinstance(tail, list):
        return head + tail
    assert isinstance(head, str) and isinstance(tail, str)
    return f"{head} {tail}" if head and tail else head + tail


class SharedPrefixes:
    """The spec's shared prefixes: prefix k is a pure function of (seed, k), so it is the same
    in every request, probe and rerun; which prefix a request gets is a seeded weighted draw."""

    def __init__(self, spec: SharedPrefix, *, prompt_format: PromptFormat, seed: int) -> None:
        self.spec = spec
        self.prompt_format = prompt_format
        self.seed = seed
        self._cache: dict[int, str | list[int]] = {}
        w = np.asarray(spec.weights if spec.weights is not None else [1.0] * spec.count)
        self.probabilities = w / w.sum()

    def prompt(self, k: int) -> str | list[int]:
        """Prefix ``k`` (0-based), exactly ``spec.length`` ids or words."""
        if k not in self._cache:
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, _STREAM_PREFIX, k]))
            self._cache[k] = random_prompt(rng, self.spec.length, self.prompt_format)
        return self._cache[k]

    def choices(self) -> Iterator[int]:
        """The prefix number of request 0, 1, 2, ..."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, _STREAM_PREFIX_CHOICE]))
        while True:
            yield from rng.choice(self.spec.count, size=_BLOCK, p=self.probabilities).tolist()


class WorkloadGenerator:
    """Request i of a seed, in order. Iterate to get ``RequestPlan``s without end."""

    def __init__(self, workload: WorkloadSpec, *, prompt_format: PromptFormat, seed: int) -> None:
        for key in ("trace", "sessions"):
            if getattr(workload, key) is not None:
                # Replayed by TraceReplay / SessionPlanner; refusing here keeps a caller that
                # only knows single requests from silently sending something else.
                raise SpecError(
                    f"workload.{key}: this command sends independent requests and does not "
                    f"replay {key} yet; remove workload.{key}"
                )
        self.workload = workload
        self.prompt_format = prompt_format
        self.seed = seed
        self._dataset = load_sharegpt(workload.dataset) if workload.dataset is not None else None

    def _rng(self, stream: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.seed, stream]))

    def _lengths(self, dist: Distribution, stream: int, where: str) -> Iterator[int]:
        rng = self._rng(stream)
        while True:
            yield from sample_lengths(dist, rng, _BLOCK, where=where).tolist()

    def _dataset_order(self, n: int) -> Iterator[int]:
        rng = self._rng(_STREAM_DATASET)
        while True:  # a fresh permutation per pass over the dataset
            yield from rng.permutation(n).tolist()

    def __iter__(self) -> Iterator[RequestPlan]:
        w = self.workload
        outputs = self._lengths(w.output_tokens, _STREAM_OUTPUT, "workload.output_tokens")
        if self._dataset is not None:
            assert w.dataset is not None
            data = self._dataset
            by_reply = w.dataset.output_lengths == "reply"
            for i, j in enumerate(self._dataset_order(len(data))):
                text, reply = data[j]
                out = next(outputs)
                yield RequestPlan(i, text, len(text.split()), reply if by_reply and reply else out)
        yield from self._synthetic(outputs)

    def _synthetic(self, outputs: Iterator[int]) -> Iterator[RequestPlan]:
        w = self.workload
        inputs = self._lengths(w.input_tokens, _STREAM_INPUT, "workload.input_tokens")
        rng = self._rng(_STREAM_PROMPT)
        prefixes = (
            SharedPrefixes(w.shared_prefix, prompt_format=self.prompt_format, seed=self.seed)
            if w.shared_prefix is not None
            else None
        )
        choices = prefixes.choices() if prefixes is not None else None
        i = 0
        while True:
            n_in = next(inputs)
            prompt = random_prompt(rng, n_in, self.prompt_format)
            if prefixes is None or choices is None:
                yield RequestPlan(i, prompt, n_in, next(outputs))
            else:
                k = next(choices)
                shared = prefixes.spec.length
                full = join_prompts(prefixes.prompt(k), prompt)
                yield RequestPlan(i, full, shared + n_in, next(outputs), k, shared)
            i += 1
