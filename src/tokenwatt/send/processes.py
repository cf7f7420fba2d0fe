"""Worker processes fed live by a probe: the probe keeps its window, the workers send.

A probe cannot know its schedule in advance: its window closes on time, count, an early stop
or a saturated sender, and its drain lasts until the counted requests have ended. So
:class:`LivePool`
keeps the probe's own loop (``load.probe``) as the one place where those rules run, and
only moves the *sending* out of the process:

* The probe draws request k exactly as with one process (same seed, same schedule) and
  deals it ``LEAD_NS`` before its slot to worker k mod N (:meth:`LivePool.submit`). The
  slot is an absolute CLOCK_MONOTONIC time: on one machine every process reads the same
  clock, so the worker sends at that very instant and its stamps need no conversion.
* Each worker (its own process, event loop and ``StreamClient``, optionally pinned to a
  core) sleeps until the slot, sends, and returns finished records in compact batches
  (``send.wire``) every ``interval_s``, with its sender figures: late sends, its current
  and worst lag. They join the coordinator's own in the pool's ``Pace``
  (``send.base``): the same saturation rule as in-process.
* :meth:`LivePool.finish` ends the run: ``cancel=True`` (the probe is done) cancels what is
  in flight, whose records come back ``cancelled`` with the chunks received so far; requests
  whose slot had not come are reported unsent and dropped, exactly as an in-process sender
  never sends a slot after its stop. A worker that dies turns every request dealt to it and
  not yet reported into a failure (``error_kind="worker_lost"``, exit status in the
  message) the moment its pipe closes, so the probe does not wait on them.

The coordinator's half that does not depend on how a worker is reached (dealing k mod N, the
figures, records reported once, lost requests as failures, the keep-up figures) is
:class:`LiveDealer`, a ``send.base.Sender``; the sending half is :class:`SlotSender`.
``send.ray_actors`` uses both for Ray actors; only the transport differs (a pipe here,
actor calls there).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import signal
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Generic, Literal, TypeVar

import orjson

from tokenwatt.client import StreamClient
from tokenwatt.clock import now_ns
from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp
from tokenwatt.send.base import (
    Sendable,
    SenderBase,
    SenderFigures,
    cpu_seconds,
    sleep_until,
    stream_one,
)
from tokenwatt.send.figures import worker_stats
from tokenwatt.send.wire import pack_records, unpack_records
from tokenwatt.send.workers import (
    ClientConfig,
    ScheduledRequest,
    lost_record,
    pinned_core,
    run_loop,
    worker_count,
)

__all__ = ["FINISH_S", "LEAD_NS", "LiveDealer", "LivePool", "Share", "SlotSender", "fields"]

_NS = 1_000_000_000
LEAD_NS = 100_000_000  # a request is dealt this long before its slot
FINISH_S = 30.0  # after a stop, the longest wait for a worker's last records
_READY, _BATCH, _FIGS, _END = b"R", b"B", b"L", b"E"


# ---------------------------------------------------------------------- worker side
@dataclass(slots=True)
class SlotSender:
    """A worker's sending half: each request sent at its slot (this worker's clock), finished
    records kept for the next :meth:`take`; used by worker processes and Ray actors alike."""

    client: StreamClient
    ignore_eos: bool
    late_ns: int
    figs: SenderFigures = field(default_factory=SenderFigures)
    done: list[RequestRecord] = field(default_factory=list)
    tasks: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    launched: set[int] = field(default_factory=set)
    sent: set[int] = field(default_factory=set)
    cpu0: float = field(default_factory=cpu_seconds)
    wall0: int = field(default_factory=now_ns)

    async def one(self, req: ScheduledRequest) -> None:
        t = req.offset_ns
        rec = RequestRecord(
            request_id=req.index,
            scheduled_ns=t,
            prompt_tokens_client=req.prompt_tokens_client,
            max_tokens=req.max_tokens,
        )
        await sleep_until(t)  # cancelled here (or before): never sent, reported unsent
        self.sent.add(req.index)
        lag = now_ns() - t
        self.figs.lag_ns = lag
        self.figs.max_lag_ns = max(self.figs.max_lag_ns, lag)
        self.figs.late_sends += lag > self.late_ns
        try:
            rec = await stream_one(self.client, req, t, ignore_eos=self.ignore_eos, record=rec)
        except asyncio.CancelledError:
            rec.status, rec.error_kind = "cancelled", "cancelled"
            rec.error_message = rec.error_message or "cancelled"
            rec.done_ns = rec.done_ns or now_ns()
            self.done.append(rec)
            raise
        except Exception as exc:  # a client bug must not lose the request: a failure
            rec.status, rec.error_kind = "error", "protocol"
            rec.error_message = f"client raised {type(exc).__name__}: {exc}"
            rec.done_ns = now_ns()
        self.done.append(rec)

    def launch(self, req: ScheduledRequest) -> None:
        task = asyncio.get_running_loop().create_task(self.one(req))
        self.tasks[req.index] = task
        self.launched.add(req.index)
        task.add_done_callback(lambda _t: self.tasks.pop(req.index, None))

    def take(self) -> tuple[bytes, list[int]]:
        """The records finished since the last take (packed, ``b""``: none) and the figures."""
        packed = pack_records(self.done) if self.done else b""
        self.done.clear()
        f = self.figs
        return packed, [f.late_sends, f.lag_ns, f.max_lag_ns]

    async def stop(self, *, cancel: bool) -> None:
        """Wait for what is in flight to end (``cancel``: cancel it first)."""
        pending = list(self.tasks.values())
        if cancel:
            for t in pending:
                t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> dict[str, Any]:
        """Close the client; the end message: busy fraction and the requests never sent."""
        busy = (cpu_seconds() - self.cpu0) / max(1e-9, (now_ns() - self.wall0) / _NS)
        await self.client.aclose()
        return {"busy_fraction": busy, "unsent": sorted(self.launched - self.sent)}


def _inbox_reader(conn: Connection, loop: asyncio.AbstractEventLoop, q: asyncio.Queue[Any]) -> None:
    """(thread) Hand every coordinator message to the loop; a closed pipe means stop."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = ("S", None)
        loop.call_soon_threadsafe(q.put_nowait, msg)
        if msg[0] in ("S", "D"):
            return


