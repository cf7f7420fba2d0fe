"""Agent-session figures of a probe over an agent trace (``traffic.agent_traces``).

What an agent workload is sized in is users, not requests: AgentPerf and InferenceX's agentic
scenario state the most concurrent agent sessions a node serves at a target speed. So:

* ``concurrent_sessions``: the time-weighted mean number of conversations in flight over the
  window. Conversation c is in flight from its first request's scheduled send to its last
  request's end (the stream's end, or its failure), tool and think gaps between its turns
  included (the user is still there); Σ over conversations of that span's overlap with the
  window ÷ the window. A bench's boundary probe (the highest passing rate) gives the sessions
  at the SLO; divided by the GPUs, by the mean power in kW where power was measured, and by
  the node's price per hour where the spec gives one.
* ``ttft_by_context``: TTFT of the counted, answered requests split by their context length
  (the prompt tokens the client sent, the resent history included) at ``CONTEXT_EDGES_TOKENS``:
  a long reused context is cheap with a prefix cache and expensive without one, and a mean
  over all turns hides which.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokenwatt.metrics.request import is_counted, ttft_s
from tokenwatt.metrics.stats import interpolated_quantile
from tokenwatt.records import RequestRecord
from tokenwatt.result import AgentFigures, ContextTtft

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["CONTEXT_EDGES_TOKENS", "agent_figures", "concurrent_sessions", "ttft_by_context"]

# Context-length bins of TTFT: below 8k, 8k-32k, 32k-128k, 128k and over (tokens)
CONTEXT_EDGES_TOKENS: tuple[int, ...] = (8192, 32768, 131072)
W_PER_KW = 1000.0


def concurrent_sessions(
    records: Sequence[RequestRecord],
    conversations: npt.NDArray[np.int64],
    *,
    window_start_ns: int,
    window_end_ns: int,
) -> float | None:
    """Mean conversations in flight over the window (see module); None for an empty one."""
    if window_end_ns <= window_start_ns:
        return None
    spans: dict[int, tuple[int, int]] = {}
    for r in records:
        end = r.done_ns or r.end_ns or window_end_ns  # never ended: in flight to the end
        c = int(conversations[r.request_id])
        lo, hi = spans.get(c, (r.scheduled_ns, end))
        spans[c] = (min(lo, r.scheduled_ns), max(hi, end))
    inside = sum(
        max(0, min(hi, window_end_ns) - max(lo, window_start_ns)) for lo, hi in spans.values()
    )
    return inside / (window_end_ns - window_start_ns)


def ttft_by_context(
    records: Sequence[RequestRecord], *, window_start_ns: int, window_end_ns: int
) -> list[ContextTtft]:
    """TTFT per context-length bin over counted, answered requests; bins without one left
    out."""
    edges: tuple[int | None, ...] = (0, *CONTEXT_EDGES_TOKENS, None)
    out: list[ContextTtft] = []
    for lo_or_none, hi in itertools.pairwise(edges):
        lo = lo_or_none or 0
        ttfts = sorted(
            t
            for r in records
            if r.ok
            and is_counted(r, window_start_ns, window_end_ns)
            and r.prompt_tokens_client >= lo
            and (hi is None or r.prompt_tokens_client < hi)
            and (t := ttft_s(r)) is not None
        )
        if ttfts:
            out.append(
                ContextTtft(
                    min_tokens=lo,
                    max_tokens=hi,
                    requests=len(ttfts),
                    ttft_mean_s=sum(ttfts) / len(ttfts),
                    ttft_p50_s=interpolated_quantile(ttfts, 0.5, presorted=True),
                    ttft_p99_s=interpolated_quantile(ttfts, 0.99, presorted=True),
                )
            )
    return out


def agent_figures(
    records: Sequence[RequestRecord],
    conversations: npt.NDArray[np.int64] | None,
    *,
    window_start_ns: int,
    window_end_ns: int,
    gpus: int,
    mean_power_w: float | None,
    price_per_gpu_hour: float | None,
) -> AgentFigures | None:
    """The probe's agent figures; None unless its requests come from agent conversations."""
    if conversations is None:
        return None
    w = {"window_start_ns": window_start_ns, "window_end_ns": window_end_ns}
    sessions = concurrent_sessions(records, conversations, **w)
    return AgentFigures(
        concurrent_sessions=sessions,
        sessions_per_gpu=None if sessions is None else sessions / gpus,
        sessions_per_kw=sessions / (mean_power_w / W_PER_KW)
        if sessions is not None and mean_power_w
        else None,
        sessions_per_usd_per_hour=sessions / (price_per_gpu_hour * gpus)
        if sessions is not None and price_per_gpu_hour
        else None,
        ttft_by_context=ttft_by_context(records, **w),
    )
