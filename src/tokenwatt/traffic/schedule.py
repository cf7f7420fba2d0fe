"""Where a probe's requests come from: one small interface over three schedule kinds.

The probe's send loop asks a ``ScheduleSource`` for the next arrival (``peek``/``pop``: an
offset after the probe's start and the request to send then) and reports every finished
request back (``finished``). Three sources feed that one loop:

* ``OpenLoopSource``: the spec's open-loop process (Poisson, gamma, constant) at a rate, with
  the workload generator's requests; endless.
* ``TraceSource``: a ``TraceReplay`` (Azure or Mooncake trace); finite, and the trace's own
  rate scaled to the probe's rate when one is given (``TraceReplay.at_rate``). An agent trace
  (WEKA) takes the rate in sessions/s instead: its conversations start one every 1/rate s,
  each at its traced pace (``TraceReplay.at_session_rate``).
* ``SessionSource``: conversations. Session starts follow an open-loop process; each session
  is closed-loop within itself: turn k+1 becomes due only when turn k's answer has ended, at
  that end plus a think time (``traffic.sessions.Conversation``). So ``peek`` can change after a
  ``finished`` call, and the send loop re-peeks when ``finished`` says so.

A source does no I/O and reads no clock (answer ends come in as integers), which is what lets
tests drive it in virtual time. Offsets never go backwards: a turn that became due before the
last arrival already sent (possible only by scheduling jitter) is sent at that arrival's time.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from tokenwatt.errors import SpecError
from tokenwatt.records import RequestRecord
from tokenwatt.spec import BenchSpec
from tokenwatt.traffic.arrivals import ClosedLoop, OpenLoopSchedule, make_arrivals
from tokenwatt.traffic.graded import graded_plans
from tokenwatt.traffic.sessions import Conversation, SessionPlanner, TurnPlan, session_rate_rps
from tokenwatt.traffic.traces import TraceReplay
from tokenwatt.traffic.workload import PromptFormat, RequestPlan, WorkloadGenerator

__all__ = [
    "OpenLoopSource",
    "RateUnit",
    "ScheduleSource",
    "SessionSource",
    "TraceSource",
    "closed_loop_plans",
    "make_source",
]

RateUnit = Literal["requests", "sessions", "turns"]


class ScheduleSource(Protocol):
    """What the probe's send loop needs from a schedule."""

    kind: str  # poisson, gamma, constant, trace-azure, trace-mooncake, sessions
    rate_unit: RateUnit

    def peek(self) -> int | None:
        """The next arrival's offset (ns after the probe's start); None when none is known now
        (``exhausted`` says whether one may still come)."""
        ...

    def pop(self) -> tuple[int, RequestPlan]:
        """Take the next arrival (call after ``peek`` returned an offset)."""
        ...

    def finished(self, rec: RequestRecord, end_ns: int) -> bool:
        """A request ended at ``end_ns`` (ns after the probe's start); True when that made a
        new arrival known (the loop must re-peek)."""
        ...

    @property
    def exhausted(self) -> bool:
        """No arrival will ever come again."""
        ...

    def end_offset_ns(self) -> int | None:
        """For a finite schedule: where its last arrival's slot ends (the window closes there
        when the schedule runs out first); None for endless ones."""
        ...


class _Peekable:
    """An iterator of (offset, plan) pairs with one-item look-ahead."""

    def __init__(self, pairs: Iterator[tuple[int, RequestPlan]]) -> None:
        self._it = pairs
        self._head: tuple[int, RequestPlan] | None = None
        self._done = False

    def peek(self) -> int | None:
        if self._head is None and not self._done:
            self._head = next(self._it, None)
            self._done = self._head is None
        return None if self._head is None else self._head[0]

    def pop(self) -> tuple[int, RequestPlan]:
        if self.peek() is None or self._head is None:
            raise IndexError("pop from an empty schedule")
        head, self._head = self._head, None
        return head

    @property
    def exhausted(self) -> bool:
        return self.peek() is None


class OpenLoopSource(_Peekable):
    """The spec's open-loop process at a rate, each arrival with the generator's next request."""

    rate_unit: RateUnit = "requests"

    def __init__(self, schedule: OpenLoopSchedule, plans: Iterator[RequestPlan]) -> None:
        super().__init__(zip(schedule.offsets_ns(), plans, strict=False))
        self.kind: str = schedule.kind

    def finished(self, rec: RequestRecord, end_ns: int) -> bool:
        return False

    def end_offset_ns(self) -> int | None:
        return None


