"""One probe: drive the endpoint at one offered load and measure a window of steady state.

Timeline (monotonic ns)::

    t0 ── warm-up ──> w0 ───────── window ─────────> w1 ── drain ──> end
          requests     requests scheduled here COUNT    load goes on until every counted
          not counted                                    request has ended (or drain_timeout)

* The window's rules are the pure ``load.window.WindowRules``. It opens ``warmup_s`` after
  the first arrival slot ``t0``. It closes at ``w1``: the
  first moment the window is at least ``min_duration_s`` long *and* holds at least
  ``min_requests`` counted requests (when the count binds, ``w1`` is the arrival time of the
  first request that would exceed it, which keeps count ÷ length an unbiased rate), or at
  ``max_duration_s``, or when ``should_stop`` says so. With ``max_requests`` the window
  instead holds exactly that many requests (``w1`` = the next arrival), unless
  ``max_duration_s`` comes first: the single-stream point is N requests, not a duration.
  A closed loop then sends no request after the window (N requests in all, past the
  warm-up): an engine's own counters then cover exactly the requests the client counted.
* A request counts when it was *scheduled* in ``[w0, w1)``. The drain keeps the offered load
  running (those requests do not count) so the last counted requests see the same load as
  the first; once all counted requests have ended the rest are cancelled. A counted request
  still running ``drain_timeout_s`` after ``w1`` is cut and recorded as ``timeout_total``.
* Every request ever sent is in ``ProbeRun.records``, failures and cancellations included;
  figures come from ``tokenwatt.metrics.latency`` over the counted ones.
* Cancelling the task that awaits ``run_probe`` (Ctrl-C under ``asyncio.run``) stops the
  probe: in-flight requests are cancelled (records with ``status='cancelled'``), the
  window ends at that moment, and ``run_probe`` *returns* the partial run with
  ``interrupted=True`` instead of raising. Callers must check ``interrupted``.
* Bounded overload: the open-loop sender never holds more than ``MAX_PENDING_SENDS`` requests
  in flight (at the cap it waits for one to end) and yields to the loop at least every
  ``_YIELD_EVERY`` sends, so memory stays bounded and Ctrl-C/SIGTERM are heard at any rate.
  A send that starts more than ``LATE_SEND_S`` after its slot is *late* (``late_sends``); a
  sender more than ``MAX_SEND_LAG_S`` behind its schedule, after at least
  ``_SATURATED_MIN_LATE`` late sends or while held at the cap, cannot offer the load asked
  for (one stall of the whole process is caught up on instead): the probe stops there,
  marked ``saturated`` (the load generator's limit, not the server's; the
  SLO judge never calls that a pass or an SLO failure). The cap and that rule belong to the
  sender (``send.base``: one rule for this process, worker processes and Ray actors);
  the probe hands each request over at its slot and stops when the sender says so.
* A broken endpoint stops the probe too: once at least ``_ERROR_STOP_MIN`` requests have
  ended and their transport/server errors (``metrics.slo.BROKEN_ENDPOINT_KINDS``) are clearly
  over ``slo.max_error_rate`` (the early stop's binomial test), the window closes there
  (``error_stopped``, and ``stopped_early``). A dead server would otherwise be hammered for
  the whole probe, thousands of refused connections a second piling up records. Stopped in
  warm-up, the window is moved to start at ``t0``: every request sent is then judged.
* The early stop may also count requests still in flight (``LateFirstTokens``): a counted
  request sent longer ago than the TTFT limit with no first token yet, and no unread byte on
  its socket, is a TTFT miss whatever comes next (``StreamClient.late_first_tokens``, asked
  through the sender at each poll). A stop decided with them marks them in their records
  (cancelled, as every request in flight at an early stop) and ``late_first_tokens_at_stop``
  says how many.
* ``on_record`` is called with every record as it ends (``requests.jsonl`` is written
  incrementally from it, so a killed run keeps what was measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tokenwatt.clock import now_ns
from tokenwatt.errors import SpecError
from tokenwatt.load.consistency import consistency_references
from tokenwatt.load.heap import frozen_heap
from tokenwatt.load.window import WindowRules
from tokenwatt.metrics.latency import ProbeMetrics, compute_probe_metrics
from tokenwatt.metrics.sequential import SequentialStop
from tokenwatt.metrics.slo import BROKEN_ENDPOINT_KINDS, clearly_failed
from tokenwatt.records import RequestPhase, RequestRecord, write_requests
from tokenwatt.result import WorkerKeepUp
from tokenwatt.send.base import (
    LATE_SEND_S,
    MAX_PENDING_SENDS,
    MAX_SEND_LAG_S,
    Sender,
    Streamer,
    sleep_until,
)
from tokenwatt.send.opening import open_sender
from tokenwatt.spec import BenchSpec, ProbeSettings
from tokenwatt.traffic.arrivals import ClosedLoop, OpenLoopSchedule
from tokenwatt.traffic.schedule import (
    OpenLoopSource,
    RateUnit,
    ScheduleSource,
    closed_loop_plans,
    make_source,
)
from tokenwatt.traffic.workload import PromptFormat, RequestPlan
from tokenwatt.traffic.workload import resolve_prompt_format as _resolve_prompt_format

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "LATE_SEND_S",
    "MAX_PENDING_SENDS",
    "MAX_SEND_LAG_S",
    "LateFirstTokens",
    "ProbeProgress",
    "ProbeRun",
    "StreamingClient",
    "run_probe",
]

_NS = 1_000_000_000
_LEAD_NS = 20_000_000  # first arrival slot this long after run_probe starts (set-up time)
_POLL_S = 0.5  # progress and should_stop cadence
_SPIN_NS = 1_500_000  # wait for a source change until this close to a send time
_YIELD_EVERY = 64  # sends between forced yields to the loop, however late the sender is
_ERROR_STOP_MIN = 20  # ended requests before a broken endpoint may stop the probe
Phase = Literal["warmup", "window", "drain"]


StreamingClient = Streamer  # what a probe needs from ``tokenwatt.client.StreamClient``
_LATE_AT_STOP = (
    "cancelled at the early stop; its first token was already past the TTFT limit, a known "
    "miss the stop counted"
)


@dataclass(frozen=True, slots=True)
class LateFirstTokens:
    """The early stop's view of requests still in flight: the sequential test ``stop`` is
    asked (``SequentialStop.should_stop_late``) with the counted requests finished so far and
    the number k of counted ones in flight whose first token is certain to come more than
    ``ttft_limit_ns`` after their send (the sender's ``late_first_tokens``: sent that long
    ago, no content yet, no unread byte). Each is a TTFT miss whatever comes next. Without
    such requests the plain ``should_stop`` decides."""

    ttft_limit_ns: int
    stop: SequentialStop

    @classmethod
    def of(cls, stop: SequentialStop | None) -> LateFirstTokens | None:
        """The rule for a sequential test (None: no test, or no TTFT limit to miss)."""
        ttft_s = stop.limits.ttft_s if stop is not None else None
        if stop is None or ttft_s is None:
            return None
        return cls(round(ttft_s * _NS), stop)


@dataclass(frozen=True, slots=True)
class ProbeProgress:
    """A snapshot for progress bars, taken about every half second."""

    phase: Phase
    elapsed_s: float  # since the first arrival slot t0
    window_elapsed_s: float  # 0 during warm-up
    min_duration_s: float
    max_duration_s: float
    min_requests: int
    max_requests: int | None
    sent: int
    finished: int
    in_flight: int
    counted: int  # requests scheduled in the window so far
    counted_finished: int
    counted_failed: int
    counted_output_tokens: int


@dataclass(slots=True)
class ProbeRun:
    """Everything one probe measured. Records are in request-id (send) order."""

    records: list[RequestRecord]
    window_start_ns: int
    window_end_ns: int
    metrics: ProbeMetrics
    rate_rps: float | None  # offered open-loop rate; None for closed loop
    concurrency: int | None  # closed-loop concurrency; None for open loop
    arrival: str  # poisson, gamma, constant or concurrency
    seed: int
    settings: ProbeSettings
    prompt_format: PromptFormat
    started_ns: int  # t0, the first arrival slot
    ended_ns: int
    interrupted: bool = False  # Ctrl-C / cancellation: partial
    stopped_early: bool = False  # should_stop ended the window
    drain_timeouts: int = 0  # counted requests cut at the drain timeout
    saturated: bool = False  # the sender fell MAX_SEND_LAG_S behind schedule: probe stopped
    error_stopped: bool = False  # endpoint errors clearly over slo.max_error_rate: stopped
    late_sends: int = 0  # sends started more than LATE_SEND_S after their slot
    max_send_lag_s: float = 0.0  # the sender's worst lag behind its schedule
    clock: dict[str, Any] | None = None  # the client's timestamp source and clock offset
    client_stats: dict[str, Any] = field(default_factory=dict)
    rate_unit: RateUnit = "requests"  # what rate_rps counts: requests, sessions or turns /s
    sessions_completed: frozenset[int] = frozenset()  # conversations with every turn answered
    workers: int = 1  # processes that sent the load (1: this one)
    keep_up: list[WorkerKeepUp] = field(default_factory=list)  # per sending process
    sender_error: str | None = None  # an exception ended the sender: an error probe
    stray_answers: int = 0  # answers nobody asked for (late or stale), connection closed
    # counted requests in flight at an early stop whose first token was known to be past the
    # TTFT limit, when the stop counted them (``LateFirstTokens``); they end cancelled
    late_first_tokens_at_stop: int = 0
    # trace replays with block hashes: per request id, the prompt tokens an unbounded prefix
    # cache could serve (``TraceReplay.shared_tokens``); None otherwise
    shared_prefix_tokens: npt.NDArray[np.int64] | None = None
    # agent trace replays: per request id, its conversation (``Trace.conversations``)
    conversations: npt.NDArray[np.int64] | None = None

    def is_counted(self, rec: RequestRecord) -> bool:
        return self.window_start_ns <= rec.scheduled_ns < self.window_end_ns

    @property
    def counted(self) -> list[RequestRecord]:
        return [r for r in self.records if self.is_counted(r)]

    def phase_of(self, rec: RequestRecord) -> RequestPhase:
        if rec.scheduled_ns < self.window_start_ns:
            return "warmup"
        return "window" if rec.scheduled_ns < self.window_end_ns else "after"

    def window_dict(self) -> dict[str, Any]:
        """The window and how it ended, for result files."""
        return {
            "started_ns": self.started_ns,
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "ended_ns": self.ended_ns,
            "window_s": (self.window_end_ns - self.window_start_ns) / _NS,
            "warmup_s": (self.window_start_ns - self.started_ns) / _NS,
            "drain_s": max(0, self.ended_ns - self.window_end_ns) / _NS,
            "interrupted": self.interrupted,
            "stopped_early": self.stopped_early,
            "drain_timeouts": self.drain_timeouts,
            "saturated": self.saturated,
            "error_stopped": self.error_stopped,
            "late_sends": self.late_sends,
            "max_send_lag_s": self.max_send_lag_s,
            "late_first_tokens_at_stop": self.late_first_tokens_at_stop,
        }

    def write_requests(self, path: str | Path) -> Path:
        """Every record as one JSON line, with its ``phase`` (``records.read_requests`` reads
        it back)."""
        return write_requests(path, ((self.phase_of(r), r) for r in self.records))


class _Probe:
    """One probe's window rules and schedule; how its requests leave is the ``sender``'s
    (``send``), so nothing here depends on processes, actors or tasks."""

    def __init__(
        self,
        *,
        spec: BenchSpec,
        client: StreamingClient,
        schedule: ScheduleSource | OpenLoopSchedule | ClosedLoop,
        plans: Iterator[RequestPlan],  # for a closed loop or a bare open-loop schedule
        settings: ProbeSettings,
        max_requests: int | None,
        on_progress: Callable[[ProbeProgress], None] | None,
        should_stop: Callable[[Sequence[RequestRecord]], bool] | None,
        on_record: Callable[[RequestRecord], None] | None = None,
        sender: Sender,
        should_close: Callable[[Sequence[RequestRecord]], bool] | None = None,
        late: LateFirstTokens | None = None,
    ) -> None:
        self.spec = spec
        self.sender = sender
        self.keep_up: list[WorkerKeepUp] = []
        self.on_record = on_record
        self.stray0 = getattr(client, "stray_answers", 0)  # the client counts over its life
        if isinstance(schedule, OpenLoopSchedule):
            schedule = OpenLoopSource(schedule, plans)
        self.schedule: ScheduleSource | ClosedLoop = schedule
        self.plans = plans
        self.settings = settings
        self.max_requests = max_requests
        self.on_progress = on_progress
        # a window of exactly max_requests is not cut short (an early stop would end it sooner)
        self.should_stop = should_stop if max_requests is None else None
        self.should_close = should_close if max_requests is None else None
        self.late = late if max_requests is None else None
        self.late_ids: set[int] = set()  # counted, in flight past the TTFT limit at the stop
        self.window = WindowRules(
            min_duration_ns=round(settings.min_duration_s * _NS),
            max_duration_ns=round(settings.max_duration_s * _NS),
            min_requests=settings.min_requests,
            max_requests=max_requests,
            closed_loop=isinstance(schedule, ClosedLoop),
        )
        self.drain_ns = round(settings.drain_timeout_s * _NS)
        self.t0 = 0
        self.drain_deadline: int | None = None
        self.records: list[RequestRecord] = []
        self.waiters: dict[int, asyncio.Future[None]] = {}  # closed-loop streams' requests
        self.counted_done: list[RequestRecord] = []
        self.counted_failed = 0
        self.counted_tokens = 0
        self.counted_ids_in_flight: set[int] = set()
        self.sent = 0
        self.stop_dispatch = False
        self.wake = asyncio.Event()
        self.source_changed = asyncio.Event()  # a finished request made a new arrival known
        self.timed_out_ids: set[int] = set()
        self.interrupted = False
        self.stopped_early = False
        self.error_stopped = False
        self.sender_error: str | None = None
        self.judged_total = 0  # ended, not cancelled (every phase)
        self.broken_total = 0  # of which transport/server errors

    # ------------------------------------------------------------------ window bookkeeping
    @property
    def w0(self) -> int:
        return self.window.w0

    @property
    def w1(self) -> int | None:
        return self.window.w1

    @property
    def count(self) -> int:
        return self.window.count

    def _closed_now(self) -> None:
        """After a window rule ran: start the drain clock the moment the window closes."""
        if self.window.w1 is not None and self.drain_deadline is None:
            self.drain_deadline = max(self.window.w1, now_ns()) + self.drain_ns
            self.wake.set()

    def _close(self, at_ns: int) -> None:
        self.window.close(at_ns)
        self._closed_now()

    def _admit(self, t_ns: int) -> bool:
        counted = self.window.admit(t_ns)
        self._closed_now()
        return counted

    def _close_on_time(self, now: int) -> None:
        self.window.on_time(now)
        self._closed_now()

    @property
    def counted_in_flight(self) -> int:
        return len(self.counted_ids_in_flight)

    def _finished(self, now: int) -> bool:
        return self.w1 is not None and now >= self.w1 and not self.counted_ids_in_flight

    # ------------------------------------------------------------------ requests
    def _begin(self, plan: RequestPlan, counted: bool) -> None:
        if counted:
            self.counted_ids_in_flight.add(plan.index)
        self.sent += 1

    def _settled_in_send_order(self) -> list[RequestRecord]:
        """The counted requests sent before the oldest counted one still in flight (request
        ids are the send order). A pass read from every finished request would read the fast
        ones first: near saturation the sequential test passed on 194 quick requests while
        the slow ones, the misses, were still running (a virtual-time probe closed that way
        judged 105 misses of 335 once they had drained). A prefix in send order is chosen
        by the schedule, not by latency."""
        if not self.counted_ids_in_flight:
            return self.counted_done
        first = min(self.counted_ids_in_flight)
        return [r for r in self.counted_done if r.request_id < first]

    def _done(self, rec: RequestRecord) -> None:
        """A request ended (any sender reports here once): the window's tallies."""
        self._report_back(rec)
        self.records.append(rec)
        if not rec.cancelled:
            self.judged_total += 1
            if rec.failed and rec.error_kind in BROKEN_ENDPOINT_KINDS:
                self.broken_total += 1
        if self.on_record is not None:
            self.on_record(rec)
        if (waiter := self.waiters.pop(rec.request_id, None)) is not None and not waiter.done():
            waiter.set_result(None)
        if rec.request_id in self.counted_ids_in_flight:
            self.counted_ids_in_flight.discard(rec.request_id)
            self.counted_done.append(rec)
            self.counted_tokens += rec.output_tokens
            if rec.failed:
                self.counted_failed += 1
            if self.w1 is not None and not self.counted_ids_in_flight:
                self.wake.set()

    # ------------------------------------------------------------------ dispatch
    def _report_back(self, rec: RequestRecord) -> None:
        """The hook where a finished request reports to its schedule (a conversation's next
        turn becomes due when this answer ended: ``done_ns``, the response complete)."""
        source = self.schedule
        if isinstance(source, ClosedLoop):
            return
        end = rec.done_ns if rec.done_ns is not None else now_ns()
        if source.finished(rec, end - self.t0):
            self.source_changed.set()

    async def _next_arrival(self, source: ScheduleSource) -> int | None:
        """Wait for the next arrival's time; None when the schedule has run out. A source whose
        arrivals depend on answers (sessions) may get an earlier one while we wait: re-peek."""
        while not self.stop_dispatch:
            off = source.peek()
            if off is None:
                if source.exhausted:
                    return None
                self.source_changed.clear()
                await self.source_changed.wait()
                continue
            t = self.t0 + off
            # a sender with a lead (workers) is handed the request ahead; it sends at t itself
            slot = t - self.sender.lead_ns
            self.source_changed.clear()
            if slot - now_ns() > _SPIN_NS:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self.source_changed.wait(), timeout=(slot - now_ns() - _SPIN_NS) / _NS
                    )
                if self.source_changed.is_set():
                    continue
            await sleep_until(slot)
            return t
        return None

    async def _open_loop(self, source: ScheduleSource) -> None:
        sent = 0
        while True:
            if self.w1 is not None and self.counted_in_flight == 0 and now_ns() >= self.w1:
                self.wake.set()  # the window has closed and nothing counted is running
                return
            t = await self._next_arrival(source)
            if t is None:
                if not self.stop_dispatch:
                    self._ran_out(source)
                return
            _, plan = source.pop()
            counted = self._admit(t)
            if self.w1 is not None and self.counted_in_flight == 0 and not counted:
                # Nothing counted is running: no load is needed to drain; wait for w1 to pass.
                await sleep_until(self.w1)
                self.wake.set()
                return
            if not await self.sender.ready(t) or self.stop_dispatch:
                return  # saturated (the sender woke the probe) or stopped
            self._begin(plan, counted)
            self.sender.send(plan, t)
            sent += 1
            if sent % _YIELD_EVERY == 0:
                await asyncio.sleep(0)  # however late: let Ctrl-C, replies and polls run

    def _ran_out(self, source: ScheduleSource) -> None:
        """A finite schedule (a trace) ended before the window closed: close it where the
        schedule's last slot ends."""
        if self.w1 is None:
            end = source.end_offset_ns()
            self._close(self.t0 + end if end is not None else now_ns())
        self.wake.set()

    async def _closed_loop_worker(self) -> None:
        await sleep_until(self.t0)
        while not self.stop_dispatch:
            t = now_ns()
            counted = self._admit(t)
            # a window of max_requests is exactly that many: once it has closed no stream sends
            # again (as `vllm bench serve --num-prompts` sends N); otherwise the drain keeps the
            # load until the counted requests end (the module doc)
            done = self.counted_in_flight == 0 or self.max_requests is not None
            if self.w1 is not None and not counted and done:
                self.wake.set()
                return
            plan = next(self.plans)
            ended = self.waiters[plan.index] = asyncio.get_running_loop().create_future()
            self._begin(plan, counted)
            self.sender.send(plan, t)
            try:
                await ended  # this stream's next request follows this one's end
            except asyncio.CancelledError:
                return

    def _endpoint_broken(self) -> bool:
        """Transport/server errors clearly over the spec's error budget (see the module doc)."""
        n, k = self.judged_total, self.broken_total
        budget = self.spec.slo.max_error_rate
        return n >= _ERROR_STOP_MIN and k > budget * n and clearly_failed(k, n, budget)

    # ------------------------------------------------------------------ the run
    def _progress(self, now: int) -> ProbeProgress:
        phase: Phase = "warmup" if now < self.w0 else ("window" if self.w1 is None else "drain")
        return ProbeProgress(
            phase=phase,
            elapsed_s=max(0, now - self.t0) / _NS,
            window_elapsed_s=max(0, min(now, self.w1 or now) - self.w0) / _NS,
            min_duration_s=self.settings.min_duration_s,
            max_duration_s=self.settings.max_duration_s,
            min_requests=self.settings.min_requests,
            max_requests=self.max_requests,
            sent=self.sent,
            finished=len(self.records),
            in_flight=self.sent - len(self.records),
            counted=self.count,
            counted_finished=len(self.counted_done),
            counted_failed=self.counted_failed,
            counted_output_tokens=self.counted_tokens,
        )

    @property
    def saturated(self) -> bool:
        return self.sender.pace.saturated

    async def run(self) -> tuple[list[RequestRecord], int, int]:
        try:
            await self.sender.start(self._done, self.wake.set)
        except BaseException:  # Ctrl-C or a broken worker while starting: none left behind
            await self.sender.finish(cancel=True)
            raise
        # a sender with a lead (workers) is handed the first request that long before its slot
        self.t0 = now_ns() + max(_LEAD_NS, self.sender.lead_ns)
        self.window.w0 = self.t0 + round(self.settings.warmup_s * _NS)
        loop = asyncio.get_running_loop()
        workers: list[asyncio.Task[None]] = []
        if isinstance(self.schedule, ClosedLoop):
            for _ in range(self.schedule.concurrency):
                workers.append(loop.create_task(self._closed_loop_worker()))
        else:
            workers.append(loop.create_task(self._open_loop(self.schedule)))
        try:
            await self._watch(workers)
        except asyncio.CancelledError:
            self.interrupted = True
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            await self._shutdown(workers)
        end = now_ns()
        w1 = self.w1 if self.w1 is not None else end
        if self.interrupted or self.stopped_early or self.saturated or self.sender_error:
            w1 = min(w1, end)
        if self.on_progress is not None:
            self.on_progress(self._progress(end))
        return self.records, w1, end

    async def _watch(self, workers: list[asyncio.Task[None]]) -> None:
        """Until the window has closed and its counted requests have ended, or a rule stops
        the probe (the module doc)."""
        last_poll = 0
        while True:
            now = now_ns()
            self._close_on_time(now)
            if now - last_poll >= _POLL_S * _NS:
                last_poll = now
                if self._poll(now):
                    return
            if self.saturated:
                self._close(max(now, self.w0))
                return
            if (failed := _sender_failure(workers)) is not None:
                self.sender_error = failed  # never a silent short window
                self._close(max(now, self.w0))
                return
            if self._finished(now):
                return
            if self.drain_deadline is not None and now >= self.drain_deadline:
                self.timed_out_ids = set(self.counted_ids_in_flight)
                return
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=_POLL_S)

    def _poll(self, now: int) -> bool:
        """Every ``_POLL_S``: progress, the early stop, a decided verdict, a broken endpoint;
        True when the probe stops here."""
        if self.on_progress is not None:
            self.on_progress(self._progress(now))
        deciding = self.w1 is None and now >= self.w0
        if deciding and self._decided_fail():
            self.stopped_early = True
            self._close(now)
            return True
        closing = self.should_close
        if deciding and closing is not None and closing(self._settled_in_send_order()):
            self._close(now)  # a decided verdict: the window ends, counted drain
        if self.w1 is None and self._endpoint_broken():
            self.error_stopped = self.stopped_early = True
            if now < self.w0:
                self.window.w0 = self.t0  # stopped in warm-up: judge all sent
            self._close(now)
            return True
        return False

    def _decided_fail(self) -> bool:
        """The early stop over the counted requests finished so far, with the counted ones
        in flight whose first token is already known to be late (``late``, where the sender
        can see its streams: ``Sender.late_first_tokens``)."""
        late = self.late
        if late is not None and self.counted_ids_in_flight:
            ids = self.counted_ids_in_flight
            known = [i for i in self.sender.late_first_tokens(late.ttft_limit_ns) if i in ids]
            if known and late.stop.should_stop_late(self.counted_done, len(known)):
                if late.stop.in_flight_misses:  # they decided it (not the finished alone)
                    self.late_ids = set(known)
                return True
        return self.should_stop is not None and self.should_stop(self.counted_done)

    async def _shutdown(self, workers: list[asyncio.Task[None]]) -> None:
        self.stop_dispatch = True
        for t in workers:
            t.cancel()
        try:
            self.keep_up = await self.sender.finish(cancel=True)
        finally:
            if workers:
                await asyncio.gather(*workers, return_exceptions=True)
        for rec in self.records:
            if rec.request_id in self.timed_out_ids and rec.cancelled:
                # cut at the drain timeout: the server did not finish it in time, a failure
                rec.status, rec.error_kind = "error", "timeout_total"
                rec.error_message = (
                    f"still running drain_timeout_s={self.settings.drain_timeout_s:g} s "
                    "after the window closed"
                )
            elif rec.request_id in self.late_ids and rec.cancelled:
                # cancelled as every request in flight at the early stop; it says which of
                # them the decision counted as known TTFT misses
                rec.error_message = _LATE_AT_STOP


