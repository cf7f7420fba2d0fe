"""The graded slice: a share of each probe's requests that carry tasks with checkable answers.

Speed and energy measured on answers nobody checked reward a stack that is fast because it is
wrong under load. With ``graded:`` a seeded ``fraction`` of the requests a probe sends carry
exact-match tasks instead of filler prompts; each answer is graded when its stream ends and
the probe reports its accuracy with an interval (``metrics.accuracy``), which
``slo.accuracy_min`` can require.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenwatt.spec._base import Section

__all__ = ["TASK_KINDS", "GradedSection", "TaskKind"]

TaskKind = Literal["copy", "count", "arithmetic", "gsm8k", "consistency"]
TASK_KINDS: tuple[TaskKind, ...] = ("copy", "count", "arithmetic")  # the default: exact answers


class GradedSection(Section):
    """Which share of requests is graded and with which tasks (drawn in turn from the seed)."""

    fraction: float = Field(
        0.1, gt=0, le=1, description="share of each probe's requests that carry a graded task"
    )
    tasks: list[TaskKind] = Field(
        default_factory=lambda: list(TASK_KINDS),
        min_length=1,
        description="task kinds drawn with equal weight: copy (repeat words), count (words in "
        "a list), arithmetic (a sum, difference or product of small integers), gsm8k (a "
        "word problem from the bundled GSM8K sample, MIT), consistency "
        "(greedy output under load equal to the same prompt's output sent alone; only for "
        "engines that promise batch-invariant greedy decoding)",
    )
    max_tokens: int = Field(
        16, ge=1, le=4096, description="output limit of a graded request (the answer is short)"
    )
    word_problem_max_tokens: int = Field(
        256, ge=1, le=16384, description="output limit of a gsm8k request (room to work it out)"
    )