class TraceSource(_Peekable):
    """A trace replayed row by row: its offsets (time-scaled) and its requests; finite."""

    rate_unit: RateUnit = "requests"

    def __init__(self, replay: TraceReplay, *, rate_unit: RateUnit = "requests") -> None:
        super().__init__(zip(replay.offsets_ns(), replay.plans(), strict=True))
        self.rate_unit = rate_unit  # sessions: an agent trace's conversations started /s
        self.kind: str = f"trace-{replay.trace.format}"
        self.replay = replay
        # per request index: tokens an unbounded prefix cache could serve (None: no hashes)
        self.shared_prefix_tokens = replay.shared_tokens if replay.trace.has_hashes else None
        # per request index: its conversation (agent traces; None otherwise)
        self.conversations = replay.trace.conversations

    def finished(self, rec: RequestRecord, end_ns: int) -> bool:
        return False

    def end_offset_ns(self) -> int | None:
        """The last arrival plus one mean gap: the window then holds n arrivals in n gaps, so
        count ÷ length is the replayed rate."""
        offsets = self.replay.trace.offsets_ns
        if not len(offsets):
            return 0
        last = round(int(offsets[-1]) * self.replay.time_scale)  # as ``offsets_ns()`` scales
        return last + round(1e9 / self.replay.rate_rps)


@dataclass(slots=True)
class _Due:
    offset_ns: int
    seq: int  # ties in due order break by when the turn became known
    turn: TurnPlan
    conv: Conversation

    def __lt__(self, other: _Due) -> bool:
        return (self.offset_ns, self.seq) < (other.offset_ns, other.seq)


class SessionSource:
    """Conversations: sessions start on an open-loop schedule; each next turn is due when
    the previous answer ended plus a think time, and resends the whole history."""

    kind: str = "sessions"

    def __init__(self, planner: SessionPlanner, *, rate_unit: RateUnit = "sessions") -> None:
        self.rate_unit = rate_unit
        self._sessions = iter(planner)
        self._next_session: Conversation | None = None
        self._no_more_sessions = False
        self._due: list[_Due] = []
        self._waiting: dict[int, tuple[Conversation, TurnPlan]] = {}  # request index → turn
        self._index = itertools.count()
        self._seq = itertools.count()
        self._last_ns = 0
        self.sessions_started = 0
        self.completed: set[int] = set()  # sessions whose last turn was answered

    def _pull_session(self) -> None:
        """Put the next session's first turn on the due heap (start order = due order)."""
        if self._next_session is None and not self._no_more_sessions:
            self._next_session = next(self._sessions, None)
            self._no_more_sessions = self._next_session is None
        conv = self._next_session
        if conv is None:
            return
        due_first = self._due[0].offset_ns if self._due else None
        if due_first is None or conv.start_ns <= due_first:
            self._next_session = None
            self.sessions_started += 1
            turn = conv.first_turn()
            heapq.heappush(self._due, _Due(turn.due_ns, next(self._seq), turn, conv))

    def peek(self) -> int | None:
        self._pull_session()
        if not self._due:
            return None
        return max(self._due[0].offset_ns, self._last_ns)

    def pop(self) -> tuple[int, RequestPlan]:
        off = self.peek()
        if off is None:
            raise IndexError("pop: no turn is due")
        item = heapq.heappop(self._due)
        self._last_ns = off
        t = item.turn
        plan = RequestPlan(
            index=next(self._index),
            prompt=t.chat_messages(),
            prompt_tokens_client=t.prompt_tokens_client,
            max_tokens=t.max_tokens,
            prefix_id=t.prefix_id,
            shared_prefix_tokens=t.history_tokens_client,
        )
        self._waiting[plan.index] = (item.conv, t)
        return off, plan

    def finished(self, rec: RequestRecord, end_ns: int) -> bool:
        """Tag the record with its session and turn; an answered turn makes the next one due.
        A failed or cancelled turn ends its session (there is no answer to resend)."""
        got = self._waiting.pop(rec.request_id, None)
        if got is None:
            return False
        conv, turn = got
        rec.session_id, rec.turn = turn.session_id, turn.turn
        answer, rec.answer_text = rec.answer_text or "", None  # the record need not hold it
        if not rec.ok:
            return False
        nxt = conv.answer_ended(end_ns, answer, rec.output_tokens)
        if nxt is None:
            self.completed.add(turn.session_id)
            return False
        heapq.heappush(self._due, _Due(nxt.due_ns, next(self._seq), nxt, conv))
        return True

    @property
    def exhausted(self) -> bool:
        return self.peek() is None and not self._waiting

    def end_offset_ns(self) -> int | None:
        return None


