"""The simulator answers graded tasks: it recognises the task formats and works them out.

A prompt that ends in ``Answer:`` and matches one of the task formats (copy the words, count
the words of a list, compute ``a op b``, a word problem of the bundled GSM8K sample, which
it knows by heart as a model that saw it would; or continue a text, which it does deterministically
by repeating the text's words last to first, the greedy answer a consistency task compares)
gets its right answer as its first output tokens, one word a token, then the request stops
unless ``ignore_eos`` keeps it going. This module solves the tasks itself from the prompt
text; it shares no code with the client's task generator or grader, so a grading that
disagrees with the simulator's answers shows.

``sim.answer_error`` makes answers degrade with load: the answer of a request whose first
output token is emitted in a step with B sequences is wrong with probability
``min(1, base + per_batch × (B − 1))`` (a lone request: ``base``). A wrong answer is the right
one changed (a number off by one, the first copied word replaced), and the simulator keeps the
count and the summed probabilities as its ground truth (``AnswerTruth``).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import random
import re
from dataclasses import dataclass

from tokenwatt.simsettings import AnswerErrorSettings

__all__ = ["AnswerTruth", "answer_words", "error_probability", "wrong_answer"]

_SUFFIX = "Answer:"
_COPY = re.compile(r"Repeat these words exactly: (.+)\nAnswer:\Z")
_COUNT = re.compile(r"How many words are in this list\? (.+)\nAnswer:\Z")
_CONTINUE = re.compile(r"Continue this text: (.+)\nAnswer:\Z")
_PROBLEM = re.compile(r"Question: (.+)\nGive the final answer as a number\.\nAnswer:\Z", re.S)
_ARITH = re.compile(r"Compute (-?\d+) ([-+*]) (-?\d+)\.\nAnswer:\Z")


@functools.cache
def _known_problems() -> dict[str, str]:
    """The bundled word problems' answers by question (``examples/graded``)."""
    path = importlib.resources.files("tokenwatt.examples") / "graded" / "gsm8k_test_sample.jsonl"
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    return {str(r["question"]): str(r["answer"]) for r in rows}


def answer_words(text: object) -> list[str] | None:
    """The right answer's words for a task prompt, or None for any other prompt."""
    if not isinstance(text, str) or not text.endswith(_SUFFIX):
        return None
    if m := _COPY.search(text):
        return m.group(1).split()
    if m := _COUNT.search(text):
        return [str(len(m.group(1).split()))]
    if m := _PROBLEM.search(text):
        answer = _known_problems().get(m.group(1))
        return None if answer is None else [answer]
    if m := _CONTINUE.search(text):
        return m.group(1).split()[::-1]
    if m := _ARITH.search(text):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return [str(a + b if op == "+" else a - b if op == "-" else a * b)]
    return None


def error_probability(knob: AnswerErrorSettings, batch: int) -> float:
    """The chance an answer first emitted in a step of ``batch`` sequences is wrong."""
    return min(1.0, knob.base + knob.per_batch * max(0, batch - 1))


def wrong_answer(words: list[str]) -> list[str]:
    """A wrong answer close to the right one."""
    head = words[0]
    if head.lstrip("-").isdigit():
        return [str(int(head) + 1), *words[1:]]
    return ["the" if head != "the" else "of", *words[1:]]


@dataclass(slots=True)
class AnswerTruth:
    """What the simulator answered: graded answers, wrong ones, and Σ p over the answers."""

    knob: AnswerErrorSettings | None
    rng: random.Random
    answers: int = 0
    wrong: int = 0
    error_probability_sum: float = 0.0

    def decide(self, words: list[str], batch: int) -> list[str]:
        """The answer to send for a first token emitted in a step of ``batch`` sequences."""
        self.answers += 1
        if self.knob is None:
            return words
        p = error_probability(self.knob, batch)
        self.error_probability_sum += p
        if self.rng.random() < p:
            self.wrong += 1
            return wrong_answer(words)
        return words
