"""Ground truth: what the simulated engine actually did, counted independently of any client.

``ReplicaTruth`` accumulates per-replica counters (bytes read, prefill tokens, busy and idle
time, energy); the energy counter is continuous in time (``energy_at`` interpolates inside
the current step or idle gap) so that a scraper sees a meter, not a staircase. ``TruthLog``
writes one JSON object per step. ``Lateness`` keeps the emit-lateness samples (step deadline
→ write of each chunk) for quantiles and a Prometheus histogram.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import orjson

from tokenwatt.sim.engine import Step

__all__ = [
    "LATENESS_BUCKETS_S",
    "FigureTruth",
    "Lateness",
    "ReplicaTruth",
    "TruthLog",
    "figure_truth",
]


class ReplicaTruth:
    """Cumulative ground-truth counters of one replica."""

    __slots__ = (
        "busy_s",
        "decode_batch_s",
        "decode_kv_bytes",
        "decode_steps",
        "decode_tokens",
        "decode_weight_bytes",
        "deficit_s",
        "draft_bytes",
        "energy_j",
        "idle_power_w",
        "idle_s",
        "idle_since_ns",
        "late_steps",
        "max_deficit_s",
        "memory_s",
        "overhead_s",
        "preemptions",
        "prefill_s",
        "prefill_tokens",
        "running_s",
        "step_decode_batch_s",
        "step_end_ns",
        "step_energy_j",
        "step_running_s",
        "step_start_ns",
        "steps",
        "tokens_emitted",
        "weight_bytes",
    )

    def __init__(self, idle_power_w: float, t0_ns: int) -> None:
        self.idle_power_w = idle_power_w
        self.steps = 0
        self.decode_steps = 0
        self.tokens_emitted = 0
        self.decode_tokens = 0
        self.prefill_tokens = 0
        self.weight_bytes = 0
        self.decode_weight_bytes = 0
        self.decode_kv_bytes = 0
        self.draft_bytes = 0  # read by the speculative drafter (MTP layers, draft model)
        self.busy_s = 0.0
        self.idle_s = 0.0
        self.memory_s = 0.0
        self.prefill_s = 0.0
        self.overhead_s = 0.0
        self.energy_j = 0.0
        self.running_s = 0.0  # Σ sequences scheduled × step time: integral of the running set
        self.decode_batch_s = 0.0  # Σ decode sequences × step time: integral of the batch B
        self.preemptions = 0
        self.late_steps = 0
        self.deficit_s = 0.0
        self.max_deficit_s = 0.0
        self.idle_since_ns: int | None = t0_ns
        self.step_start_ns = 0
        self.step_end_ns = 0
        self.step_energy_j = 0.0
        self.step_running_s = 0.0
        self.step_decode_batch_s = 0.0

    def begin_step(self, step: Step) -> float:
        """Account the idle gap before ``step`` and the step itself; returns that idle time."""
        idle = 0.0
        if self.idle_since_ns is not None:
            idle = max(0, step.t_start_ns - self.idle_since_ns) / 1e9
            self.idle_s += idle
            self.energy_j += idle * self.idle_power_w
            self.idle_since_ns = None
        self.steps += 1
        self.tokens_emitted += step.tokens_emitted
        self.prefill_tokens += step.prefill_tokens
        self.weight_bytes += step.weight_bytes
        if step.batch:
            self.decode_steps += 1
            self.decode_tokens += step.batch if step.spec is None else step.spec.emitted
            self.draft_bytes += step.draft_bytes
            self.decode_weight_bytes += step.weight_bytes
            self.decode_kv_bytes += step.kv_bytes
        self.busy_s += step.duration_s
        self.memory_s += step.memory_s
        self.prefill_s += step.prefill_s
        self.overhead_s += step.overhead_s
        self.preemptions += len(step.preempted)
        self.step_start_ns = step.t_start_ns
        self.step_end_ns = step.t_end_ns
        self.step_energy_j = step.energy_j
        self.energy_j += step.energy_j
        self.step_running_s = (step.batch + step.prefill_seqs) * step.duration_s
        self.running_s += self.step_running_s
        self.step_decode_batch_s = step.batch * step.duration_s
        self.decode_batch_s += self.step_decode_batch_s
        return idle

    def go_idle(self, since_ns: int) -> None:
        self.idle_since_ns = since_ns

    def _left_of_step(self, now_ns: int) -> float:
        """The fraction of the current step still ahead of ``now_ns`` (0 when idle or past)."""
        if self.idle_since_ns is not None:
            return 0.0
        span = self.step_end_ns - self.step_start_ns
        if span > 0 and now_ns < self.step_end_ns:
            return (self.step_end_ns - max(now_ns, self.step_start_ns)) / span
        return 0.0

    def energy_at(self, now_ns: int) -> float:
        """Energy through ``now_ns``: counted steps and idle gaps, minus the unfinished part
        of the current step, plus the running idle gap."""
        if self.idle_since_ns is not None:
            return self.energy_j + max(0, now_ns - self.idle_since_ns) / 1e9 * self.idle_power_w
        return self.energy_j - self._left_of_step(now_ns) * self.step_energy_j

    def running_s_at(self, now_ns: int) -> float:
        """∫ running sequences dt through ``now_ns`` (continuous, like the energy meter)."""
        return self.running_s - self._left_of_step(now_ns) * self.step_running_s

    def decode_batch_s_at(self, now_ns: int) -> float:
        """∫ decode batch dt through ``now_ns`` (continuous, like the energy meter)."""
        return self.decode_batch_s - self._left_of_step(now_ns) * self.step_decode_batch_s

    def note_deficit(self, late_s: float) -> None:
        self.deficit_s = late_s
        self.max_deficit_s = max(self.max_deficit_s, late_s)


LATENESS_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)


class Lateness:
    """Emit lateness samples (seconds): a bounded buffer for quantiles plus histogram counts."""

    def __init__(self, capacity: int = 1 << 21) -> None:
        self.capacity = capacity
        self._buf = np.zeros(capacity, dtype=np.float64)
        self._n = 0  # samples ever written
        self._bounds = np.asarray(LATENESS_BUCKETS_S)
        self.bucket_counts = np.zeros(len(LATENESS_BUCKETS_S) + 1, dtype=np.int64)
        self.count = 0
        self.sum_s = 0.0

    def add_ns(self, stamps_ns: list[int], deadline_ns: int) -> None:
        if not stamps_ns:
            return
        lat = (np.asarray(stamps_ns, dtype=np.int64) - deadline_ns) * 1e-9
        m = len(lat)
        start = self._n % self.capacity
        end = start + m
        if end <= self.capacity:
            self._buf[start:end] = lat
        else:
            k = self.capacity - start
            self._buf[start:] = lat[:k]
            self._buf[: m - k] = lat[k:]
        self._n += m
        idx = np.searchsorted(self._bounds, lat, side="left")
        self.bucket_counts += np.bincount(idx, minlength=len(self.bucket_counts))
        self.count += m
        self.sum_s += float(lat.sum())

    def samples(self) -> npt.NDArray[np.float64]:
        """The retained samples (the latest ``capacity``)."""
        if self._n <= self.capacity:
            return self._buf[: self._n].copy()
        return self._buf.copy()

    def summary(self) -> dict[str, Any]:
        s = self.samples()
        if not len(s):
            return {"count": 0}
        q = np.quantile(s, [0.5, 0.9, 0.99, 0.999])
        return {
            "count": int(self.count),
            "retained": len(s),
            "mean_s": float(s.mean()),
            "p50_s": float(q[0]),
            "p90_s": float(q[1]),
            "p99_s": float(q[2]),
            "p999_s": float(q[3]),
            "max_s": float(s.max()),
            "min_s": float(s.min()),
        }

    def reset(self) -> None:
        self._n = 0
        self.bucket_counts[:] = 0
        self.count = 0
        self.sum_s = 0.0


class TruthLog:
    """``--truth-log FILE``: one JSON object per step, in emission order."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._f: IO[bytes] | None = self.path.open("wb", buffering=1 << 16)

    def write(
        self,
        step: Step,
        *,
        t_start_ns: int,
        t_end_ns: int,
        idle_s: float,
        idle_energy_j: float,
        running: int,
        waiting: int,
        kv_usage: float,
    ) -> None:
        if self._f is None:
            return
        rec = {
            "replica": step.replica,
            "step": step.index,
            "t_start_ns": t_start_ns,
            "t_end_ns": t_end_ns,
            "sched_start_ns": step.t_start_ns,
            "deadline_ns": step.t_end_ns,
            "duration_s": step.duration_s,
            "batch": step.batch,
            "prefill_tokens": step.prefill_tokens,
            "prefill_seqs": step.prefill_seqs,
            "scheduled": step.batch + step.prefill_seqs,
            "prompt_done_tokens": step.prompt_done_tokens,
            "cached_tokens": sum(n for _, n in step.cached),
            "cached": step.cached,
            "evicted_blocks": step.evicted_blocks,
            "tokens_emitted": step.tokens_emitted,
            "finished": len(step.finished),
            "preempted": len(step.preempted),
            "distinct_experts": step.distinct_experts,
            "weight_bytes": step.weight_bytes,
            "kv_bytes": step.kv_bytes,
            "memory_s": step.memory_s,
            "prefill_s": step.prefill_s,
            "overhead_s": step.overhead_s,
            "energy_j": step.energy_j,
            "idle_before_s": idle_s,
            "idle_energy_j": idle_energy_j,
            "running": running,
            "waiting": waiting,
            "kv_usage": kv_usage,
        }
        if step.spec is not None:  # speculative decoding: what the verification did
            v = step.spec
            rec.update(
                spec_drafts=v.drafts,
                spec_proposed=v.proposed,
                spec_accepted=v.accepted,
                spec_emitted=v.emitted,
                spec_accepted_per_pos=v.accepted_per_pos,
                draft_bytes=step.draft_bytes,
            )
        self._f.write(orjson.dumps(rec) + b"\n")

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


