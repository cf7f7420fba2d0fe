"""A probe's workers as Ray actors, fed live (``search.probe.ray`` / ``--ray``; extra
``tokenwatt[ray]``).

The same division of work as ``send.processes`` (the probe keeps its window rules and deals
request k to worker k mod N ahead of its slot; the workers only send), with Ray actors instead
of local processes: one CPU each, spread over the cluster's nodes, never restarted. What
differs is the transport and the clock:

* **Clocks.** Each actor's offset (its monotonic clock minus the coordinator's) is measured
  by exchange (``ray_workers.measure_offset``: Cristian, ± half the shortest round trip)
  before the probe, every ``RECLOCK_S`` during it (by the pump, between calls) and once after
  it (``send.clock_track``). A slot t on the coordinator's clock is sent as t + the latest
  offset, so the actor sleeps until that instant on its own clock; every stamp of its records
  is shifted back by the latest offset as they arrive (``ray_workers.shift_stamps``), so the
  probe's window rules read one clock, and at the end by the offset interpolated at the
  request's send time (drift corrected). Each actor's node, offset, uncertainty and drift
  land in the keep-up figures (``result.WorkerKeepUp``) and the result's ``load_generator``;
  a clock known worse than the SLO allows (``clock_track.clock_limit_ns``) makes the probe
  "load generator failed", as a lost actor does.
* **Transport.** An actor cannot push to the coordinator, so one task per actor (the pump)
  makes one call at a time: ``exchange(requests dealt since the last call)`` returns the
  records finished since then and the sender figures. A dealt request waits ``_FLUSH_S``
  for company (a call per request would cost a round trip each); with nothing to send, the
  pump still calls every ``_POLL_S`` so records and figures come back.
* **The lead** (:func:`lead_ns`). A request dealt at slot − lead reaches the actor after at
  most the flush wait, the call in flight before it, and its own call: ``_FLUSH_S`` + 2 round
  trips, plus whatever stalls the coordinator's loop or Ray's RPC threads (GC, a busy
  machine: tens of ms). So the lead is ``_FLUSH_S`` + 50 × the shortest measured round trip,
  and never less than ``RAY_LEAD_NS`` (250 ms, 2.5 × the process pool's ``LEAD_NS``: a Ray
  call costs ≈ 1 ms against a pipe's ≈ 0.05 ms). A longer lead costs no accuracy: requests
  only wait longer on the actor; one that still arrives after its slot is sent at once and
  counted late, as any sender's late send.
* **Loss.** An actor that dies (killed, its node lost) fails the pump's next call with a
  ``RayError``: every request dealt to it and not yet reported becomes ``worker_lost`` with
  the cause, and later requests dealt to it fail the same way at once, so the probe never
  waits on them. An actor silent ``FINISH_S`` after the stop is killed the same way.

Ray's own asyncio loop runs the actor (not uvloop, no core pinning: Ray places actors).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from tokenwatt.clock import now_ns
from tokenwatt.errors import SpecError
from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp
from tokenwatt.send.clock_track import RECLOCK_S, OffsetTrack, clock_limit_ns
from tokenwatt.send.processes import FINISH_S, LiveDealer, Share, SlotSender, fields
from tokenwatt.send.ray_workers import (
    ClockActor,
    ClockOffset,
    measure_offset,
    ray_module,
    ray_session,
    shift_stamps,
    spread_actors,
)
from tokenwatt.send.wire import unpack_records
from tokenwatt.send.workers import ClientConfig, ScheduledRequest

__all__ = ["RAY_LEAD_NS", "RayLivePool", "clock_limit_ns", "lead_ns", "ray_worker_count"]

_NS = 1_000_000_000
RAY_LEAD_NS = 250_000_000  # the shortest lead on Ray (see the module doc)
_FLUSH_S = 0.01  # a dealt request waits this long for others to share its call
_POLL_S = 0.05  # an actor with nothing to receive is asked for its records this often
_START_S = 120.0  # the longest wait for every actor to be placed and to build its client


class _LiveActor(ClockActor):
    """One worker on Ray: a :class:`SlotSender` on the actor's loop, driven by the pump's
    calls."""

    def __init__(self, cfg: ClientConfig, late_ns: int) -> None:
        self.cfg = cfg
        self.late_ns = late_ns
        self.sender: SlotSender | None = None

    async def begin(self) -> None:
        self.sender = SlotSender(self.cfg.make_client(), self.cfg.ignore_eos, self.late_ns)

    def _launch(self, batch: list[tuple[Any, ...]]) -> SlotSender:
        assert self.sender is not None, "begin() first"
        for body in batch:
            self.sender.launch(ScheduledRequest(*body))
        return self.sender

    async def exchange(self, batch: list[tuple[Any, ...]]) -> tuple[bytes, list[int]]:
        """Take new requests (slots on this actor's clock); return finished records, figures."""
        return self._launch(batch).take()

    async def end(
        self, batch: list[tuple[Any, ...]], cancel: bool
    ) -> tuple[bytes, list[int], dict[str, Any]]:
        """The last call: what is in flight ends (``cancel``: cancelled), the client closes."""
        s = self._launch(batch)
        await s.stop(cancel=cancel)
        packed, figs = s.take()
        return packed, figs, await s.close()


@dataclass(slots=True, kw_only=True)
class _OnRay(Share):
    actor: Any
    offset: ClockOffset
    outbox: list[tuple[Any, ...]] = field(default_factory=list)  # dealt, not yet called over
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False
    cancel: bool = True
    cause: str | None = None
    pump: asyncio.Task[None] | None = None
    track: OffsetTrack = field(default_factory=OffsetTrack)
    shifted: list[tuple[RequestRecord, int]] = field(default_factory=list)  # (record, by)
    clocked_ns: int = 0  # when the offset was last measured
    sent_by: dict[int, int] = field(default_factory=dict)  # request → offset its slot used


def ray_worker_count(ray: Any) -> int:
    """``workers: auto`` on Ray: the cluster's CPUs minus the coordinator's one, at least 1."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)) - 1)


def lead_ns(offsets: list[ClockOffset], flush_s: float = _FLUSH_S) -> int:
    """How long before its slot a request is dealt (see the module doc)."""
    rtt = max((2 * o.uncertainty_ns for o in offsets), default=0)
    return max(RAY_LEAD_NS, round(flush_s * _NS) + 50 * rtt)


class RayLivePool(LiveDealer[_OnRay]):
    """N Ray actors that send what a probe deals them (see the module doc). ``address``:
    "local" (or None) starts a Ray instance here, "auto" or "ray://host:port" joins one; an
    already initialised Ray session is used as it is."""

    def __init__(
        self,
        n: int | Literal["auto"],
        client_config: ClientConfig,
        *,
        address: str | None = "local",
        late_send_s: float = 0.05,
        flush_s: float = _FLUSH_S,
        poll_s: float = _POLL_S,
        clock_limit_ns: int | None = None,
        reclock_s: float = RECLOCK_S,
    ) -> None:
        ray_module()  # installed? else the one line naming the extra, before anything runs
        super().__init__(n if isinstance(n, int) else 1)  # auto: counted once Ray is up
        self.requested = n
        self.config = client_config
        self.address = address
        self.late_ns = round(late_send_s * _NS)
        self.flush_s, self.poll_s = flush_s, poll_s
        self.clock_limit_ns, self.reclock_ns = clock_limit_ns, round(reclock_s * _NS)
        self.name = f"tokenwatt-{uuid.uuid4().hex[:8]}"  # actor i: {name}-{i}
        self.actors: list[Any] = []

    async def _open(self) -> None:
        """Place the actors, wait for their clients, measure their clocks, start the pumps."""
        ray = ray_session(self.address)
        if self.requested == "auto":
            self.n = ray_worker_count(ray)
        cpus = ray.cluster_resources().get("CPU", 0)
        if self.n > cpus:
            raise SpecError(
                f"search.probe.ray: {self.n} actors need {self.n} CPUs, the Ray cluster has "
                f"{cpus:g}; lower workers (--workers) or add nodes"
            )
        args = [(self.config, self.late_ns)] * self.n
        self.actors = spread_actors(_LiveActor, args, name=self.name)
        ready = asyncio.gather(*(a.begin.remote() for a in self.actors))
        try:
            await asyncio.wait_for(ready, _START_S)
        except TimeoutError:
            raise SpecError(
                f"search.probe.ray: {self.n} actors were not all placed within {_START_S:g} s "
                "(other jobs hold the cluster's CPUs?); lower workers (--workers)"
            ) from None
        except ray.exceptions.RayError as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SpecError(f"search.probe.ray: an actor failed to start: {why}") from None
        offsets = [await measure_offset(a, i) for i, a in enumerate(self.actors)]
        self.handles = [
            _OnRay(worker=i, actor=a, offset=o)
            for i, (a, o) in enumerate(zip(self.actors, offsets, strict=True))
        ]
        for h in self.handles:
            h.clocked_ns = now_ns()
            h.track.add(h.clocked_ns, h.offset.offset_ns, h.offset.uncertainty_ns)
        self.lead_ns = lead_ns(offsets, self.flush_s)
        loop = asyncio.get_running_loop()
        for h in self.handles:
            h.pump = loop.create_task(self._pump(h))

    def _send(self, h: _OnRay, req: ScheduledRequest) -> bool:
        """Queue the request for the pump's next call, its slot put onto the actor's clock."""
        h.sent_by[req.index] = h.track.latest_ns
        on_actor = dataclasses.replace(req, offset_ns=req.offset_ns + h.track.latest_ns)
        h.outbox.append(fields(on_actor))
        h.wake.set()
        return True

    def _lost_message(self, h: _OnRay) -> str:
        node = h.offset.node_id[:12]
        return f"worker {h.worker} (Ray actor on node {node}) ended before reporting: {h.cause}"

    async def _pump(self, h: _OnRay) -> None:
        """(task) The actor's one call at a time until its end call, or its death."""
        ray = ray_module()
        try:
            while True:
                await self._wait_for_work(h)
                batch, h.outbox = h.outbox, []
                if h.closing:
                    timeout = FINISH_S if h.cancel else None
                    packed, figs, end = await asyncio.wait_for(
                        h.actor.end.remote(batch, h.cancel), timeout
                    )
                    self._take(h, packed, figs)
                    h.busy_fraction = float(end["busy_fraction"])
                    self._lose(h, set(end["unsent"]))
                    with contextlib.suppress(ray.exceptions.RayError):  # all reported
                        await self._reclock(h)  # the "after" sample
                    self._settle_clock(h)
                    return
                self._take(h, *await h.actor.exchange.remote(batch))
                if now_ns() - h.clocked_ns >= self.reclock_ns:
                    await self._reclock(h)
        except ray.exceptions.RayError as exc:
            h.cause = f"Ray actor lost: {type(exc).__name__}"
            self._settle_clock(h)
            self._lose(h, set())
        except TimeoutError:
            h.cause = f"Ray actor silent {FINISH_S:g} s after the stop: killed"
            self._lose(h, set())

    async def _wait_for_work(self, h: _OnRay) -> None:
        """Until something was dealt (then ``flush_s`` more, for company), the stop, or the
        poll interval."""
        if h.closing:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(h.wake.wait(), self.poll_s)
        h.wake.clear()
        if h.outbox and not h.closing:
            await asyncio.sleep(self.flush_s)

    def _take(self, h: _OnRay, packed: bytes, figs: list[int]) -> None:
        if packed:
            by = h.track.latest_ns
            recs = [shift_stamps(r, by) for r in unpack_records(packed)]
            for r in recs:  # the slot back exactly as the coordinator drew it
                r.scheduled_ns += by - h.sent_by.pop(r.request_id, by)
            h.shifted.extend((r, by) for r in recs)
            self._got(h, recs)
        self._set_figures(h, figs)

    async def _reclock(self, h: _OnRay) -> None:
        """Measure the actor's offset again (a sample of its track)."""
        o = await measure_offset(h.actor, h.worker)
        h.clocked_ns = now_ns()
        h.track.add(h.clocked_ns, o.offset_ns, o.uncertainty_ns)

    def _settle_clock(self, h: _OnRay) -> None:
        """Every record onto the offset interpolated at its send time (drift corrected);
        a clock known worse than the SLO allows is the actor's failure (see the module doc)."""
        for rec, applied in h.shifted:
            at = rec.sent_ns if rec.sent_ns is not None else rec.scheduled_ns
            delta = h.track.at(at) - applied
            if delta:  # the measured stamps only: the slot is the coordinator's own
                slot = rec.scheduled_ns
                shift_stamps(rec, delta).scheduled_ns = slot
        h.shifted.clear()
        who = f"worker {h.worker} (Ray actor on node {h.offset.node_id[:12]})"
        refusal = h.track.refusal(self.clock_limit_ns, who)
        if refusal is not None and h.cause is None:
            h.cause = refusal

    async def finish(self, *, cancel: bool) -> list[WorkerKeepUp]:
        """End the run (``cancel``: stop what is in flight) and return each actor's keep-up."""
        for h in self.handles:
            h.closing, h.cancel = True, cancel
            h.wake.set()
        try:
            await asyncio.gather(*(h.pump for h in self.handles if h.pump is not None))
        finally:
            ray = ray_module()
            for a in self.actors:
                with contextlib.suppress(Exception):  # already dead: nothing to kill
                    ray.kill(a, no_restart=True)
        return [
            self._stats(h, cause=h.cause, clock=_clock(h)).model_copy(
                update={"clock_drift_ppm": h.track.drift_ppm(), "clock_samples": h.track.measured}
            )
            for h in self.handles
        ]


def _clock(h: _OnRay) -> tuple[str, int, int]:
    """(node, the tightest sample's offset, the ± of any offset used over the probe)."""
    return (h.offset.node_id, h.track.best_ns, h.track.uncertainty())
