"""Time a replica spends on prompts alone, seen from the client: the single-stream case.

With one request in flight (the single-stream point, any concurrency-1 run) a prompt runs in
a prefill-only step: no decode is in flight, so none of its bytes are decode bytes, and the
interval from send to first token is that prefill (plus the network). The client's idle
measure (send → done) counts that interval as busy, so s = 1/τ was credited to the whole
elapsed time and the prompt's expert bytes were read as decode bytes: on an MoE model at
concurrency 1 MBU would read 33.6 % against a truth of 20.9 %.

From every request's four stamps — sent, first token, last token, done — a sweep over the
window gives, per replica:

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

__all__ = ["PromptPhase", "RequestSpan", "prompt_phase"]

# (sent, first token, last token, done); None where the stamp is missing (failed request)
RequestSpan = tuple[int | None, int | None, int | None, int | None]


@dataclass(frozen=True, slots=True)
class PromptPhase:
    """What the sweep measured over one window."""

    prefill_only_fraction: float  # share of the window a replica was busy with no decode
    prompt_mixing_share: float | None  # share of prompt time with a decode in flight


def _events(spans: Iterable[RequestSpan], w0: int, w1: int) -> list[tuple[int, int, int, int]]:
    """(time, ΔN, ΔD, ΔP) clipped to the window; P counts requests in their prompt phase."""
    out: list[tuple[int, int, int, int]] = []

    def add(a: int | None, b: int | None, dn: int, dd: int, dp: int) -> None:
        if a is None or b is None:
            return
        lo, hi = max(a, w0), min(b, w1)
        if hi > lo:
            out.append((lo, dn, dd, dp))
            out.append((hi, -dn, -dd, -dp))

    for sent, first, last, done in spans:
        stop = done if done is not None else last
        add(sent, stop, 1, 0, 0)
        add(first, last, 0, 1, 0)
        add(sent, first if first is not None else stop, 0, 0, 1)
    out.sort()
    return out


def prompt_phase(
    spans: Iterable[RequestSpan], window_start_ns: int, window_end_ns: int, replicas: int
) -> PromptPhase | None:
    """The prefill-only share and the prompt mixing share of a window (module doc); None
    without a window."""
    span = window_end_ns - window_start_ns
    if span <= 0 or replicas < 1:
        return None
    n = d = p = 0
    t = window_start_ns
    alone = prompt_time = prompt_mixed = 0.0
    for when, dn, dd, dp in _events(spans, window_start_ns, window_end_ns):
        dt = when - t
        alone += dt * max(0, min(replicas, n) - min(replicas, d)) / replicas
        prompt_time += dt * p
        prompt_mixed += dt * p * (d > 0)
        n, d, p, t = n + dn, d + dd, p + dp, when
    dt = window_end_ns - t
    alone += dt * max(0, min(replicas, n) - min(replicas, d)) / replicas
    prompt_time += dt * p
    prompt_mixed += dt * p * (d > 0)
    return PromptPhase(
        prefill_only_fraction=alone / span,
        prompt_mixing_share=prompt_mixed / prompt_time if prompt_time > 0 else None,
    )
