"""Where to start the search: a rate near the boundary from short closed-loop stages.

The single-stream rate (one request in flight) is far below the boundary of any batching
engine (0.43 req/s against about 13 for Llama-3.1-8B on an H100), and every probe below the
boundary must still count the ~200 requests a p99 verdict needs: starting there cost minutes
per probe. Instead the run measures a short staircase of closed loops, C = 4, 16, 64, …
concurrent streams, each for one round of C requests (no warm-up: only the decode pace and
the lifetime are read), and stops climbing once the median TPOT passes ``TPOT_SHARE`` of the
TPOT limit. TTFT is not read: a closed loop starts its C streams at once, and the burst of C
prefills makes the first round's TTFT an artifact (64 streams of 1024-token prompts put the
median TTFT of a Llama-3.1-8B stage over 500 ms at a batch far below the boundary); a start
above a TTFT-bound boundary costs one quickly failed probe. The TPOT of a continuous-batching
engine grows about linearly with its batch, so the concurrency C* at which the median TPOT
would reach ``TPOT_SHARE`` × limit is interpolated linearly between the two stages around it,
and Little's law turns it into a rate: λ₀ = C* / E2E(C*), E2E interpolated the same way. The
share leaves room for the tail (the SLO is on the p99, the stage gives the median) and for
open-loop bursts. λ₀ only starts the search; the search's own probes decide the boundary.

A stage holds C streams only while every request of its round is in the server. The burst of
C prefills makes the last of them wait for their first token (a 256-stream Llama-3.1-8B stage
on an H100 at 8192 prompt tokens per step: TTFT up to 9 s), and under a TTFT limit the client
fails a request still waiting at ``metrics.slo.first_token_limit_s`` (10 × 500 ms): 98 of the
256 were cut before their first token, never joined the decode batch, and the stage's TPOT
(32 ms) and E2E (11 s) were those of the 158 that decoded. Read at C = 256 they put λ₀ at 23
req/s, 1.5–1.8× above a boundary of 12.9–13.2 req/s (three quickly failed probes and a pass far
below it before the search bracketed the boundary). So a stage's concurrency is the streams
that decoded (``Stage.decoded``: the requests of its round that ended), and its TPOT and E2E
are read at that concurrency: 64 + (30 − 18.2)/(35.2 − 18.2) · 94 = 129 streams,
E2E 9.85 s, λ₀ = 13.1 req/s.

An engine with fewer sequence slots than C (llama-server's ``-np 4``) queues the rest: TPOT
stays flat as C grows, so the TPOT rule never stops the climb, and a stage whose round did not
finish reads its E2E from the few fast requests (a 1024-stream stage started a one-core
llama-server's search at 14.5 req/s). A stage whose median TTFT is longer than a whole request
lifetime one stage below (``queued``) waited for slots, not for a burst of prefills (which adds
a fraction of a lifetime): the climb stops there and λ₀ is the last stage below it, C / E2E.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_STAGE_CONCURRENCY",
    "STAGE_FACTOR",
    "TPOT_SHARE",
    "Stage",
    "lifetime_at",
    "next_concurrency",
    "queued",
    "start_point",
    "start_rate",
]

STAGE_FACTOR = 4
MAX_STAGE_CONCURRENCY = 1024
TPOT_SHARE = 0.6


@dataclass(frozen=True, slots=True)
class Stage:
    """One closed-loop stage: C streams, median TPOT and TTFT, mean E2E (seconds), and how
    many of the round's requests decoded to their end (None: all C)."""

    concurrency: int
    tpot_s: float | None
    ttft_s: float | None
    e2e_s: float | None
    decoded: int | None = None

    @property
    def held(self) -> int:
        """The streams the decode batch held: those that decoded (the module doc)."""
        return self.concurrency if self.decoded is None else min(self.decoded, self.concurrency)

    def over(self, tpot_limit_s: float | None) -> bool:
        """Past the point the staircase looks for (or broken: no E2E measured)."""
        if self.e2e_s is None:
            return True
        return tpot_limit_s is not None and (self.tpot_s or 0.0) > TPOT_SHARE * tpot_limit_s


