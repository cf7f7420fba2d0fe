"""Prompts prefilled more than once: KV pressure that no decoding stream sees.

With long prompts an engine short of KV cache preempts the newest sequence, often one still
in its prefill; it is queued again and its prompt prefilled from the start (recompute). The
streams already decoding never fall silent (``metrics.mbu.kv_pressure`` sees nothing), but the
preempted request's time to first token holds several prefills of its prompt.

Evidence from the client alone: a first-come-first-served prefill queue is work-conserving,
so a request's TTFT is at most its own prompt's prefill plus the prompts still ahead of it
when it was sent (sent earlier, no first token yet), each at the prefill time per prompt
token the client measures on requests that found no prompt ahead (the 10th percentile of
TTFT ÷ prompt tokens among them). ``RECOMPUTE_SLACK`` × that bound leaves room for decode
tokens sharing the steps; a TTFT beyond it means prompt tokens were prefilled again. More
than ``RECOMPUTE_MIN_SHARE`` of the counted requests beyond it raises ``kv_pressure``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from tokenwatt.records import RequestRecord
from tokenwatt.result import Mbu

__all__ = [
    "RECOMPUTE_MIN_SHARE",
    "RECOMPUTE_SLACK",
    "PromptRecompute",
    "mark_recompute",
    "prompt_recompute",
]

RECOMPUTE_SLACK = 2.0  # × the work-conserving bound: decode tokens sharing the prefill steps
RECOMPUTE_MIN_SHARE = 0.05  # of the counted requests beyond the bound
_MIN_ALONE = 3  # requests that found no prompt ahead, to measure the prefill time per token


@dataclass(frozen=True, slots=True)
class PromptRecompute:
    """Counted requests whose TTFT exceeds the prefill they could have waited for."""

    requests: int
    beyond: int
    prefill_s_per_token: float
    excess_s: float  # Σ (TTFT − bound) over the requests beyond it

    @property
    def seen(self) -> bool:
        return self.beyond >= 2 and self.beyond > RECOMPUTE_MIN_SHARE * self.requests


def _stamped(records: Sequence[RequestRecord]) -> list[tuple[int, int, int]]:
    """(sent, first token, prompt tokens) of every request that got a first token."""
    out = []
    for r in records:
        if r.sent_ns is not None and r.chunk_ns and r.prompt_tokens:
            out.append((r.sent_ns, r.chunk_ns[0], r.prompt_tokens))
    return out


def prompt_recompute(
    records: Sequence[RequestRecord], counted: Sequence[RequestRecord]
) -> PromptRecompute | None:
    """The counted requests against the work-conserving bound (module doc); None when too
    few requests found an empty queue to measure the prefill time per token."""
    every = _stamped(records)
    by_sent = sorted(every)
    sent = [s for s, _, _ in by_sent]
    sent_tokens = [0, *accumulate(n for _, _, n in by_sent)]
    by_first = sorted((f, n) for _, f, n in every)
    first = [f for f, _ in by_first]
    first_tokens = [0, *accumulate(n for _, n in by_first)]

    def ahead(t: int) -> int:
        """Prompt tokens sent before ``t`` without a first token by ``t``."""
        return (
            sent_tokens[bisect.bisect_left(sent, t)] - first_tokens[bisect.bisect_right(first, t)]
        )

    mine = _stamped(counted)
    alone = sorted((f - s) / n for s, f, n in mine if ahead(s) == 0)
    if len(alone) < _MIN_ALONE:
        return None
    per_token = alone[len(alone) // 10] / 1e9
    beyond, excess = 0, 0.0
    for s, f, n in mine:
        bound = RECOMPUTE_SLACK * (ahead(s) + n) * per_token
        ttft = (f - s) / 1e9
        if ttft > bound:
            beyond += 1
            excess += ttft - bound
    return PromptRecompute(len(mine), beyond, per_token, excess)


def mark_recompute(mbu: Mbu, recompute: PromptRecompute | None) -> Mbu:
    """Raise ``kv_pressure`` on ``mbu`` when prompts were prefilled again, the note with the
    direction: B = T·τ/R reads high (its streams include the ones re-prefilled); MBU counts
    steps from the token gaps, which the recomputes lengthen but do not hide."""
    if recompute is None or not recompute.seen or mbu.flags.kv_pressure:
        return mbu
    note = (
        f"KV pressure: {recompute.beyond} of {recompute.requests} requests waited "
        f"{recompute.excess_s:.1f} s in all beyond the prefill of every prompt ahead of them "
        "(their prompts were prefilled again: preempted and recomputed); B = T·τ/R reads "
        "high; MBU counts the steps from the token gaps and reads somewhat high (+1.7 pt, "
        "inside its band, in validation at 279 preemptions), far higher once preempted "
        "prompts pile up (time to first token in minutes); an engine's preemption counter "
        "gives the count"
    )
    flags = mbu.flags.model_copy(update={"kv_pressure": True})
    return mbu.model_copy(update={"flags": flags, "notes": [*mbu.notes, note]})
