"""Conversations: multi-turn sessions planned ahead, timed by when each answer ends.

A session has T turns. Turn 0 is due at the session's start; turn k+1 is due when turn k's
answer ended plus a think time drawn for that gap. Each turn resends the whole history (the
chat API has no memory): an optional shared system prompt, every earlier user message and
every earlier answer as the server wrote it, then the new user message. So the prompt grows by
(previous answer + new message) each turn, and everything before the new message is a prefix
the server has already seen: what an engine with prefix caching can skip.

Everything drawn (turn counts, think times, user messages, the system prompt's choice) comes
from the seed, in session order, when the session is planned, so a session's plan does not
depend on how fast the server answers; only the due times do. This
module does no I/O and reads no clock: ``Conversation`` takes the answer's end time as a
plain integer (ns), which is what lets tests drive it in virtual time.

Session starts come from any non-decreasing iterator of offsets: a Poisson schedule at
sessions/s (``session_rate_rps`` converts a turns/s rate), or a trace's arrival times.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tokenwatt.errors import SpecError
from tokenwatt.spec.workload import (
    Distribution,
    Empirical,
    Fixed,
    Sessions,
    ThinkExponential,
    ThinkFixed,
    ThinkTime,
    Uniform,
)
from tokenwatt.spec.workload import Workload as WorkloadSpec
from tokenwatt.traffic.workload import (
    SharedPrefixes,
    WorkloadGenerator,
    sample_lengths,
)

__all__ = [
    "Conversation",
    "Message",
    "SessionPlanner",
    "TurnPlan",
    "mean_turns",
    "session_rate_rps",
    "think_times_ns",
]

Role = Literal["system", "user", "assistant"]
_STREAM_SESSION = 0x53455353  # "SESS": one stream per session number


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message, with its length as the client counts it (words for text)."""

    role: Role
    content: str
    tokens_client: int


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """One turn to send: when, what (the full chat history), and the lengths expected."""

    session_id: int
    turn: int  # 0-based
    due_ns: int  # after the probe's start
    messages: tuple[Message, ...]
    max_tokens: int
    prefix_id: int | None

    @property
    def prompt_tokens_client(self) -> int:
        """Every message's tokens, as the client counts them (no chat template)."""
        return sum(m.tokens_client for m in self.messages)

    def chat_messages(self) -> list[dict[str, str]]:
        """The ``messages`` of a chat-completions request body."""
        return [{"role": m.role, "content": m.content} for m in self.messages]

    @property
    def history_tokens_client(self) -> int:
        """Tokens before the new user message: the part an earlier turn already sent."""
        return self.prompt_tokens_client - self.messages[-1].tokens_client


@dataclass(slots=True)
class Conversation:
    """One session's plan and history. Call ``first_turn`` once, then ``answer_ended`` after
    each answer; it returns the next turn, or None when the session is over."""

    session_id: int
    start_ns: int
    user_messages: tuple[Message, ...]  # one per turn
    max_tokens: tuple[int, ...]  # one per turn
    think_ns: tuple[int, ...]  # gap after turn k's answer, one per turn but the last
    system: Message | None = None
    prefix_id: int | None = None
    history: list[Message] = field(default_factory=list)
    next_turn: int = 0

    @property
    def turns(self) -> int:
        return len(self.user_messages)

    def _turn(self, due_ns: int) -> TurnPlan:
        k = self.next_turn
        self.history.append(self.user_messages[k])
        self.next_turn += 1
        head = (self.system,) if self.system is not None else ()
        msgs = (*head, *self.history)
        return TurnPlan(self.session_id, k, due_ns, msgs, self.max_tokens[k], self.prefix_id)

    def first_turn(self) -> TurnPlan:
        """Turn 0, due at the session's start."""
        if self.next_turn != 0:
            raise RuntimeError("first_turn: the session has already started")
        return self._turn(self.start_ns)

    def answer_ended(
        self, end_ns: int, answer: str, answer_tokens: int | None = None
    ) -> TurnPlan | None:
        """Record the last turn's answer (its text goes into the history, as a chat client
        resends it) and return the next turn, due ``end_ns`` plus its think time."""
        if self.next_turn == 0 or len(self.history) != 2 * self.next_turn - 1:
            raise RuntimeError("answer_ended: no turn is waiting for an answer")
        n = answer_tokens if answer_tokens is not None else len(answer.split())
        self.history.append(Message("assistant", answer, n))
        if self.next_turn >= self.turns:
            return None
        return self._turn(end_ns + self.think_ns[self.next_turn - 1])


