"""Scale out on one machine: one seeded schedule, dealt to N worker processes.

One client process carries about 100k streamed tokens/s on one core; near that its loop reads
late, events share reads and stamps lose their precision exactly where a big node is tested.
A :class:`WorkerPool` removes that ceiling without giving up the timing guarantees:

* The coordinator draws the schedule once (:func:`draw_schedule`: arrival offsets from
  ``load.arrivals``, prompts and lengths from ``load.workload``), so the same seed gives the
  same requests at the same offsets for any N. :func:`deal` gives request k to worker k mod N.
* Each worker is a process (spawned, so no loop or lock state is inherited) with its own event
  loop (uvloop where installed) and its own ``StreamClient``, optionally pinned to one core.
  It sends each request at ``start_ns + offset_ns``, where ``start_ns`` is one instant the
  coordinator picks once every worker is ready. On one machine every process reads the same
  CLOCK_MONOTONIC (``time.perf_counter_ns``), so its stamps need no conversion.
* Finished records come back in compact batches (``load.wire``) every ``batch_interval_s``;
  the coordinator merges them by request id. A request dealt to a worker that died before
  reporting it becomes a failure (``error_kind="worker_lost"``, the exit status in the
  message): nothing dealt is lost, nothing is counted twice (a duplicate id is an error).
* Each worker's keep-up figures (``result.WorkerKeepUp``) say whether the load generator, not the
  server, was the bottleneck; :meth:`PoolResult.keep_up_problems` names the remedy.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal

import orjson

from tokenwatt.client import StreamClient
from tokenwatt.client.openai import Prompt
from tokenwatt.clock import now_ns
from tokenwatt.load.arrivals import OpenLoopSchedule
from tokenwatt.load.keepup import client_bound, keep_up_problems
from tokenwatt.load.send.base import cpu_seconds, sleep_until, stream_one
from tokenwatt.load.send.figures import worker_stats
from tokenwatt.load.wire import pack_records, unpack_records
from tokenwatt.load.workload import RequestPlan
from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp
from tokenwatt.spec.endpoint import Timeouts

__all__ = [
    "ClientConfig",
    "PoolResult",
    "ScheduledRequest",
    "WorkerPool",
    "auto_workers",
    "deal",
    "draw_schedule",
    "merge_records",
    "send_share",
]

_NS = 1_000_000_000
_LEAD_NS = 50_000_000  # the common start is this long after the last worker said ready
_TAG_READY, _TAG_BATCH, _TAG_END = b"R", b"B", b"E"


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """One request of a drawn schedule: what to send and when (ns after the common start)."""

    index: int
    offset_ns: int
    prompt: Prompt  # text, token ids or a chat history
    prompt_tokens_client: int
    max_tokens: int


def worker_count(n: int | Literal["auto"]) -> int:
    """``workers: N | auto`` as a number of processes (auto: ``auto_workers()``)."""
    count = auto_workers() if n == "auto" else n
    if count < 1:
        raise ValueError(f"workers must be >= 1 or auto, got {n}")
    return count


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Everything a worker needs to build its own ``StreamClient`` (picklable)."""

    base_url: str
    api: Literal["completions", "chat"]
    model: str
    timeouts: Timeouts
    api_key: str | None = None
    extra_body: Mapping[str, Any] | None = None
    stream_usage: bool = True
    max_connections: int = 4096
    kernel_timestamps: bool | None = None
    ignore_eos: bool = True

    @classmethod
    def from_client(cls, client: StreamClient, *, ignore_eos: bool = True) -> ClientConfig:
        """The settings of an open client, for workers that build their own copy of it."""
        return cls(
            base_url=client.base_url,
            api=client.api,
            model=client.model,
            timeouts=client.timeouts,
            api_key=client._api_key,
            extra_body=client.extra_body,
            stream_usage=client.stream_usage,
            max_connections=client.max_connections,
            ignore_eos=ignore_eos,
        )

    def make_client(self) -> StreamClient:
        return StreamClient(
            self.base_url,
            api=self.api,
            model=self.model,
            api_key=self.api_key,
            timeouts=self.timeouts,
            extra_body=self.extra_body,
            stream_usage=self.stream_usage,
            max_connections=self.max_connections,
            kernel_timestamps=self.kernel_timestamps,
        )