async def _live_drive(conn: Connection, cfg: ClientConfig, late_ns: int, interval_s: float) -> None:
    s = SlotSender(cfg.make_client(), cfg.ignore_eos, late_ns)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    threading.Thread(target=_inbox_reader, args=(conn, loop, inbox), daemon=True).start()

    def flush() -> None:
        packed, figs = s.take()
        if packed:
            conn.send_bytes(_BATCH + packed)
        conn.send_bytes(_FIGS + orjson.dumps(figs))

    async def flusher() -> None:
        while True:
            await asyncio.sleep(interval_s)
            flush()

    conn.send_bytes(_READY)
    flush_task = loop.create_task(flusher())
    while True:
        tag, body = await inbox.get()
        if tag == "Q":
            s.launch(ScheduledRequest(*body))
            continue
        await s.stop(cancel=tag == "S")
        break
    flush_task.cancel()
    flush()
    conn.send_bytes(_END + orjson.dumps(await s.close()))


def _live_main(
    conn: Connection, cfg: ClientConfig, core: int | None, late_ns: int, interval_s: float
) -> None:
    # Ctrl-C reaches the whole process group: the probe decides how the run ends and tells
    # the worker (stop: in-flight requests end as cancelled); a closed pipe stops it too.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    run_loop(_live_drive(conn, cfg, late_ns, interval_s), core)
    conn.close()


# ---------------------------------------------------------------------- coordinator side
@dataclass(slots=True, kw_only=True)
class Share:
    """The coordinator's view of one worker: what it was dealt and what came back."""

    worker: int
    dealt: dict[int, ScheduledRequest] = field(default_factory=dict)
    reported: list[RequestRecord] = field(default_factory=list)
    figs: SenderFigures = field(default_factory=SenderFigures)
    busy_fraction: float | None = None
    lost: int = 0
    gone: bool = False  # it sends nothing more