def think_times_ns(dist: ThinkTime, rng: np.random.Generator, size: int) -> list[int]:
    """``size`` think times in integer ns."""
    if isinstance(dist, ThinkFixed):
        raw = np.full(size, dist.value_s)
    elif isinstance(dist, ThinkExponential):
        raw = rng.exponential(dist.mean_s, size=size)
    else:
        raw = rng.uniform(dist.min_s, dist.max_s, size=size)
    out: list[int] = np.rint(raw * 1e9).astype(np.int64).tolist()
    return out


def mean_turns(dist: Distribution) -> float:
    """Expected turns per session: exact for fixed, uniform and empirical values; for the
    others, the mean of 200 000 draws from a fixed seed (clipping makes closed forms wrong)."""
    if isinstance(dist, Fixed):
        return float(dist.value)
    if isinstance(dist, Uniform):
        return (dist.min + dist.max) / 2
    if isinstance(dist, Empirical) and dist.values is not None:
        return float(np.mean(dist.values))
    rng = np.random.default_rng(0)
    return float(sample_lengths(dist, rng, 200_000, where="workload.sessions.turns").mean())


def session_rate_rps(rate: float, unit: Literal["sessions", "turns"], turns: Distribution) -> float:
    """New sessions per second for a probe whose rate counts ``unit``: turns/s ÷ mean turns."""
    if not (math.isfinite(rate) and rate > 0):
        raise SpecError(f"rate must be a positive number of {unit}/s, got {rate}")
    return rate if unit == "sessions" else rate / mean_turns(turns)


class SessionPlanner:
    """Session i of a seed, started at the i-th offset of ``starts_ns``; iterate for
    ``Conversation``s in start order (finite when the starts are)."""

    def __init__(self, workload: WorkloadSpec, *, seed: int, starts_ns: Iterator[int]) -> None:
        if workload.sessions is None:
            raise SpecError("workload.sessions: not set; add sessions: {turns: N} to the spec")
        self.workload = workload
        self.sessions: Sessions = workload.sessions
        self.seed = seed
        self.starts_ns = starts_ns
        # User messages: single requests without a prefix (the prefix is the system message).
        self._messages = iter(
            WorkloadGenerator(
                workload.model_copy(update={"shared_prefix": None, "sessions": None}),
                prompt_format="text",
                seed=seed,
            )
        )
        sp = workload.shared_prefix
        self._prefixes = (
            SharedPrefixes(sp, prompt_format="text", seed=seed) if sp is not None else None
        )

    def _session(self, i: int, start_ns: int, choice: int | None) -> Conversation:
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, _STREAM_SESSION, i]))
        n = int(sample_lengths(self.sessions.turns, rng, 1, where="workload.sessions.turns")[0])
        plans = [next(self._messages) for _ in range(n)]
        users = tuple(Message("user", str(p.prompt), p.prompt_tokens_client) for p in plans)
        think = tuple(think_times_ns(self.sessions.think_time_s, rng, n - 1))
        system = None
        if self._prefixes is not None and choice is not None:
            text = str(self._prefixes.prompt(choice))
            system = Message("system", text, self._prefixes.spec.length)
        outs = tuple(p.max_tokens for p in plans)
        return Conversation(i, start_ns, users, outs, think, system, choice)

    def __iter__(self) -> Iterator[Conversation]:
        choices = self._prefixes.choices() if self._prefixes is not None else None
        for i, start in enumerate(self.starts_ns):
            yield self._session(i, start, next(choices) if choices is not None else None)
