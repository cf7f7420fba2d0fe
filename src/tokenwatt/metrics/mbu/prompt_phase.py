"""Time a replica spends on prompts alone, seen from the client: the single-stream case.

With one request in flight (the single-stream point, any concurrency-1 run) a prompt runs in
a prefill-only step: no decode is in flight, so none of its bytes are decode bytes, and the
interval from send to first token is that prefill (plus the network). The client's idle
measure (send → done) counts that interval as busy, so s = 1/τ was credited to the whole
elapsed time and the prompt's expert bytes were read as decode bytes: on an MoE model at
concurrency 1 MBU would read 33.6 % against a truth of 20.9 %.

From every request's four stamps — sent, first token, last token, done — the one sweep
over the requests' spans (``spans``) gives, per replica:

    N(t) = requests in flight (sent ≤ t < done),  D(t) = requests decoding (first ≤ t < last)
    prefill-only share = E_t[max(0, min(R, N) − min(R, D))] / R
    prompt mixing share = (prompt time with D > 0) ÷ (prompt time)

The first is time no decode step runs although the replica is busy (exact for R = 1); the
second is the share of prompt processing that can ride in a decode step (a prompt that
arrives at an idle replica runs alone). ``metrics.mbu.mixed_steps`` takes the decode-busy share
as 1 − idle − prefill-only and scales the prompts per decode step by the mixing share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tokenwatt.metrics.mbu.spans import RequestSpan, SpanSweep, SpanTotals

__all__ = ["PromptPhase", "RequestSpan", "phase_of", "prompt_phase"]


@dataclass(frozen=True, slots=True)
class PromptPhase:
    """What the sweep measured over one window."""

    prefill_only_fraction: float  # share of the window a replica was busy with no decode
    prompt_mixing_share: float | None  # share of prompt time with a decode in flight


def phase_of(totals: SpanTotals | None) -> PromptPhase | None:
    """The prefill-only share and the prompt mixing share of a window's span integrals
    (``spans.SpanSweep.totals``); None without a window."""
    if totals is None:
        return None
    return PromptPhase(totals.prefill_only_fraction, totals.prompt_mixing_share)


def prompt_phase(
    spans: Iterable[RequestSpan], window_start_ns: int, window_end_ns: int, replicas: int
) -> PromptPhase | None:
    """The prefill-only share and the prompt mixing share of a window (module doc); None
    without a window."""
    return phase_of(SpanSweep(spans, replicas).totals(window_start_ns, window_end_ns))