H = TypeVar("H", bound=Share)


class LiveDealer(SenderBase, Generic[H]):
    """What every live pool does the same way, whatever carries its messages: a
    ``send.base.Sender`` that deals request k to worker k mod N.

    A subclass fills ``handles`` in ``_open``, sends one request in :meth:`_send` (False: the
    worker is unreachable), names a lost worker in :meth:`_lost_message` and ends in
    ``finish``. ``lead_ns`` is how long before its slot the probe deals a request.
    """

    lead_ns: int = LEAD_NS

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.handles: list[H] = []
        self._next = 0

    def _send(self, h: H, req: ScheduledRequest) -> bool:
        raise NotImplementedError

    def _lost_message(self, h: H) -> str:
        raise NotImplementedError

    def _dispatch(self, plan: Sendable, slot_ns: int) -> None:
        """Deal the request to a worker, which sends it at ``slot_ns`` itself."""
        self.submit(
            ScheduledRequest(
                plan.index, slot_ns, plan.prompt, plan.prompt_tokens_client, plan.max_tokens
            )
        )

    def submit(self, req: ScheduledRequest) -> None:
        """Deal one request (``offset_ns`` = its absolute monotonic slot) to the next worker."""
        h = self.handles[self._next % self.n]
        self._next += 1
        h.dealt[req.index] = req
        if not h.gone and self._send(h, req):
            return
        self._lose(h, set())  # a dead worker: the request fails as worker_lost

    @property
    def figures(self) -> SenderFigures:
        """All workers' sender figures together: late sends summed, lags the worst."""
        hs = self.handles
        return SenderFigures(
            late_sends=sum(h.figs.late_sends for h in hs),
            lag_ns=max((h.figs.lag_ns for h in hs), default=0),
            max_lag_ns=max((h.figs.max_lag_ns for h in hs), default=0),
        )

    def _set_figures(self, h: H, figs: list[int]) -> None:
        h.figs = SenderFigures(*figs)
        self._reported(self.figures)

    def _got(self, h: H, recs: list[RequestRecord]) -> None:
        for r in recs:
            if h.dealt.pop(r.request_id, None) is None:
                raise RuntimeError(f"worker {h.worker} reported request {r.request_id} twice")
            h.reported.append(r)
            self._record(r)

    def _lose(self, h: H, unsent: set[int]) -> None:
        """The worker is gone: drop what it never sent, fail what it never reported."""
        h.gone = True
        for idx in unsent:
            h.dealt.pop(idx, None)
        if not h.dealt:
            return
        msg, at = self._lost_message(h), now_ns()
        for req in list(h.dealt.values()):
            h.lost += 1
            self._record(lost_record(req, start_ns=0, message=msg, at_ns=at))
        h.dealt.clear()

    def _stats(self, h: H, **extra: Any) -> WorkerKeepUp:
        """One worker's keep-up over the records it reported (``extra``: ``worker_stats``)."""
        dealt = len(h.reported) + h.lost
        return worker_stats(
            h.worker, h.reported, dealt=dealt, lost=h.lost, busy_fraction=h.busy_fraction, **extra
        )


@dataclass(slots=True, kw_only=True)
class _Live(Share):
    core: int | None
    proc: Any  # multiprocessing.Process (spawn context)
    conn: Connection
    reader: asyncio.Future[None] | None = None