def queued(prev: Stage, cur: Stage) -> bool:
    """``cur``'s requests waited for sequence slots: its median TTFT is longer than a whole
    request lifetime (mean E2E) of the stage below (the module doc)."""
    return cur.ttft_s is not None and prev.e2e_s is not None and cur.ttft_s > prev.e2e_s


def _unqueued(stages: Sequence[Stage]) -> list[Stage]:
    """The stages below the first that queued for slots."""
    for i in range(1, len(stages)):
        if queued(stages[i - 1], stages[i]):
            return list(stages[:i])
    return list(stages)


def next_concurrency(stages: Sequence[Stage], tpot_limit_s: float | None) -> int | None:
    """The next stage's concurrency, or None when the staircase has found its step."""
    last = stages[-1]
    if last.over(tpot_limit_s) or last.concurrency >= MAX_STAGE_CONCURRENCY:
        return None
    if len(stages) >= 2 and queued(stages[-2], last):
        return None
    return min(MAX_STAGE_CONCURRENCY, last.concurrency * STAGE_FACTOR)


def _lerp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def start_point(stages: Sequence[Stage], tpot_limit_s: float | None) -> tuple[float, float] | None:
    """(C*, E2E(C*)) as the module doc interpolates them; None without a usable stage."""
    ok = _unqueued([s for s in stages if s.e2e_s])
    if not ok:
        return None
    below = [s for s in ok if not s.over(tpot_limit_s)]
    if not below:
        first = ok[0]
        return float(first.held), first.e2e_s or 1.0
    a = below[-1]
    above = [s for s in ok if s.concurrency > a.concurrency and s.held > a.held]
    if not above or tpot_limit_s is None:
        return float(a.held), a.e2e_s or 1.0
    b = above[0]
    ta, tb = a.tpot_s or 0.0, b.tpot_s or 0.0
    target = TPOT_SHARE * tpot_limit_s
    c = float(b.held)
    if tb > ta and tb > target:
        c = _lerp(target, ta, tb, a.held, b.held)
    e2e = _lerp(c, a.held, b.held, a.e2e_s or 0.0, b.e2e_s or 0.0)
    return (c, e2e) if e2e > 0 else None


def start_rate(stages: Sequence[Stage], tpot_limit_s: float | None) -> float | None:
    """λ₀ = C*/E2E(C*) (see the module doc); None without a usable stage."""
    point = start_point(stages, tpot_limit_s)
    return None if point is None else point[0] / point[1]


def lifetime_at(stages: Sequence[Stage], rate_rps: float) -> float | None:
    """The request lifetime the stages put at ``rate_rps``: E2E(C) where Little's law on
    their curve gives C / E2E(C) = ``rate_rps`` (E2E linear in C between stages, as
    ``start_point`` reads it: at λ₀ this is E2E(C*)); the lowest stage's E2E below the curve,
    the highest's above it; None without a usable stage. What a probe warms up for when
    nothing was measured at or below its rate (``load.bench.warmup_lifetime_s``)."""
    pts = sorted({(s.held, s.e2e_s) for s in _unqueued([s for s in stages if s.e2e_s])
                  if s.e2e_s})  # fmt: skip
    if not pts:
        return None
    if rate_rps <= pts[0][0] / pts[0][1]:
        return pts[0][1]
    for (c0, e0), (c1, e1) in itertools.pairwise(pts):
        if c1 <= c0 or rate_rps > c1 / e1:
            continue
        k = (e1 - e0) / (c1 - c0)
        if rate_rps * k >= 1.0:  # E2E grows as fast as C: no finite C on this segment
            return e1
        c = rate_rps * (e0 - c0 * k) / (1.0 - rate_rps * k)
        return e0 + (c - c0) * k
    return pts[-1][1]
