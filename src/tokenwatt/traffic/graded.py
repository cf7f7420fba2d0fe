"""Graded tasks: prompts with one checkable answer, drawn from a seed, and how an answer is
judged.

Each task is a plain-text prompt ending in ``Answer:`` whose right answer is exact:

* copy — ``Repeat these words exactly: w1 w2 … wk`` → the same k words;
* count — ``How many words are in this list? w1 … wn`` → n;
* arithmetic — ``Compute a + b.`` (or ``-``, ``*``) of integers 2–99 → the result;
* gsm8k — ``Question: … Give the final answer as a number.`` with a word problem drawn from
  the bundled sample of GSM8K's test split (``examples/graded``, MIT, its source beside it) →
  its final numeric answer;
* consistency — ``Continue this text: w1 … w8`` → whatever the engine answers when the
  prompt is sent alone (greedy): ``load.consistency`` sends each of a small seeded pool of
  such prompts alone before the probe's load starts, and under load the answer must equal
  that reference exactly (text stripped). Only an engine that promises batch-invariant greedy
  decoding passes this whatever its load.

Grading happens once the stream has ended (the hot path only keeps the text): a count or
arithmetic answer is right when the first integer in the output equals it; a word problem's
when the last number in the output (commas and ``$`` aside, as worked answers end with it)
equals it; a copy when the output's first k words equal the k words, compared without case
or surrounding punctuation. Words after the answer (a model that keeps talking, ``ignore_eos``
filler) do not matter.

``GradedSlice`` chooses which requests carry a task: a seeded draw with probability
``graded.fraction`` per request, the kinds in turn from the same seed, so request i of a
seed is graded (or not) with the same task in every probe and every rerun.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import orjson

from tokenwatt.errors import SpecError
from tokenwatt.spec import BenchSpec
from tokenwatt.spec.graded import GradedSection, TaskKind

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "TASK_WORDS",
    "GradedSlice",
    "GradedTask",
    "grade",
    "graded_plans",
    "make_task",
]

# the words a copy or count task uses: short, common, one token each in the usual vocabularies
TASK_WORDS: tuple[str, ...] = (
    "apple", "river", "stone", "cloud", "green", "table", "music", "light",
    "paper", "horse", "water", "bread", "chair", "smile", "storm", "glass",
)  # fmt: skip
_STREAM_GRADED = 7  # the slice's random stream (traffic.workload uses 1–6)
_INT = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
PUBLIC_SET = "gsm8k_test_sample.jsonl"  # in tokenwatt.examples/graded
_STRIP = ".,;:!?\"'()[]{}`*"
PlanT = TypeVar("PlanT", bound="DataclassInstance")  # a workload.RequestPlan


@dataclass(frozen=True, slots=True)
class GradedTask:
    """One task: its kind, the prompt sent, and the right answer as text."""

    kind: TaskKind
    prompt: str
    answer: str


@functools.cache
def public_set() -> tuple[tuple[str, str], ...]:
    """The bundled word problems: (question, final numeric answer) in file order."""
    text = (importlib.resources.files("tokenwatt.examples") / "graded" / PUBLIC_SET).read_text(
        "utf-8"
    )
    rows = (orjson.loads(line) for line in text.splitlines() if line.strip())
    return tuple((str(r["question"]), str(r["answer"])) for r in rows)


def make_task(kind: TaskKind, rng: np.random.Generator) -> GradedTask:
    """A task of ``kind`` drawn from ``rng`` (not ``consistency``: ``load.consistency``)."""
    if kind == "gsm8k":
        problems = public_set()
        question, answer = problems[int(rng.integers(0, len(problems)))]
        prompt = f"Question: {question}\nGive the final answer as a number.\nAnswer:"
        return GradedTask(kind, prompt, answer)
    if kind == "copy":
        words = [TASK_WORDS[i] for i in rng.integers(0, len(TASK_WORDS), size=4)]
        text = " ".join(words)
        return GradedTask(kind, f"Repeat these words exactly: {text}\nAnswer:", text)
    if kind == "count":
        n = int(rng.integers(3, 10))
        words = [TASK_WORDS[i] for i in rng.integers(0, len(TASK_WORDS), size=n)]
        prompt = f"How many words are in this list? {' '.join(words)}\nAnswer:"
        return GradedTask(kind, prompt, str(n))
    a, b = (int(x) for x in rng.integers(2, 100, size=2))
    op = "+-*"[int(rng.integers(0, 3))]
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return GradedTask(kind, f"Compute {a} {op} {b}.\nAnswer:", str(value))


def grade(task: GradedTask, output: str) -> bool:
    """Whether ``output`` answers ``task`` (the module doc's rule)."""
    if task.kind == "consistency":
        return output.strip() == task.answer
    if task.kind == "copy":
        want = task.answer.lower().split()
        got = [w.strip(_STRIP).lower() for w in output.split()]
        got = [w for w in got if w][: len(want)]
        return got == want
    if task.kind == "gsm8k":
        numbers = _NUMBER.findall(output)
        return bool(numbers) and float(numbers[-1].replace(",", "")) == float(task.answer)
    first = _INT.search(output)
    return first is not None and first.group() == task.answer


class GradedSlice:
    """Which requests of a seed carry a task, and which task (the module doc)."""

    def __init__(
        self, section: GradedSection, seed: int, references: Mapping[str, str] | None = None
    ) -> None:
        self.section = section
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM_GRADED]))
        self._refs = sorted((references or {}).items())

    def task_or_none(self) -> GradedTask | None:
        """The next request's task, or None for an ordinary request (a consistency draw
        without references is an ordinary request: there is nothing to compare with)."""
        if self._rng.random() >= self.section.fraction:
            return None
        kinds = self.section.tasks
        kind = kinds[int(self._rng.integers(0, len(kinds)))]
        if kind != "consistency":
            return make_task(kind, self._rng)
        if not self._refs:
            return None
        prompt, answer = self._refs[int(self._rng.integers(0, len(self._refs)))]
        return GradedTask("consistency", prompt, answer)

    def apply(self, plans: Iterator[PlanT]) -> Iterator[PlanT]:
        """``plans`` with the graded ones' prompts replaced by their tasks."""
        for plan in plans:
            task = self.task_or_none()
            if task is None:
                yield plan
                continue
            yield dataclasses.replace(
                plan,
                prompt=task.prompt,
                prompt_tokens_client=len(task.prompt.split()),
                max_tokens=self.section.word_problem_max_tokens
                if task.kind == "gsm8k"
                else self.section.max_tokens,
                prefix_id=None,
                shared_prefix_tokens=0,
                task=task,
            )


def graded_plans(
    plans: Iterator[PlanT],
    spec: BenchSpec,
    seed: int,
    references: Mapping[str, str] | None = None,
) -> Iterator[PlanT]:
    """The generator's ``plans`` with the spec's graded slice laid over them (unchanged
    without ``graded:``); a trace or conversations cannot carry tasks: refused."""
    if spec.graded is None:
        return plans
    for key in ("trace", "sessions"):
        if getattr(spec.workload, key) is not None:
            raise SpecError(
                f"graded: tasks replace generated prompts, not workload.{key}'s; drop graded: "
                f"or workload.{key}"
            )
    return GradedSlice(spec.graded, seed, references).apply(plans)