class LivePool(LiveDealer[_Live]):
    """N worker processes that send what a probe deals them (see the module doc)."""

    def __init__(
        self,
        n: int | Literal["auto"],
        client_config: ClientConfig,
        *,
        pin: bool = True,
        interval_s: float = 0.05,
        late_send_s: float = 0.05,
    ) -> None:
        super().__init__(worker_count(n))
        self.config = client_config
        self.pin = pin
        self.interval_s = interval_s
        self.late_ns = round(late_send_s * _NS)

    @property
    def pids(self) -> list[int]:
        return [h.proc.pid for h in self.handles]

    async def _open(self) -> None:
        """Spawn the workers and wait until each has built its client (or died trying)."""
        ctx = mp.get_context("spawn")
        loop = asyncio.get_running_loop()
        for i in range(self.n):
            parent, child = ctx.Pipe()
            core = pinned_core(i) if self.pin else None
            args = (child, self.config, core, self.late_ns, self.interval_s)
            proc = ctx.Process(target=_live_main, args=args, daemon=True)
            proc.start()
            child.close()
            self.handles.append(_Live(worker=i, core=core, proc=proc, conn=parent))
        for h in self.handles:
            with contextlib.suppress(EOFError, OSError):
                msg = await asyncio.to_thread(h.conn.recv_bytes)
                if msg != _READY:
                    raise RuntimeError(f"worker {h.worker} sent {msg[:20]!r} instead of ready")
            h.reader = loop.run_in_executor(None, self._read, h, loop)

    def _send(self, h: _Live, req: ScheduledRequest) -> bool:
        try:
            h.conn.send(("Q", fields(req)))
        except OSError:
            return False
        return True

    def _lost_message(self, h: _Live) -> str:
        return (
            f"worker {h.worker} ({_exit_cause(h) or f'pid {h.proc.pid}'}) ended "
            "before reporting this request"
        )

    def _read(self, h: _Live, loop: asyncio.AbstractEventLoop) -> None:
        """(thread) A worker's batches and figures until its end message or its death."""
        while True:
            try:
                msg = h.conn.recv_bytes()
            except (EOFError, OSError):
                h.proc.join(5)
                loop.call_soon_threadsafe(self._lose, h, set[int]())
                return
            tag, body = msg[:1], msg[1:]
            if tag == _BATCH:
                loop.call_soon_threadsafe(self._got, h, unpack_records(body))
            elif tag == _FIGS:
                loop.call_soon_threadsafe(self._set_figures, h, orjson.loads(body))
            elif tag == _END:
                end = orjson.loads(body)
                h.busy_fraction = float(end["busy_fraction"])
                loop.call_soon_threadsafe(self._lose, h, set(end["unsent"]))
                return

    async def finish(self, *, cancel: bool) -> list[WorkerKeepUp]:
        """End the run (``cancel``: stop what is in flight) and return each worker's keep-up."""
        for h in self.handles:
            with contextlib.suppress(OSError):
                h.conn.send(("S" if cancel else "D", None))
        readers = [h.reader for h in self.handles if h.reader is not None]
        try:
            # a stop ends every stream at once; a worker still silent after this is stuck:
            # it is killed, and what it never reported becomes worker_lost
            if readers:
                await asyncio.wait(readers, timeout=FINISH_S if cancel else None)
            for h in self.handles:
                if h.proc.is_alive() and (h.reader is None or not h.reader.done()):
                    h.proc.kill()
            await asyncio.gather(*readers)
            for h in self.handles:
                await asyncio.to_thread(h.proc.join, 10)
        finally:
            for h in self.handles:
                if h.proc.is_alive():
                    h.proc.kill()
                h.conn.close()
        return [
            self._stats(h, core=h.core, exit_code=h.proc.exitcode, cause=_exit_cause(h))
            for h in self.handles
        ]


def _exit_cause(h: _Live) -> str | None:
    """Why a worker process ended early (None: it ended normally, everything reported)."""
    code = h.proc.exitcode
    if code == 0 and not h.lost:
        return None
    if code is None:
        return f"pid {h.proc.pid}: its pipe closed"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"pid {h.proc.pid} killed by {signal.Signals(-code).name}"
    return f"pid {h.proc.pid} exited with status {code}"


def fields(req: ScheduledRequest) -> tuple[Any, ...]:
    return (req.index, req.offset_ns, req.prompt, req.prompt_tokens_client, req.max_tokens)
