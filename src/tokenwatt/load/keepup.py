"""A probe's load generator in the result: who sent, and whether it kept up.

The verdict is one rule (docs/methodology.md, "Workers and clocks"): the load generator was
the bottleneck when its sender fell ``MAX_SEND_LAG_S`` behind schedule (the probe stopped,
``saturated``) or when a sending process used more than ``KEEP_UP_BUSY_MAX`` of its core.
Either way the server was not shown the load asked for, so no boundary may rest on the
probe (``report.checks``: remedy, more workers). The other keep-up checks (late sends with
CPU to spare, shared reads, lost workers) are listed as problems without that verdict: their
cause may be the server or the machine, and the worker's busy fraction tells them apart.

A worker that died (a killed process, a lost Ray actor or node) is a different verdict:
``generator_failure``. Its unreported requests are ``worker_lost`` failures that the server
never caused, so the probe is "load generator failed": no SLO verdict, no boundary, exit 3,
with the worker named and why (``load.derive.probe_verdict`` applies it).
"""

from __future__ import annotations

from tokenwatt.load.workers import WorkerStats
from tokenwatt.result import LoadGenerator, WorkerKeepUp

__all__ = ["LOAD_GENERATOR_FAILED", "generator_failure", "load_generator_summary"]

_NS = 1e9
LOAD_GENERATOR_FAILED = "load generator failed"  # the verdict's name, first in its reason


def generator_failure(keep_up: list[WorkerStats]) -> str | None:
    """The reason line when a sending worker died before reporting everything it was dealt
    (None: every worker ended normally). Names each dead worker, its node and its cause."""
    dead = [w for w in keep_up if w.lost or w.cause is not None or w.exit_code not in (None, 0)]
    if not dead:
        return None
    parts = []
    for w in dead:
        where = f" on node {w.node_id[:12]}" if w.node_id else ""
        cause = w.cause or f"exit status {w.exit_code}"
        if w.lost or w.exit_code not in (None, 0) or cause.startswith("Ray actor"):
            parts.append(f"worker {w.worker}{where} died ({cause}), {w.lost} requests worker_lost")
        else:  # alive to the end, yet refused (its clock)
            parts.append(f"worker {w.worker}{where}: {cause}")
    return (
        f"{LOAD_GENERATOR_FAILED}: " + "; ".join(parts) + "; the client failed, not the server: "
        "no SLO verdict, rerun the probe"
    )


def _keep_up(w: WorkerStats) -> WorkerKeepUp:
    p50, p99 = w.send_lateness_p50_ns, w.send_lateness_p99_ns
    return WorkerKeepUp(
        worker=w.worker,
        core=w.core,
        dealt=w.dealt,
        lost=w.lost,
        send_lateness_p50_s=None if p50 is None else p50 / _NS,
        send_lateness_p99_s=None if p99 is None else p99 / _NS,
        busy_fraction=w.busy_fraction,
        coalesced_reads=w.coalesced_reads,
        events=w.events,
        exact_share=w.exact_share,
        cause=w.cause,
        node_id=w.node_id,
        clock_offset_ns=w.clock_offset_ns,
        clock_uncertainty_ns=w.clock_uncertainty_ns,
        clock_drift_ppm=w.clock_drift_ppm,
        clock_samples=w.clock_samples,
    )


def load_generator_summary(
    workers: int, keep_up: list[WorkerStats], *, saturated: bool
) -> LoadGenerator:
    """The result's ``load_generator`` for one probe from its senders' keep-up figures."""
    problems = [p for w in keep_up for p in w.problems()]
    if saturated:
        problems.insert(0, "the sender fell behind its schedule and the probe stopped (saturated)")
    return LoadGenerator(
        workers=workers,
        bottleneck=saturated or any(w.client_bound for w in keep_up),
        problems=problems,
        per_worker=[_keep_up(w) for w in keep_up],
    )