def draw_schedule(
    arrivals: OpenLoopSchedule, plans: Iterable[RequestPlan], count: int
) -> list[ScheduledRequest]:
    """The first ``count`` requests of a seeded run: plan k sent at arrival offset k.

    Drawn once by the coordinator; it does not depend on how many workers will send it.
    """
    out: list[ScheduledRequest] = []
    for off, plan in zip(arrivals.offsets_ns(), plans, strict=False):
        if len(out) == count:
            break
        out.append(
            ScheduledRequest(
                plan.index, off, plan.prompt, plan.prompt_tokens_client, plan.max_tokens
            )
        )
    return out


def deal(schedule: Sequence[ScheduledRequest], n: int) -> list[list[ScheduledRequest]]:
    """Request k to worker k mod n: each worker's share keeps the schedule's order and spread."""
    if n < 1:
        raise ValueError(f"workers must be >= 1, got {n}")
    return [list(schedule[i::n]) for i in range(n)]


def auto_workers() -> int:
    """``workers: auto``: one per core this process may use, leaving one for the coordinator."""
    return max(1, len(_cores()) - 1)


def pinned_core(worker: int) -> int:
    """Worker i on the (i+1)-th usable core, wrapping: the first is the coordinator's."""
    cores = _cores()
    return cores[(worker + 1) % len(cores)]


def _cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


@dataclass(slots=True)
class PoolResult:
    """A pool run: every dealt request's record (by request id) and each worker's keep-up."""

    records: list[RequestRecord]
    workers: list[WorkerKeepUp]
    start_ns: int  # the common start: request k was scheduled at start_ns + offset_ns

    def keep_up_problems(self) -> list[str]:
        return [p for w in self.workers for p in keep_up_problems(w)]

    @property
    def kept_up(self) -> bool:
        return not self.keep_up_problems()

    @property
    def client_bound(self) -> bool:
        """Some worker saturated its core: the load generator, not the server, was the limit."""
        return any(client_bound(w) for w in self.workers)


def merge_records(
    dealt: Sequence[ScheduledRequest],
    received: Iterable[RequestRecord],
    *,
    start_ns: int,
    lost_message: str,
    lost_at_ns: int,
) -> tuple[list[RequestRecord], int]:
    """One record per dealt request, by index: received ones as they are, the rest lost.

    Returns (records, lost count). A record for a request that was not dealt, or two records
    for one request, is a bug in the worker mechanism and raises ValueError.
    """
    want = {r.index: r for r in dealt}
    got: dict[int, RequestRecord] = {}
    for rec in received:
        if rec.request_id not in want:
            raise ValueError(f"record for request {rec.request_id}, which was not dealt")
        if rec.request_id in got:
            raise ValueError(f"two records for request {rec.request_id}")
        got[rec.request_id] = rec
    lost = 0
    for idx, req in want.items():
        if idx not in got:
            lost += 1
            got[idx] = lost_record(req, start_ns=start_ns, message=lost_message, at_ns=lost_at_ns)
    return [got[i] for i in sorted(got)], lost


def lost_record(req: ScheduledRequest, *, start_ns: int, message: str, at_ns: int) -> RequestRecord:
    """The failure recorded for a dealt request whose worker died before reporting it."""
    return RequestRecord(
        request_id=req.index,
        scheduled_ns=start_ns + req.offset_ns,
        prompt_tokens_client=req.prompt_tokens_client,
        max_tokens=req.max_tokens,
        status="error",
        error_kind="worker_lost",
        error_message=message,
        done_ns=at_ns,
    )


