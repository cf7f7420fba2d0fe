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

from tokenwatt.metrics.latency import LATENESS_FLOOR_S
from tokenwatt.result import LoadGenerator, WorkerKeepUp

__all__ = [
    "KEEP_UP_BUSY_MAX",
    "KEEP_UP_EXACT_MIN",
    "KEEP_UP_LATENESS_P99_S",
    "LOAD_GENERATOR_FAILED",
    "client_bound",
    "generator_failure",
    "keep_up_problems",
    "load_generator_summary",
]

LOAD_GENERATOR_FAILED = "load generator failed"  # the verdict's name, first in its reason
# Keep-up self-checks (one definition, see docs/methodology.md "Workers and clocks"):
# a worker whose p99 send lateness exceeds the one lateness floor (metrics.latency) no longer
# sends on the schedule;
KEEP_UP_LATENESS_P99_S = LATENESS_FLOOR_S
# a worker whose process used more than 90% of a core has no slack left to read on time;
KEEP_UP_BUSY_MAX = 0.90
# when fewer than 80% of events had a read to themselves, most stamps are those of a late read.
KEEP_UP_EXACT_MIN = 0.80


def client_bound(w: WorkerKeepUp) -> bool:
    """The worker's own process used more of its core than the keep-up limit allows."""
    return w.busy_fraction is not None and w.busy_fraction > KEEP_UP_BUSY_MAX


def keep_up_problems(w: WorkerKeepUp) -> list[str]:
    """One line per keep-up self-check this worker failed, each naming the remedy.

    Late sends and shared reads have several causes; the worker's busy fraction tells them
    apart: a saturated worker needs more workers, one with CPU to spare was held up by
    something else (other processes on its core, a full connection pool, or a server that
    falls behind and then sends several events of a stream at once).
    """
    if client_bound(w):
        fix = "the load generator was the bottleneck: use more workers (workers: N)"
    else:
        fix = (
            "its process had CPU to spare: look at other processes on its core, "
            "max_connections, or a server sending events in bursts"
        )
    out: list[str] = []
    if w.lost:
        cause = w.cause or f"exit status {w.exit_code}"
        out.append(
            f"worker {w.worker} ended early ({cause}) with {w.lost} requests "
            "unreported; they count as failures (worker_lost)"
        )
    p99 = w.send_lateness_p99_s
    if p99 is not None and p99 > KEEP_UP_LATENESS_P99_S:
        out.append(
            f"worker {w.worker}: p99 send lateness {p99 * 1e3:.2f} ms > "
            f"{KEEP_UP_LATENESS_P99_S * 1e3:g} ms; {fix}"
        )
    if client_bound(w):
        out.append(
            f"worker {w.worker}: its core was {w.busy_fraction:.0%} busy > "
            f"{KEEP_UP_BUSY_MAX:.0%}; {fix}"
        )
    share = w.exact_share
    if share is not None and share < KEEP_UP_EXACT_MIN:
        out.append(
            f"worker {w.worker}: only {share:.0%} of events had a read to themselves "
            f"(< {KEEP_UP_EXACT_MIN:.0%}); the rest carry a late read's stamp; {fix}"
        )
    return out


def generator_failure(keep_up: list[WorkerKeepUp]) -> str | None:
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


def load_generator_summary(
    workers: int, keep_up: list[WorkerKeepUp], *, saturated: bool
) -> LoadGenerator:
    """The result's ``load_generator`` for one probe from its senders' keep-up figures."""
    problems = [p for w in keep_up for p in keep_up_problems(w)]
    if saturated:
        problems.insert(0, "the sender fell behind its schedule and the probe stopped (saturated)")
    return LoadGenerator(
        workers=workers,
        bottleneck=saturated or any(client_bound(w) for w in keep_up),
        problems=problems,
        per_worker=list(keep_up),
    )
