"""Workers as Ray actors across a cluster's nodes (optional extra: ``tokenwatt[ray]``).

The same engine as ``load.workers`` (one schedule drawn once, dealt k mod N, compact record
batches, lost requests as ``worker_lost`` failures), with actors instead of local processes:
``RayWorkerPool(n, client_config, address=None|"auto"|ADDRESS)``, one actor per CPU asked for,
spread over the cluster's nodes (``scheduling_strategy="SPREAD"``).

Clocks. Every node times on its own monotonic clock, and two hosts' monotonic clocks share
neither origin nor, exactly, rate. Durations inside one request (TTFT, ITL, E2E) are taken on
one node and need no conversion. To place the schedule and the window, the coordinator measures
each actor's clock offset by exchange (Cristian): it reads its own monotonic clock before and
after asking the actor for its monotonic clock; the actor's reading belongs somewhere in that
round trip, so offset = actor − midpoint with uncertainty ± half the round trip (the smallest of
several exchanges is kept). The actor is told to start at coordinator start + offset, and every
stamp of its records is shifted back by the offset, so all records land on the coordinator's
clock; ``RayPoolResult.offsets`` reports each offset and its uncertainty. On one machine the true
offset is 0, which the tests use as the independent truth. An exchange over monotonic clocks
needs no wall-clock agreement (NTP steps do not move it); drift between hosts over a probe is not
corrected (crystal drift is parts per million: microseconds per minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenwatt.client import StreamClient
from tokenwatt.clock import now_ns
from tokenwatt.errors import SpecError
from tokenwatt.load.wire import unpack_records
from tokenwatt.load.workers import (
    ClientConfig,
    PoolResult,
    ScheduledRequest,
    collect_share,
    deal,
    send_share,
)
from tokenwatt.records import STAMP_TYPECODE, RequestRecord

__all__ = [
    "ClockActor",
    "ClockOffset",
    "RayPoolResult",
    "RayWorkerPool",
    "measure_offset",
    "ray_module",
    "ray_session",
    "shift_stamps",
    "spread_actors",
]

_EXCHANGES = 7  # clock exchanges per actor; the one with the shortest round trip is kept
_LEAD_NS = 200_000_000  # common start this long after the offsets are measured
_STAMP_FIELDS = ("scheduled_ns", "sent_ns", "first_token_ns", "end_ns", "done_ns")


def ray_module() -> Any:
    """``import ray``, or the one-line error that names the extra to install."""
    try:
        import ray  # noqa: PLC0415 (optional extra)
    except ImportError:
        raise SpecError(
            "--ray: Ray is not installed; pip install 'tokenwatt[ray]' (or drop --ray to use "
            "local worker processes)"
        ) from None
    return ray


def ray_session(address: str | None) -> Any:
    """Ray, initialised: the session already open in this process, else ``ray.init(address)``
    (None or "local": a new local instance; "auto" or "ray://host:port": join a cluster)."""
    ray = ray_module()
    if not ray.is_initialized():
        where = None if address in (None, "local") else address
        with _keep_signal_handlers():
            _init(ray, where, address)
    return ray


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """``ray.init`` installs its own SIGTERM handler (``sys.exit``), which would end the run
    before the probe writes what it measured; the handlers in place before it (the
    command's: cancel the run, keep every record, exit 143) are put back after it."""
    main = threading.current_thread() is threading.main_thread()
    sigs = (signal.SIGINT, signal.SIGTERM) if main else ()
    saved = {sig: signal.getsignal(sig) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _init(ray: Any, where: str | None, address: str | None) -> None:
    """``ray.init`` quietly; its failure is the one line that says how to start a cluster."""
    try:
        # logging_level: Ray's "Started a local Ray instance" is not the benchmark's output
        ray.init(
            address=where,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SpecError(
            f"search.probe.ray: cannot join the Ray cluster at {address}: {exc}; start one "
            "(ray start --head) or use local"
        ) from None


def spread_actors(cls: type, args: Sequence[tuple[Any, ...]], *, name: str = "") -> list[Any]:
    """One actor ``cls(*a)`` per ``a`` in ``args``, one CPU each, spread over the nodes, never
    restarted (a restart would lose its requests silently; a death is reported instead).
    ``name``: a prefix; actor i is then named ``{name}-{i}`` (findable by ``ray.get_actor``)."""
    remote = ray_module().remote(num_cpus=1, max_restarts=0)(cls)
    out = []
    for i, a in enumerate(args):
        named = {"name": f"{name}-{i}"} if name else {}
        out.append(remote.options(scheduling_strategy="SPREAD", **named).remote(*a))
    return out


async def measure_offset(actor: Any, worker: int) -> ClockOffset:
    """The actor's clock minus ours, by exchange (Cristian, see the module doc): of
    ``_EXCHANGES`` round trips the shortest is kept; ± half of it."""
    best: tuple[int, int] | None = None  # (round trip, offset)
    for _ in range(_EXCHANGES):
        c0 = now_ns()
        a = await actor.clock_ns.remote()
        c1 = now_ns()
        if best is None or c1 - c0 < best[0]:
            best = (c1 - c0, a - (c0 + c1) // 2)
    assert best is not None
    node = await actor.node_id.remote()
    return ClockOffset(worker, node, best[1], (best[0] + 1) // 2)


class ClockActor:
    """What the coordinator asks of any of its actors: its clock and its node."""

    async def clock_ns(self) -> int:
        return now_ns()

    async def node_id(self) -> str:
        return str(ray_module().get_runtime_context().get_node_id())


class _Actor(ClockActor):
    """One worker: its own StreamClient on the actor's event loop, batches kept for ``take``."""

    def __init__(self, cfg: ClientConfig, requests: list[ScheduledRequest], interval_s: float):
        self.cfg = cfg
        self.requests = requests
        self.interval_s = interval_s
        self.batches: list[bytes] = []

    async def run(self, start_ns: int) -> float:
        client: StreamClient = self.cfg.make_client()
        try:
            return await send_share(
                client,
                self.requests,
                start_ns,
                ignore_eos=self.cfg.ignore_eos,
                sink=self.batches.append,
                interval_s=self.interval_s,
            )
        finally:
            await client.aclose()

    async def take(self) -> list[bytes]:
        out = list(self.batches)
        self.batches.clear()  # the same list: send_share's sink holds its append
        return out


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """An actor's monotonic clock minus the coordinator's, measured by exchange."""

    worker: int
    node_id: str
    offset_ns: int
    uncertainty_ns: int  # half the shortest round trip


@dataclass(slots=True)
class RayPoolResult(PoolResult):
    """A pool run on Ray; stamps are on the coordinator's clock, ± each worker's uncertainty."""

    offsets: list[ClockOffset] = field(default_factory=list)


@dataclass(slots=True)
class _Handle:
    worker: int
    actor: Any
    requests: list[ScheduledRequest]
    offset: ClockOffset | None = None
    received: list[RequestRecord] = field(default_factory=list)
    busy_fraction: float | None = None
    cause: str | None = None


def shift_stamps(rec: RequestRecord, by_ns: int) -> RequestRecord:
    """``rec`` with every stamp moved by ``-by_ns``: an actor's clock onto the coordinator's."""
    for name in _STAMP_FIELDS:
        v = getattr(rec, name)
        if v is not None:
            setattr(rec, name, v - by_ns)
    rec.chunk_ns = array(STAMP_TYPECODE, [t - by_ns for t in rec.chunk_ns])
    return rec


class RayWorkerPool:
    """N Ray actors sending one schedule together. ``address``: None starts a local Ray (or
    uses the one already initialised), "auto" or "ray://host:port" joins a cluster."""

    def __init__(
        self,
        n: int,
        client_config: ClientConfig,
        *,
        address: str | None = None,
        batch_interval_s: float = 0.1,
    ) -> None:
        if n < 1:
            raise ValueError(f"workers must be >= 1, got {n}")
        self.n = n
        self.config = client_config
        self.address = address
        self.batch_interval_s = batch_interval_s
        self.actors: list[Any] = []

    async def run(self, schedule: Sequence[ScheduledRequest]) -> RayPoolResult:
        ray = ray_session(self.address)
        shares = deal(schedule, self.n)
        actors = spread_actors(_Actor, [(self.config, s, self.batch_interval_s) for s in shares])
        handles = [
            _Handle(i, a, share) for i, (a, share) in enumerate(zip(actors, shares, strict=True))
        ]
        self.actors = [h.actor for h in handles]
        try:
            for h in handles:
                h.offset = await measure_offset(h.actor, h.worker)
            start_ns = now_ns() + _LEAD_NS
            await asyncio.gather(*(self._follow(h, start_ns) for h in handles))
            return self._collect(handles, start_ns)
        finally:
            for h in handles:
                ray.kill(h.actor, no_restart=True)
            self.actors = []

    async def _follow(self, h: _Handle, start_ns: int) -> None:
        """Collect an actor's batches until its run ends; an actor that dies ends it."""
        ray = ray_module()
        assert h.offset is not None
        run_ref = h.actor.run.remote(start_ns + h.offset.offset_ns)
        while True:
            finished, _ = ray.wait([run_ref], timeout=0)
            try:
                batches = await h.actor.take.remote()
                for b in batches:
                    h.received.extend(
                        shift_stamps(r, h.offset.offset_ns) for r in unpack_records(b)
                    )
                if finished:
                    h.busy_fraction = float(await run_ref)
                    return
            except ray.exceptions.RayError as exc:
                h.cause = f"Ray actor lost: {type(exc).__name__}"
                return
            await asyncio.sleep(self.batch_interval_s)

    def _collect(self, handles: list[_Handle], start_ns: int) -> RayPoolResult:
        records: list[RequestRecord] = []
        stats = []
        for h in handles:
            msg = f"worker {h.worker} (Ray actor) ended before reporting this request: {h.cause}"
            merged, st = collect_share(
                h.worker,
                h.requests,
                h.received,
                start_ns=start_ns,
                lost_message=msg,
                busy_fraction=h.busy_fraction,
                cause=h.cause,
            )
            records.extend(merged)
            stats.append(st)
        records.sort(key=lambda r: r.request_id)
        offsets = [h.offset for h in handles if h.offset is not None]
        return RayPoolResult(records, stats, start_ns, offsets)
