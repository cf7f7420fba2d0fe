"""KV pressure seen from the client: streams that stall while the others decode.

When the KV cache runs out an engine preempts sequences (vLLM, SGLang and the simulator
recompute them: the sequence goes back to the queue and its prompt plus what it generated is
prefilled again). The preempted stream falls silent for the wait and the recompute, and then
resumes. Inside τ = Σ(e2e − ttft)/Σ(n − 1) that silence counts as decode time, so τ and
B = T·τ/R read high by the stalled share: gpt-oss-120b at 32k-token prompts under 369
preemptions read B 12–25 % above the true batch and MBU +2.3 to +6.0 pt, with no flag.

Evidence (per counted stream, from its chunk arrival times): a gap between two of its chunks
during which the other streams kept decoding. A long *step* (a prompt chunk riding with the
decodes) stalls every stream of the replica at once; a preemption stalls one stream while
the rest move on. With one replica every step emits a token to every running sequence, so a
gap is a stall when any other stream received ``STALL_OTHER_CHUNKS`` chunks inside it (steps
ran without this sequence; ten, not one, so that delivery jitter cannot fake it). With
R replicas the client does not know which streams share one, and a long step on the stream's
own replica holds back about 1/R of the others: there a gap is a stall when more than ``1 −
1/(2R)`` of the other streams in flight moved (conservative: under heavy thrashing, where
most streams wait, stalls go unseen and only an engine counter raises the flag). Each
stall's excess over the stream's median inter-chunk gap is time the sequence was not in the
batch: taking it out of the decode time gives the corrected τ' and B' = T·τ'/R, which lands
closer to the true batch (validated in tests/test_kv_pressure.py). The step rate is less
sure: s = 1/τ' can overshoot where stalls and recomputes lengthen steps, s = 1/τ
undershoots, so under pressure MBU is given as the corrected figure with the raw-τ figure as
the band's other end. An engine's preemption counter (``vllm:num_preemptions_total``), when
scraped, raises the flag on its own (direction only: the client saw nothing to correct by).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import median

from tokenwatt.records import RequestRecord
from tokenwatt.result import Mbu

__all__ = [
    "STALL_MIN_SHARE",
    "STALL_OTHER_CHUNKS",
    "KvPressure",
    "mark_kv_pressure",
    "stream_stalls",
]

# Other streams' chunks inside a gap that make it a stall (steps ran without the stream).
# Measured: the simulator's preemption stalls let the others move a median 124 chunks (5 of
# 140 under 10); delivery jitter of the real-time simulator on a loaded 2-core machine (6
# streams, no preemption) at most 8. Ten keeps nearly every stall and no jitter.
STALL_OTHER_CHUNKS = 10
# Stalls below this share of decode time are delivery jitter, not pressure: the simulator in
# real time on a loaded 2-core machine (6 streams, no preemption) showed 0.7 %.
STALL_MIN_SHARE = 0.02
_CANDIDATE_RATIO = 3.0  # only gaps over 3× the stream's median gap are examined


@dataclass(frozen=True, slots=True)
class KvPressure:
    """Stalls of the counted streams and the decode time they add (seconds)."""

    stalls: int
    streams_stalled: int
    streams: int
    stalled_s: float  # Σ (stall − the stream's median gap) over counted streams
    stalled_in_window_s: float  # the same, clipped to the window
    decode_s: float  # Σ (last − first token) over counted streams

    @property
    def stalled_share(self) -> float:
        """Of the counted streams' decode time: stalled."""
        return self.stalled_s / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def seen(self) -> bool:
        """Stalls above the delivery jitter of a loaded client (``STALL_MIN_SHARE``)."""
        return self.stalls > 0 and self.stalled_share >= STALL_MIN_SHARE

    def corrected_tau(self, tau_s: float) -> float:
        """τ' = τ × (decode time − stalled time) ÷ decode time."""
        if self.decode_s <= 0:
            return tau_s
        return tau_s * max(0.0, self.decode_s - self.stalled_s) / self.decode_s


class _Streams:
    """Every stream's chunk stamps, sorted by first stamp, for the others-moved test."""

    def __init__(self, records: Sequence[RequestRecord]) -> None:
        rows = sorted((list(r.chunk_ns), id(r)) for r in records if len(r.chunk_ns))
        self.stamps = [s for s, _ in rows]
        self.ids = [i for _, i in rows]
        self.starts = [s[0] for s in self.stamps]
        self.longest = max((s[-1] - s[0] for s in self.stamps), default=0)

    def moved(self, a: int, b: int, own: int, replicas: int) -> int:
        """The most chunks any other stream received inside (a, b) if the others moved as a
        stall needs (module doc), else 0."""
        others = moved = most = 0
        lo = bisect.bisect_left(self.starts, a - self.longest)
        for j in range(lo, bisect.bisect_left(self.starts, b)):
            stamps = self.stamps[j]
            if self.ids[j] == own or stamps[-1] <= a:
                continue
            others += 1
            inside = bisect.bisect_left(stamps, b) - bisect.bisect_right(stamps, a)
            moved += inside >= STALL_OTHER_CHUNKS
            most = max(most, inside)
        if replicas == 1:  # every step emits to every running sequence: one mover proves it
            return most if moved > 0 else 0
        return most if moved > others * (1.0 - 1.0 / (2 * replicas)) else 0


