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
from collections.abc import Sequence
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
from tokenwatt.records import RequestRecord

__all__ = ["ClockOffset", "RayPoolResult", "RayWorkerPool"]

_EXCHANGES = 7  # clock exchanges per actor; the one with the shortest round trip is kept
_LEAD_NS = 200_000_000  # common start this long after the offsets are measured
_STAMP_FIELDS = ("scheduled_ns", "sent_ns", "first_token_ns", "end_ns", "done_ns")


def _ray() -> Any:
    try:
        import ray  # noqa: PLC0415 (optional extra)
    except ImportError:
        raise SpecError(
            "--ray: Ray is not installed; pip install 'tokenwatt[ray]' (or drop --ray to use "
            "local worker processes)"
        ) from None
    return ray


class _Actor:
    """One worker: its own StreamClient on the actor's event loop, batches kept for ``take``."""

    def __init__(self, cfg: ClientConfig, requests: list[ScheduledRequest], interval_s: float):
        self.cfg = cfg
        self.requests = requests
        self.interval_s = interval_s
        self.batches: list[bytes] = []

    async def clock_ns(self) -> int:
        return now_ns()

    async def node_id(self) -> str:
        return _node_id()

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


def _shift(rec: RequestRecord, by_ns: int) -> RequestRecord:
    for name in _STAMP_FIELDS:
        v = getattr(rec, name)
        if v is not None:
            setattr(rec, name, v - by_ns)
    rec.chunk_ns = [t - by_ns for t in rec.chunk_ns]
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
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(num_cpus=1, max_restarts=0)(_Actor)
        spread = remote.options(scheduling_strategy="SPREAD")
        handles = [
            _Handle(i, spread.remote(self.config, share, self.batch_interval_s), share)
            for i, share in enumerate(deal(schedule, self.n))
        ]
        self.actors = [h.actor for h in handles]
        try:
            for h in handles:
                h.offset = await self._offset(h)
            start_ns = now_ns() + _LEAD_NS
            await asyncio.gather(*(self._follow(h, start_ns) for h in handles))
            return self._collect(handles, start_ns)
        finally:
            for h in handles:
                ray.kill(h.actor, no_restart=True)
            self.actors = []

    async def _offset(self, h: _Handle) -> ClockOffset:
        best: tuple[int, int] | None = None  # (round trip, offset)
        for _ in range(_EXCHANGES):
            c0 = now_ns()
            a = await h.actor.clock_ns.remote()
            c1 = now_ns()
            if best is None or c1 - c0 < best[0]:
                best = (c1 - c0, a - (c0 + c1) // 2)
        assert best is not None
        node = await h.actor.node_id.remote()
        return ClockOffset(h.worker, node, best[1], (best[0] + 1) // 2)

    async def _follow(self, h: _Handle, start_ns: int) -> None:
        """Collect an actor's batches until its run ends; an actor that dies ends it."""
        ray = _ray()
        assert h.offset is not None
        run_ref = h.actor.run.remote(start_ns + h.offset.offset_ns)
        while True:
            finished, _ = ray.wait([run_ref], timeout=0)
            try:
                batches = await h.actor.take.remote()
                for b in batches:
                    h.received.extend(_shift(r, h.offset.offset_ns) for r in unpack_records(b))
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


def _node_id() -> str:
    return str(_ray().get_runtime_context().get_node_id())
