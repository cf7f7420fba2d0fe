"""Decode steps counted from the token gaps: how many, how long, and at what batch.

A decode step that carries b sequences ends one token gap in each of them. Weighting every gap
by 1/b (b = requests decoding at the gap's midpoint, per replica) therefore counts each step
once, and the weighted gaps give the steps' own law: their mean length, and the share of steps
at each batch. τ = Σ d ÷ Σ k weights every step by its batch instead, and the time-averaged
batch B = T·τ/R is not the steps' batch: the two part ways whenever a step's length goes with
its batch (an MoE step reads more experts at a larger batch; at small batch the long steps
that also carry a prompt's chunk are not a random sample of steps) and whenever the batch is
not Poisson over time (a queue that fills and drains). Both were seen: prefill-heavy
Llama-3.1-8B at B ≈ 3.4 (1/τ undercounted the steps by 9 %), and Qwen3-30B-A3B at B ≈ 6
over HTTP, whose steps' batch law was bimodal, not Poisson (docs/methodology.md, "MBU: mixed
steps"). On the simulator the client's law matched its step log batch by batch.

A gap's midpoint lies inside the request's own decode, so b ≥ 1. ``k`` (tokens of the chunk
that ends the gap) counts a chunk that coalesced k steps as k steps. Exact for R = 1 with stamps
on the step's clock; with R replicas b is the node's count ÷ R, an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokenwatt.geometry.routing import FloatArray
from tokenwatt.records import RequestRecord

__all__ = ["StepGaps", "StepLaw", "step_law_from_gaps"]


@dataclass(frozen=True, slots=True)
class StepLaw:
    """The decode steps of a window, per replica, each counted once."""

    mean_step_s: float  # Σ d/b ÷ Σ k/b: the mean decode step
    steps_per_s: float  # Σ k/b ÷ window ÷ R: decode steps per elapsed second per replica
    batches: FloatArray  # the batches seen (requests decoding per replica)
    shares: FloatArray  # share of decode steps at each batch (sums to 1)
    step_s: FloatArray  # the mean step at each batch

    @property
    def mean_batch(self) -> float:
        """The steps' mean batch (each step once; B = T·τ/R weights by time)."""
        return float((self.batches * self.shares).sum())


def _gaps(records: Sequence[RequestRecord]) -> tuple[FloatArray, ...]:
    """(gap midpoints, gap lengths, tokens of the chunk each gap ends, first and last chunk
    times sorted) over every request with two chunks or more."""
    mids, lengths, tokens, firsts, lasts = [], [], [], [], []
    for r in records:
        if len(r.chunk_ns) < 2:
            continue
        c = np.asarray(r.chunk_ns, dtype=np.float64)
        firsts.append(c[0])
        lasts.append(c[-1])
        mids.append((c[:-1] + c[1:]) / 2)
        lengths.append(np.diff(c))
        k = np.asarray(r.chunk_tokens, dtype=np.float64)
        tokens.append(k[1:] if len(k) == len(c) else np.ones(len(c) - 1))
    if not mids:
        return (np.zeros(0),) * 5
    cat = np.concatenate
    return cat(mids), cat(lengths), cat(tokens), np.sort(firsts), np.sort(lasts)


class StepGaps:
    """Every request's token gaps gathered once (``_gaps``); ``law`` reads any window of them,
    so a window and its interval blocks share one pass over the records. A request that
    lived outside a block has no gap midpoint in it and moves no batch there (its first and
    last chunks both lie before the block, or both after), so a block's law is that of its
    own records."""

    def __init__(self, records: Sequence[RequestRecord]) -> None:
        self.mid, self.length, self.tokens, self.firsts, self.lasts = _gaps(records)

    def tau_s(self, window_start_ns: int, window_end_ns: int) -> float | None:
        """The token-weighted mean gap over the gaps whose midpoint lies in the window: τ as
        the window's own decode saw it (a counted request's life may run into the warm-up
        before the window and the drain after it, at another load); None without a gap."""
        inside = (self.mid >= window_start_ns) & (self.mid < window_end_ns)
        tokens = float(self.tokens[inside].sum())
        return float(self.length[inside].sum()) / tokens / 1e9 if tokens > 0 else None

    def law(self, window_start_ns: int, window_end_ns: int, replicas: int) -> StepLaw | None:
        """The window's step law from the gaps whose midpoint lies in it (module doc); None
        without a gap there. The count Σ k/b is the steps themselves: over HTTP on loopback
        it came to 1,479 where the simulator logged 1,478 (a client's stamps move b at a gap
        only when a request starts or ends within a step of it)."""
        if window_end_ns <= window_start_ns or replicas < 1:
            return None
        inside = (self.mid >= window_start_ns) & (self.mid < window_end_ns)
        if not inside.any():
            return None
        mid = self.mid[inside]
        started = np.searchsorted(self.firsts, mid, side="right")
        decoding = started - np.searchsorted(self.lasts, mid, side="right")
        batch = np.maximum(1.0, decoding / replicas)
        steps = self.tokens[inside] / batch  # each step once
        total = float(steps.sum())
        if total <= 0:
            return None
        values, where = np.unique(batch, return_inverse=True)
        counts = np.bincount(where, weights=steps)
        spans_s = np.bincount(where, weights=self.length[inside] / batch) / 1e9
        per_s = total / ((window_end_ns - window_start_ns) / 1e9) / replicas
        return StepLaw(
            mean_step_s=float(spans_s.sum()) / total,
            steps_per_s=per_s,
            batches=values,
            shares=counts / total,
            step_s=spans_s / counts,
        )


def step_law_from_gaps(
    records: Sequence[RequestRecord], window_start_ns: int, window_end_ns: int, replicas: int
) -> StepLaw | None:
    """The step law of ``records`` over one window (``StepGaps.law``)."""
    return StepGaps(records).law(window_start_ns, window_end_ns, replicas)