def _caught_up(stamps: list[int], i: int, most: int) -> bool:
    """Delivery jitter, not a stall: the tokens were made during the gap and arrive in a burst
    right after it — more than half the others' count within an eighth of the gap. A resumed
    sequence emits one token per step again, about an eighth of that count."""
    a, b = stamps[i], stamps[i + 1]
    burst = bisect.bisect_right(stamps, b + (b - a) // 8) - (i + 1)
    return burst > most / 2


def stream_stalls(
    records: Sequence[RequestRecord],
    counted: Sequence[RequestRecord],
    window_start_ns: int,
    window_end_ns: int,
    replicas: int = 1,
) -> KvPressure:
    """The stalls of the counted streams against every stream in ``records`` (module doc)."""
    streams = _Streams(records)
    stalls = stalled_streams = 0
    stalled = in_window = decode = 0.0
    for r in counted:
        stamps = list(r.chunk_ns)
        if len(stamps) < 3:
            continue
        decode += (stamps[-1] - stamps[0]) / 1e9
        # the stream's typical gap: the median, but never below its mean over the decode (reads
        # that coalesce chunks give zero gaps)
        typical = max(
            median(b - a for a, b in pairwise(stamps)), (stamps[-1] - stamps[0]) / (len(stamps) - 1)
        )
        found = 0
        for i, (a, b) in enumerate(pairwise(stamps)):
            if b - a <= _CANDIDATE_RATIO * typical:
                continue
            most = streams.moved(a, b, id(r), replicas)
            if most == 0 or _caught_up(stamps, i, most):
                continue
            found += 1
            excess = (b - a - typical) / 1e9
            stalled += excess
            lo, hi = max(a, window_start_ns), min(b, window_end_ns)
            in_window += max(0, hi - lo) / (b - a) * excess
        stalls += found
        stalled_streams += found > 0
    return KvPressure(stalls, stalled_streams, len(counted), stalled, in_window, decode)


def mark_kv_pressure(
    corrected: Mbu,
    *,
    pressure: KvPressure | None,
    uncorrected: Mbu | None = None,
    engine_preemptions: float | None = None,
) -> Mbu:
    """Raise ``kv_pressure`` on an MBU whose τ was corrected for the client's stalls
    (``uncorrected``: the same figure from the raw τ), or that an engine's preemption counter
    says was under pressure; the note gives the direction and the size."""
    seen = pressure is not None and pressure.seen
    counted = engine_preemptions is not None and engine_preemptions > 0
    if not seen and not counted:
        return corrected
    parts = []
    if counted:
        parts.append(f"the engine counted {engine_preemptions:.0f} preemptions in the window")
    if seen and pressure is not None:
        share = pressure.stalled_share
        parts.append(
            f"{pressure.streams_stalled} of {pressure.streams} streams stalled "
            f"{pressure.stalls} times while the others decoded ({share:.1%} of decode time: "
            "preempted and recomputed)"
        )
    note = "KV pressure: " + "; ".join(parts)
    i, u = corrected.inputs, uncorrected.inputs if uncorrected is not None else None
    if seen and u is not None and i.batch_per_replica and u.batch_per_replica:
        high = (u.batch_per_replica / i.batch_per_replica - 1.0) * 100
        note += (
            f": τ and B exclude the stalls (B {i.batch_per_replica:.1f}; with them "
            f"{u.batch_per_replica:.1f}, {high:+.0f} %)"
        )
        if corrected.mbu is not None and uncorrected is not None and uncorrected.mbu is not None:
            lo, hi = sorted((uncorrected.mbu, corrected.mbu))
            note += (
                f"; the step rate under preemption is bounded, not known: with τ as measured "
                f"MBU reads {100 * uncorrected.mbu:.1f} %, so it lies in "
                f"[{100 * lo:.1f}, {100 * hi:.1f}] %"
            )
    else:
        note += (
            ": MBU reads low (recomputed prefills and the waits lengthen τ, so s = 1/τ counts "
            "too few steps; in validation τ as measured read 1.7 pt under the truth at 173 "
            "preemptions) while B = T·τ/R reads high; the client saw no stall to correct them by"
        )
    flags = corrected.flags.model_copy(update={"kv_pressure": True})
    return corrected.model_copy(update={"flags": flags, "notes": [*corrected.notes, note]})