def collect_share(
    worker: int,
    dealt: Sequence[ScheduledRequest],
    received: Sequence[RequestRecord],
    *,
    start_ns: int,
    lost_message: str,
    **stats: Any,
) -> tuple[list[RequestRecord], WorkerKeepUp]:
    """One worker's merged records (lost ones as failures) and its keep-up figures: the end
    of a run for process and Ray workers alike."""
    merged, lost = merge_records(
        dealt, received, start_ns=start_ns, lost_message=lost_message, lost_at_ns=now_ns()
    )
    return merged, worker_stats(worker, received, dealt=len(dealt), lost=lost, **stats)


# ---------------------------------------------------------------------- worker process
async def send_share(
    client: StreamClient,
    requests: Sequence[ScheduledRequest],
    start_ns: int,
    *,
    ignore_eos: bool,
    sink: Callable[[bytes], None],
    interval_s: float,
) -> float:
    """Send ``requests`` at ``start_ns + offset_ns`` (this process's monotonic clock), hand
    finished records to ``sink`` as packed batches every ``interval_s``; return the process's
    busy fraction (CPU time ÷ wall time) over the run. Shared by process and Ray workers."""
    done: list[RequestRecord] = []

    def flush() -> None:
        if done:
            sink(pack_records(done))
            done.clear()

    async def one(req: ScheduledRequest, sched_ns: int) -> None:
        done.append(await stream_one(client, req, sched_ns, ignore_eos=ignore_eos))

    async def flusher() -> None:
        while True:
            await asyncio.sleep(interval_s)
            flush()

    cpu0, wall0 = cpu_seconds(), now_ns()
    loop = asyncio.get_running_loop()
    flush_task = loop.create_task(flusher())
    tasks: list[asyncio.Task[None]] = []
    for req in requests:
        t = start_ns + req.offset_ns
        await sleep_until(t)
        tasks.append(loop.create_task(one(req, t)))
    await asyncio.gather(*tasks)
    flush_task.cancel()
    flush()
    return (cpu_seconds() - cpu0) / max(1e-9, (now_ns() - wall0) / _NS)


async def _drive(
    conn: Connection, cfg: ClientConfig, requests: list[ScheduledRequest], interval_s: float
) -> None:
    """The worker's run: say ready, wait for the start, send on schedule, stream batches."""
    client = cfg.make_client()
    conn.send_bytes(_TAG_READY)
    start_ns = int(await asyncio.to_thread(conn.recv))
    busy = await send_share(
        client,
        requests,
        start_ns,
        ignore_eos=cfg.ignore_eos,
        sink=lambda b: conn.send_bytes(_TAG_BATCH + b),
        interval_s=interval_s,
    )
    await client.aclose()
    conn.send_bytes(_TAG_END + orjson.dumps({"busy_fraction": busy}))


def _worker_main(
    conn: Connection,
    cfg: ClientConfig,
    core: int | None,
    requests: list[ScheduledRequest],
    interval_s: float,
) -> None:
    run_loop(_drive(conn, cfg, requests, interval_s), core)
    conn.close()


def run_loop(main: Coroutine[Any, Any, None], core: int | None) -> None:
    """A worker process's body: pin it to ``core`` (if any), run ``main`` on a fresh loop
    (uvloop where installed)."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    loop_factory: Any = asyncio.new_event_loop
    try:
        import uvloop  # noqa: PLC0415 (optional: the standard loop works without it)

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main)


# ---------------------------------------------------------------------- coordinator
@dataclass(slots=True)
class _Handle:
    worker: int
    core: int | None
    proc: Any  # multiprocessing.Process (spawn context)
    conn: Connection
    requests: list[ScheduledRequest]
    received: list[RequestRecord] = field(default_factory=list)
    busy_fraction: float | None = None


def _read_until_end(h: _Handle) -> None:
    """(thread) Collect a worker's batches until its end message or the pipe closes."""
    while True:
        try:
            msg = h.conn.recv_bytes()
        except (EOFError, OSError):
            return
        tag, body = msg[:1], msg[1:]
        if tag == _TAG_BATCH:
            h.received.extend(unpack_records(body))
        elif tag == _TAG_END:
            h.busy_fraction = float(orjson.loads(body)["busy_fraction"])
            return