def closed_loop_plans(
    spec: BenchSpec,
    *,
    seed: int,
    prompt_format: PromptFormat,
    references: Mapping[str, str] | None = None,
) -> Iterator[RequestPlan]:
    """The requests of a closed loop (``--concurrency``, the bench's single-stream point).

    A trace gives its rows' requests in order (repeated if the loop outlasts it); sessions
    give each session's *first turn* only (a fresh conversation: system prompt + first user
    message), since a closed loop has no think times to honour; otherwise the generator.
    """
    w = spec.workload
    if w.trace is not None:
        replay = TraceReplay.from_spec(w.trace, prompt_format=prompt_format, seed=seed)
        if not len(replay.trace.rows):
            raise SpecError(f"workload.trace.path: {w.trace.path} has no rows")
        # the trace's plans again on each pass (they are a pure function of the seed), never
        # held all at once: 10^6 rows of 2k-token prompts would be gigabytes
        passes = itertools.chain.from_iterable(replay.plans() for _ in itertools.count())
        return (dataclasses.replace(p, index=i) for i, p in enumerate(passes))
    if w.sessions is not None:
        planner = SessionPlanner(w, seed=seed, starts_ns=itertools.repeat(0))
        return (_first_turn_plan(i, conv) for i, conv in enumerate(planner))
    return graded_plans(
        iter(WorkloadGenerator(w, prompt_format=prompt_format, seed=seed)), spec, seed, references
    )


def _first_turn_plan(index: int, conv: Conversation) -> RequestPlan:
    t = conv.first_turn()
    return RequestPlan(
        index,
        t.chat_messages(),
        t.prompt_tokens_client,
        t.max_tokens,
        t.prefix_id,
        t.history_tokens_client,
    )


def make_source(
    spec: BenchSpec,
    *,
    rate_rps: float | None,
    seed: int,
    concurrency: int | None,
    prompt_format: PromptFormat,
    references: Mapping[str, str] | None = None,
) -> tuple[ScheduleSource | ClosedLoop, float | None]:
    """The schedule a probe follows and the rate it states (in the source's ``rate_unit``).

    ``concurrency`` is a closed loop for every workload kind (``closed_loop_plans`` gives
    its requests). A trace replays at ``rate_rps`` when given (the search's knob), else at its
    own rate times ``1/time_scale``; sessions take ``rate_rps`` in the spec's ``rate_unit``
    (sessions/s, or turns/s converted with the mean turns per session); otherwise
    ``make_arrivals``.
    """
    w = spec.workload
    if w.trace is not None and w.sessions is not None:
        raise SpecError(
            "workload.sessions: sessions started at a trace's times are not supported yet; "
            "drop workload.trace (sessions then start on workload.arrival)"
        )
    if concurrency is not None:
        closed = make_arrivals(w.arrival, rate_rps=None, seed=seed, concurrency=concurrency)
        assert isinstance(closed, ClosedLoop)  # a concurrency always makes a closed loop
        return closed, None
    if w.trace is not None:
        replay = TraceReplay.from_spec(w.trace, prompt_format=prompt_format, seed=seed)
        if replay.agent_path is not None and rate_rps is not None:  # sessions started /s
            return TraceSource(replay.at_session_rate(rate_rps), rate_unit="sessions"), rate_rps
        if rate_rps is not None:
            replay = replay.at_rate(rate_rps)
        return TraceSource(replay), replay.rate_rps
    if w.sessions is not None:
        if rate_rps is None:
            raise SpecError(
                "workload.sessions: give a rate (--rate) in "
                f"{w.sessions.rate_unit}/s; conversations arrive open loop"
            )
        starts = make_arrivals(
            w.arrival,
            rate_rps=session_rate_rps(rate_rps, w.sessions.rate_unit, w.sessions.turns),
            seed=seed,
        )
        assert isinstance(starts, OpenLoopSchedule)
        planner = SessionPlanner(w, seed=seed, starts_ns=starts.offsets_ns())
        return SessionSource(planner, rate_unit=w.sessions.rate_unit), rate_rps
    schedule = make_arrivals(w.arrival, rate_rps=rate_rps, seed=seed, concurrency=None)
    if isinstance(schedule, ClosedLoop):
        return schedule, None
    plans = graded_plans(
        iter(WorkloadGenerator(w, prompt_format=prompt_format, seed=seed)), spec, seed, references
    )
    return OpenLoopSource(schedule, plans), rate_rps
