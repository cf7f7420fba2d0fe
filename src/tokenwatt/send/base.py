"""The sender seam: how a probe's requests leave the machine, and whether they left on time.

A probe (``load.probe``) owns the window rules and the schedule: it decides *which* request
goes *when*. A :class:`Sender` sends it, in one of three ways (``send.local``: asyncio
tasks in this process; ``send.processes``: worker processes; ``send.ray_actors``:
Ray actors), and reports every finished record back. The probe talks to all three through
the same five calls, so it has no branch on how requests are sent:

* :meth:`Sender.start` (records and a wake-up go back through two callbacks),
* :meth:`Sender.ready` then :meth:`Sender.send` (a request at its slot; ``lead_ns`` says how
  long before its slot the probe hands it over),
* :meth:`Sender.in_flight` (and :meth:`Sender.late_first_tokens`: which of them are known
  TTFT misses already, where the sender can see its streams),
* :attr:`Sender.pace` (the keep-up: late sends, the worst lag, saturated),
* :meth:`Sender.finish` (each sending process's keep-up, ``result.WorkerKeepUp``).

The saturation rule is written once, in :class:`Pace`: a sender more than ``MAX_SEND_LAG_S``
behind its schedule, after at least ``_SATURATED_MIN_LATE`` late sends or while held at the
``MAX_PENDING_SENDS`` cap, cannot offer the load asked for (one stall of the whole process is
caught up on instead). The coordinator's own lag (checked as it hands a request over) and the
workers' reported lag (their own clocks of the same slots) go through the same rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tokenwatt.client.openai import Prompt
from tokenwatt.clock import now_ns
from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp
from tokenwatt.traffic.graded import GradedTask, grade

__all__ = [
    "LATE_SEND_S",
    "MAX_PENDING_SENDS",
    "MAX_SEND_LAG_S",
    "Pace",
    "Sendable",
    "Sender",
    "SenderBase",
    "SenderFigures",
    "Streamer",
    "cpu_seconds",
    "sleep_until",
    "stream_one",
]

_NS = 1_000_000_000
_SPIN_NS = 1_500_000  # sleep until this close to a send time, then yield-spin to it
# The most requests in flight at once. Far above any engine's running batch (vLLM's
# max_num_seqs is 256-1024 per replica), low enough that 8192 tasks, records and prompts
# stay within tens of MB. At the cap the sender waits, and its sends turn late.
MAX_PENDING_SENDS = 8192
LATE_SEND_S = 0.05  # a send this long after its slot is late (asyncio jitter is ~1 ms)
MAX_SEND_LAG_S = 1.0  # a sender this far behind schedule is saturated: the probe stops
_SATURATED_MIN_LATE = 20  # late sends before a lag past MAX_SEND_LAG_S means saturation
_ROOM_WAIT_S = 0.05  # at the cap, how often the wait for room looks again


class Sendable(Protocol):
    """A request to send: a ``ScheduledRequest`` or a probe's ``RequestPlan``."""

    @property
    def index(self) -> int: ...
    @property
    def prompt(self) -> Prompt: ...
    @property
    def prompt_tokens_client(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...


class Streamer(Protocol):
    """What a sender needs of ``tokenwatt.client.StreamClient``."""

    async def stream(
        self,
        *,
        request_id: int,
        scheduled_ns: int,
        prompt: Prompt,
        max_tokens: int,
        prompt_tokens_client: int,
        ignore_eos: bool = True,
        record: RequestRecord | None = None,
        graded: bool = False,
    ) -> RequestRecord: ...


async def stream_one(
    client: Streamer,
    req: Sendable,
    sched_ns: int,
    *,
    ignore_eos: bool,
    record: RequestRecord | None = None,
) -> RequestRecord:
    """Send ``req`` (scheduled at ``sched_ns``) and stream its answer into ``record``: the one
    send call of every sender (in-process probe, live and fixed-schedule workers). A request
    carrying a graded task (``traffic.graded``) goes greedy and free to stop, and its answer is
    graded here once the stream has ended; its text is not kept."""
    task: GradedTask | None = getattr(req, "task", None)
    if task is not None and record is not None:
        record.task = task.kind  # labelled before the send: a cancelled stream stays graded
    rec = await client.stream(
        request_id=req.index,
        scheduled_ns=sched_ns,
        prompt=req.prompt,
        max_tokens=req.max_tokens,
        prompt_tokens_client=req.prompt_tokens_client,
        ignore_eos=ignore_eos and task is None,
        record=record,
        graded=task is not None,
    )
    if task is not None:
        rec.task = task.kind
        if rec.ok and rec.answer_text is not None:
            rec.correct = grade(task, rec.answer_text)
        rec.answer_text = None
    return rec


async def sleep_until(t_ns: int) -> None:
    """Sleep until monotonic ``t_ns``: a coarse sleep to within ``_SPIN_NS``, then yields.

    The one send-timing rule of every sender (in-process probe, process and Ray workers)."""
    while True:
        d = t_ns - now_ns()
        if d <= 0:
            return
        if d > _SPIN_NS:
            await asyncio.sleep((d - _SPIN_NS + 500_000) / _NS)
        else:
            await asyncio.sleep(0)


def cpu_seconds() -> float:
    """CPU time (user + system) this process has used, s: a sender's busy fraction."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass(slots=True)
class SenderFigures:
    """One worker's sender so far, as it reports them: what the saturation rule reads."""

    late_sends: int = 0
    lag_ns: int = 0  # lag of its latest send
    max_lag_ns: int = 0


@dataclass(slots=True)
class Pace:
    """A sender's keep-up over one probe and the one saturation rule (the module doc)."""

    own_late: int = 0  # late hand-overs of this process (it sends, or deals to workers)
    remote_late: int = 0  # the workers' late sends, as they last reported them
    max_lag_ns: int = 0  # the worst lag behind the schedule, any process
    saturated: bool = False

    @property
    def late_sends(self) -> int:
        return self.own_late + self.remote_late

    def behind(self, lag_ns: int, *, at_cap: bool = False) -> bool:
        """Note a lag; True (and ``saturated``) once the sender cannot offer the load: more
        than ``MAX_SEND_LAG_S`` behind after ``_SATURATED_MIN_LATE`` late sends or at the cap
        (one stall of the whole process, a GC pause or a busy machine, is caught up on)."""
        self.max_lag_ns = max(self.max_lag_ns, lag_ns)
        if lag_ns > MAX_SEND_LAG_S * _NS and (at_cap or self.late_sends >= _SATURATED_MIN_LATE):
            self.saturated = True
        return self.saturated

    def handed_over(self, lag_ns: int) -> None:
        """A request left this process ``lag_ns`` after its slot (late past ``LATE_SEND_S``)."""
        if lag_ns > LATE_SEND_S * _NS:
            self.own_late += 1

    def reported(self, figs: SenderFigures) -> bool:
        """The workers' own figures (their clocks of the same slots), under the same rule."""
        self.remote_late = figs.late_sends
        self.max_lag_ns = max(self.max_lag_ns, figs.max_lag_ns)
        return self.behind(figs.lag_ns)


class Sender(Protocol):
    """How a probe's requests are sent (the module doc)."""

    n: int  # sending processes (1: this one)
    lead_ns: int  # a request is handed over this long before its slot
    pace: Pace

    async def start(
        self, on_record: Callable[[RequestRecord], None], on_change: Callable[[], None]
    ) -> None:
        """Ready to send: ``on_record`` gets every finished record once, ``on_change`` is
        called when the sender saturates."""

    async def ready(self, slot_ns: int) -> bool:
        """Wait for room under ``MAX_PENDING_SENDS``; False: saturated, send nothing more."""

    def send(self, plan: Sendable, slot_ns: int) -> None:
        """Send ``plan`` at its slot (absolute monotonic ns on this process's clock)."""

    def in_flight(self) -> int:
        """Requests handed over and not yet reported."""

    def late_first_tokens(self, limit_ns: int) -> list[int]:
        """Requests in flight whose first token is certain to come more than ``limit_ns``
        after their send (``StreamClient.late_first_tokens``); empty where the sender cannot
        see its streams (worker processes, Ray actors: their streams live elsewhere)."""

    async def finish(self, *, cancel: bool) -> list[WorkerKeepUp]:
        """End the run (``cancel``: in-flight requests end cancelled); each sender's keep-up."""


class SenderBase:
    """What every sender does the same way: the requests in flight, the wait for room under
    the cap, the pace. A subclass sends in :meth:`_dispatch` and reports through
    :meth:`_record`; :meth:`_open` and :meth:`finish` start and end it."""

    n: int = 1
    lead_ns: int = 0

    def __init__(self) -> None:
        self.pace = Pace()
        self._pending: set[int] = set()
        self._room = asyncio.Event()
        self._on_record: Callable[[RequestRecord], None] = lambda _r: None
        self._on_change: Callable[[], None] = lambda: None

    async def start(
        self, on_record: Callable[[RequestRecord], None], on_change: Callable[[], None]
    ) -> None:
        self._on_record, self._on_change = on_record, on_change
        await self._open()

    async def _open(self) -> None:
        raise NotImplementedError

    async def finish(self, *, cancel: bool) -> list[WorkerKeepUp]:
        raise NotImplementedError

    def _dispatch(self, plan: Sendable, slot_ns: int) -> None:
        raise NotImplementedError

    def in_flight(self) -> int:
        return len(self._pending)

    def late_first_tokens(self, limit_ns: int) -> list[int]:
        return []  # streams in other processes: not seen here (the Sender doc)

    async def ready(self, slot_ns: int) -> bool:
        while True:
            lag = now_ns() - slot_ns
            at_cap = self.in_flight() >= MAX_PENDING_SENDS
            if self.pace.behind(lag, at_cap=at_cap):
                self._on_change()
                return False
            if not at_cap:
                break
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), timeout=_ROOM_WAIT_S)
        self.pace.handed_over(lag)
        return True

    def send(self, plan: Sendable, slot_ns: int) -> None:
        self._pending.add(plan.index)
        self._dispatch(plan, slot_ns)

    def _record(self, rec: RequestRecord) -> None:
        """A request ended (or was lost): room for another, and the record to the probe."""
        if rec.error_kind == "cancelled":
            # The client ended it, not the server: its own kind, not a failure.
            rec.status = "cancelled"
        self._pending.discard(rec.request_id)
        self._room.set()
        self._on_record(rec)

    def _reported(self, figs: SenderFigures) -> None:
        """The workers' figures arrived: the saturation rule, and the probe woken on it."""
        if self.pace.reported(figs):
            self._on_change()