class WorkerPool:
    """N worker processes that send one schedule together (see the module doc).

    ``WorkerPool(n, client_config, pin=True)``; ``await pool.run(schedule)`` starts the
    processes, deals the schedule, waits for every request to end (or its worker to die) and
    returns a :class:`PoolResult`. ``pids`` lists the running workers' process ids.
    Workers are spawned (a fresh interpreter, nothing inherited from a running loop), so a
    script that uses the pool needs the ``if __name__ == "__main__":`` guard multiprocessing
    asks for; without it every worker fails at start and all requests come back worker_lost.
    """

    def __init__(
        self,
        n: int | Literal["auto"],
        client_config: ClientConfig,
        *,
        pin: bool = True,
        batch_interval_s: float = 0.1,
    ) -> None:
        self.n = worker_count(n)
        self.config = client_config
        self.pin = pin
        self.batch_interval_s = batch_interval_s
        self.pids: list[int] = []

    def _core(self, worker: int) -> int | None:
        """Worker i on the (i+1)-th usable core, wrapping: the first is the coordinator's."""
        return pinned_core(worker) if self.pin else None

    async def run(self, schedule: Sequence[ScheduledRequest]) -> PoolResult:
        ctx = mp.get_context("spawn")
        handles: list[_Handle] = []
        try:
            for i, share in enumerate(deal(schedule, self.n)):
                parent, child = ctx.Pipe()
                core = self._core(i)
                args = (child, self.config, core, share, self.batch_interval_s)
                proc = ctx.Process(target=_worker_main, args=args, daemon=True)
                proc.start()
                child.close()
                handles.append(_Handle(i, core, proc, parent, share))
            self.pids = [h.proc.pid for h in handles]
            start_ns = await self._start(handles)
            await asyncio.gather(*(asyncio.to_thread(_read_until_end, h) for h in handles))
            for h in handles:
                await asyncio.to_thread(h.proc.join, 10)
            return self._collect(handles, start_ns)
        finally:
            for h in handles:
                if h.proc.is_alive():
                    h.proc.kill()
                h.conn.close()
            self.pids = []

    async def _start(self, handles: list[_Handle]) -> int:
        """Wait until every worker has built its client, then send them one common start."""
        for h in handles:
            try:
                msg = await asyncio.to_thread(h.conn.recv_bytes)
            except (EOFError, OSError):
                continue  # died while starting: all its requests will count as worker_lost
            if msg != _TAG_READY:
                raise RuntimeError(f"worker {h.worker} sent {msg[:20]!r} instead of ready")
        start_ns = now_ns() + _LEAD_NS
        for h in handles:
            with contextlib.suppress(OSError):
                h.conn.send(start_ns)
        return start_ns

    def _collect(self, handles: list[_Handle], start_ns: int) -> PoolResult:
        records: list[RequestRecord] = []
        stats: list[WorkerKeepUp] = []
        for h in handles:
            code = h.proc.exitcode
            msg = (
                f"worker {h.worker} (pid {h.proc.pid}) exited with status {code} "
                "before reporting this request"
            )
            merged, st = collect_share(
                h.worker,
                h.requests,
                h.received,
                start_ns=start_ns,
                lost_message=msg,
                core=h.core,
                busy_fraction=h.busy_fraction,
                exit_code=code,
            )
            records.extend(merged)
            stats.append(st)
        records.sort(key=lambda r: r.request_id)
        return PoolResult(records, stats, start_ns)
