"""Which sender a probe gets, and the refusals where it is opened.

One place decides how a probe's requests leave (``send.base``): this process
(``local``) unless ``search.probe.workers`` > 1 (worker processes) or ``search.probe.ray``
(Ray actors). A closed loop (the single-stream point) stays in this process: one stream needs
no help. Conversations stay too, and asking for workers with them is refused: a next turn
needs the previous answer's text, which the workers' compact records do not carry. Workers
build their own ``StreamClient``, so a probe driven through any other client is refused
with them.
"""

from __future__ import annotations

from tokenwatt.client import StreamClient
from tokenwatt.errors import SpecError
from tokenwatt.send.base import LATE_SEND_S, Sender, Streamer
from tokenwatt.send.local import LocalSender
from tokenwatt.send.processes import LivePool
from tokenwatt.send.workers import ClientConfig
from tokenwatt.spec import BenchSpec, ProbeSettings
from tokenwatt.traffic.arrivals import ClosedLoop
from tokenwatt.traffic.schedule import ScheduleSource, SessionSource

__all__ = ["open_sender"]


def open_sender(
    spec: BenchSpec,
    client: Streamer,
    schedule: ScheduleSource | ClosedLoop,
    settings: ProbeSettings,
) -> Sender:
    """The sender of one probe (the module doc); a ``SpecError`` naming the field and the fix
    where the spec asks for senders that cannot send this probe."""
    n, ray = settings.workers, settings.ray
    if (n == 1 and ray is None) or isinstance(schedule, ClosedLoop):
        return LocalSender(client, ignore_eos=spec.workload.ignore_eos)
    field = "search.probe.ray" if ray is not None else "search.probe.workers > 1"
    fix = "drop ray" if ray is not None else "set workers: 1"
    if isinstance(schedule, SessionSource):
        raise SpecError(
            f"{field} cannot send conversations (workload.sessions): a next turn needs the "
            f"previous answer; {fix}"
        )
    if spec.graded is not None:
        raise SpecError(f"{field} cannot send graded tasks (graded:) yet; {fix} or drop graded:")
    if not isinstance(client, StreamClient):
        raise SpecError(f"{field} needs the HTTP StreamClient; {fix}")
    cfg = ClientConfig.from_client(client, ignore_eos=spec.workload.ignore_eos)
    if ray is not None:
        # Ray is an optional extra: imported only when asked for
        from tokenwatt.send.ray_actors import RayLivePool, clock_limit_ns  # noqa: PLC0415

        limit = clock_limit_ns([spec.slo.ttft_ms, spec.slo.tpot_ms])
        return RayLivePool(n, cfg, address=ray, late_send_s=LATE_SEND_S, clock_limit_ns=limit)
    pool = LivePool(n, cfg, late_send_s=LATE_SEND_S)
    return LocalSender(client, ignore_eos=spec.workload.ignore_eos) if pool.n == 1 else pool
