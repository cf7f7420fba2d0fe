"""Ray plumbing for the live Ray sender (optional extra: ``tokenwatt[ray]``).

``send.ray_actors`` sends a probe's requests from Ray actors spread over a cluster's
nodes; this module holds what it needs from Ray itself: the import with its one-line error, the
session (joined or started, the command's signal handlers kept), actors spread one per CPU,
and each actor's clock.

Clocks. Every node times on its own monotonic clock, and two hosts' monotonic clocks share
neither origin nor, exactly, rate. Durations inside one request (TTFT, ITL, E2E) are taken on
one node and need no conversion. To place the schedule and the window, the coordinator measures
each actor's clock offset by exchange (Cristian): it reads its own monotonic clock before and
after asking the actor for its monotonic clock; the actor's reading belongs somewhere in that
round trip, so offset = actor − midpoint with uncertainty ± half the round trip (the smallest of
several exchanges is kept). A slot is put onto the actor's clock by adding the offset, and
every stamp of its records is shifted back by it (:func:`shift_stamps`), so all records land on
the coordinator's clock. On one machine the true offset is 0, which the tests use as the
independent truth. An exchange over monotonic clocks needs no wall-clock agreement (NTP steps do
not move it); drift over a probe is tracked by ``send.clock_track``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tokenwatt.clock import now_ns
from tokenwatt.errors import SpecError
from tokenwatt.records import STAMP_TYPECODE, RequestRecord

__all__ = [
    "ClockActor",
    "ClockOffset",
    "measure_offset",
    "ray_module",
    "ray_session",
    "shift_stamps",
    "spread_actors",
]

_EXCHANGES = 7  # clock exchanges per actor; the one with the shortest round trip is kept
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


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """An actor's monotonic clock minus the coordinator's, measured by exchange."""

    worker: int
    node_id: str
    offset_ns: int
    uncertainty_ns: int  # half the shortest round trip


def shift_stamps(rec: RequestRecord, by_ns: int) -> RequestRecord:
    """``rec`` with every stamp moved by ``-by_ns``: an actor's clock onto the coordinator's."""
    for name in _STAMP_FIELDS:
        v = getattr(rec, name)
        if v is not None:
            setattr(rec, name, v - by_ns)
    rec.chunk_ns = array(STAMP_TYPECODE, [t - by_ns for t in rec.chunk_ns])
    return rec
