"""One sending process's keep-up figures, straight into the result's ``WorkerKeepUp``.

Every sender (this process, worker processes, Ray actors, the fixed-schedule pools) reports
the same figures over the records it sent, in the result's own units (seconds), so nothing
copies them field by field later. The checks over them (``load.keepup``) stay outside the
sender package: they read the lateness floor the metrics define.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp

__all__ = ["worker_stats"]

_NS = 1e9


def _pct(xs: list[int], q: float) -> float | None:
    """The q-th of ``xs`` (ns) by rank, in seconds (None: no sends)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] / _NS


def worker_stats(
    worker: int,
    records: Sequence[RequestRecord],
    *,
    dealt: int,
    lost: int = 0,
    core: int | None = None,
    busy_fraction: float | None = None,
    exit_code: int | None = None,
    cause: str | None = None,
    clock: tuple[str, int, int] | None = None,
) -> WorkerKeepUp:
    """Keep-up figures of one worker from its records.

    An event is exact when no other event of its stream carries the same stamp: every event of
    one read gets that read's stamp, so equal stamps within a stream mean a shared read.
    ``clock``: a Ray actor's (node id, clock offset, its uncertainty), ns.
    """
    node, offset, uncertainty = clock if clock is not None else (None, None, None)
    late = [r.sent_ns - r.scheduled_ns for r in records if r.sent_ns is not None]
    events = exact = 0
    for r in records:
        per_stamp = Counter(r.chunk_ns)
        events += len(r.chunk_ns)
        exact += sum(1 for c in per_stamp.values() if c == 1)
    return WorkerKeepUp(
        worker=worker,
        core=core,
        dealt=dealt,
        lost=lost,
        send_lateness_p50_s=_pct(late, 0.5),
        send_lateness_p99_s=_pct(late, 0.99),
        busy_fraction=busy_fraction,
        coalesced_reads=sum(r.coalesced_reads for r in records),
        events=events,
        exact_share=exact / events if events else None,
        exit_code=exit_code,
        cause=cause,
        node_id=node,
        clock_offset_ns=offset,
        clock_uncertainty_ns=uncertainty,
    )