def _sender_failure(workers: list[asyncio.Task[None]]) -> str | None:
    """The first exception a sending task ended on, as one line (None: all running or done)."""
    for task in workers:
        if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
            return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def _client_facts(client: StreamingClient) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The client's clock facts and connection counts, where it has them."""
    clock = getattr(client, "clock", None)
    clock_dict = clock.to_dict() if clock is not None and hasattr(clock, "to_dict") else None
    stats = {
        k: getattr(client, k)
        for k in ("connections_opened", "connections_reused")
        if isinstance(getattr(client, k, None), int)
    }
    return clock_dict, stats


async def run_probe(
    spec: BenchSpec,
    client: StreamingClient,
    *,
    rate_rps: float | None,
    seed: int,
    settings: ProbeSettings | None = None,
    max_requests: int | None = None,
    concurrency: int | None = None,
    on_progress: Callable[[ProbeProgress], None] | None = None,
    should_stop: Callable[[Sequence[RequestRecord]], bool] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    should_close: Callable[[Sequence[RequestRecord]], bool] | None = None,
    late: LateFirstTokens | None = None,
) -> ProbeRun:
    """Run one probe at ``rate_rps`` (open loop, the spec's arrival process) or closed loop
    (``concurrency``, or ``rate_rps=None`` with a concurrency arrival in the spec).

    ``seed`` fixes both the arrival schedule and the requests; ``settings`` defaults to
    ``spec.search.probe``; ``max_requests`` makes the window exactly that many requests (or
    ``max_duration_s``), replacing ``min_duration_s``/``min_requests`` (the single-stream point
    is ``concurrency=1, max_requests=N``). ``should_stop`` is called about every 0.5 s with the
    counted requests finished so far; True ends the window there (``stopped_early``).
    ``should_close`` likewise, but True closes the window as its length rules would: the
    counted requests drain and are all judged (a sequential verdict decided a pass). Neither
    applies with ``max_requests``: that window counts exactly N requests. ``on_record`` sees
    every record as it ends (for incremental writing). ``late`` lets the early stop count
    counted requests in flight whose first token is already past the TTFT limit
    (``LateFirstTokens``; not with ``max_requests`` either).
    """
    settings = settings or spec.search.probe
    _check_args(rate_rps, max_requests)
    prompt_format = _resolve_prompt_format(spec)
    refs = await consistency_references(spec, client)  # alone, before any load (graded:)
    schedule, stated_rate = make_source(
        spec, rate_rps=rate_rps, seed=seed, concurrency=concurrency, prompt_format=prompt_format,
        references=refs,
    )  # fmt: skip
    probe = _Probe(
        spec=spec,
        client=client,
        schedule=schedule,
        # an open-loop source carries its own requests
        plans=closed_loop_plans(spec, seed=seed, prompt_format=prompt_format, references=refs)
        if isinstance(schedule, ClosedLoop)
        else iter(()),
        settings=settings,
        max_requests=max_requests,
        on_progress=on_progress,
        should_stop=should_stop,
        on_record=on_record,
        sender=open_sender(spec, client, schedule, settings),
        should_close=should_close,
        late=late,
    )
    with frozen_heap():  # no full collection pauses the sender (load.heap)
        records, w1, end = await probe.run()
    records.sort(key=lambda r: r.request_id)
    return _probe_run(
        probe, records, w1, end, schedule=schedule, stated_rate=stated_rate, spec=spec,
        client=client, seed=seed, settings=settings, prompt_format=prompt_format,
    )  # fmt: skip