@dataclass(frozen=True, slots=True)
class FigureTruth:
    """The truth of each MBU figure over a window, from the step log (utilizations of the node).

    ``all_bytes``: what the steps that decode really read (weights of every expert their
    decode AND prompt tokens hit, plus KV) ÷ (window × node bandwidth) — the headline MBU's
    truth, equal to the configured efficiency × the share of time spent reading.
    ``decode_only``: the same steps charged only W(batch) — the dense bytes plus the
    expected distinct experts of their decode tokens alone under the engine's routing — plus
    KV: the truth of the decode-only figure W(B)·s. Both use the elapsed-time denominator.
    """

    all_bytes: float
    decode_only: float
    busy_fraction: float  # steps (any kind) ÷ window
    idle_fraction: float  # 1 − busy_fraction
    mixed_step_fraction: float  # of decode steps: those that also carry prompt tokens
    mean_batch: float  # decode sequences per decode step
    read_fraction: float  # of busy time: reading bytes (the rest: prefill compute, overhead)


def figure_truth(
    steps: Iterable[Mapping[str, Any]],
    window_start_ns: int,
    window_end_ns: int,
    node_bandwidth_bytes_per_s: float,
    decode_only_weight_bytes: Callable[[int], float],
) -> FigureTruth:
    """Integrate truth-log records (``TruthLog`` keys) over [w0, w1), edge steps pro rata.

    ``decode_only_weight_bytes(batch)``: W(batch) of the engine's own routing law (the
    simulator's ``routing.expected_per_layer``), so the decode-only truth is exact in mean.
    """
    all_b = dec_b = busy = memory = batch = dsteps = mixed = 0.0
    for s in steps:
        a, b = s["sched_start_ns"], s["deadline_ns"]
        lo, hi = max(a, window_start_ns), min(b, window_end_ns)
        if hi <= lo or b <= a:
            continue
        f = (hi - lo) / (b - a)
        busy += (hi - lo) / 1e9
        memory += f * s["memory_s"]
        if s["batch"] > 0:
            all_b += f * (s["weight_bytes"] + s["kv_bytes"])
            dec_b += f * (decode_only_weight_bytes(s["batch"]) + s["kv_bytes"])
            batch += f * s["batch"]
            dsteps += f
            mixed += f * (s["prefill_tokens"] > 0)
    span = (window_end_ns - window_start_ns) / 1e9
    denom = span * node_bandwidth_bytes_per_s
    return FigureTruth(
        all_bytes=all_b / denom,
        decode_only=dec_b / denom,
        busy_fraction=busy / span,
        idle_fraction=1.0 - busy / span,
        mixed_step_fraction=mixed / dsteps if dsteps else 0.0,
        mean_batch=batch / dsteps if dsteps else 0.0,
        read_fraction=memory / busy if busy else 0.0,
    )