def _probe_run(
    probe: _Probe,
    records: list[RequestRecord],
    w1: int,
    end: int,
    *,
    schedule: ScheduleSource | ClosedLoop,
    stated_rate: float | None,
    spec: BenchSpec,
    client: StreamingClient,
    seed: int,
    settings: ProbeSettings,
    prompt_format: PromptFormat,
) -> ProbeRun:
    """What a finished probe measured: its records, window and figures."""
    closed = isinstance(schedule, ClosedLoop)
    # a requests/s target only where the rate counts requests (not sessions or turns)
    counts_requests = not isinstance(schedule, ClosedLoop) and schedule.rate_unit == "requests"
    metrics = compute_probe_metrics(
        records,
        window_start_ns=probe.w0,
        window_end_ns=w1,
        slo=spec.slo,
        target_rate_rps=stated_rate if counts_requests else None,
    )
    clock_dict, stats = _client_facts(client)
    return ProbeRun(
        records=records,
        window_start_ns=probe.w0,
        window_end_ns=w1,
        metrics=metrics,
        rate_rps=None if closed else stated_rate,
        concurrency=schedule.concurrency if isinstance(schedule, ClosedLoop) else None,
        arrival="concurrency" if isinstance(schedule, ClosedLoop) else schedule.kind,
        rate_unit="requests" if isinstance(schedule, ClosedLoop) else schedule.rate_unit,
        sessions_completed=frozenset(getattr(schedule, "completed", ())),
        shared_prefix_tokens=getattr(schedule, "shared_prefix_tokens", None),
        conversations=getattr(schedule, "conversations", None),
        seed=seed,
        settings=settings,
        prompt_format=prompt_format,
        started_ns=probe.t0,
        ended_ns=end,
        interrupted=probe.interrupted,
        stopped_early=probe.stopped_early,
        drain_timeouts=sum(1 for r in records if r.request_id in probe.timed_out_ids),
        saturated=probe.saturated,
        error_stopped=probe.error_stopped,
        sender_error=probe.sender_error,
        stray_answers=getattr(client, "stray_answers", 0) - probe.stray0,
        late_first_tokens_at_stop=len(probe.late_ids) if probe.stopped_early else 0,
        late_sends=probe.sender.pace.late_sends,
        max_send_lag_s=max(0, probe.sender.pace.max_lag_ns) / _NS,
        clock=clock_dict,
        client_stats=stats,
        workers=probe.sender.n,
        keep_up=probe.keep_up,
    )


def _check_args(rate_rps: float | None, max_requests: int | None) -> None:
    """Refuse a probe whose rate or request count cannot describe a run."""
    if max_requests is not None and max_requests < 1:
        raise ValueError("max_requests must be >= 1")
    if rate_rps is not None and not (math.isfinite(rate_rps) and rate_rps > 0):
        raise SpecError(f"rate must be a positive number of requests/s, got {rate_rps}")
