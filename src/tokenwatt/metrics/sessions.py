"""Figures for conversations and cached prefixes, from the per-request records.

* ``session_stats``: a session belongs to the window when its first turn was scheduled in
  it (the window admits sessions, the conversation then dues its own turns). Turns per
  session counts answered turns of those sessions wherever they fell; TTFT of first vs later
  turns is over counted, answered turns: later turns resend the history, so with a prefix
  cache their TTFT covers only the new part, without one the whole grown prompt.
* ``cached_prompt_fraction``: Σ cached_tokens ÷ Σ prompt_tokens over counted, answered
  requests whose server reported ``usage.prompt_tokens_details.cached_tokens``; None when
  none did (absent is unknown, not zero).
* ``ideal_prefix_fraction``: over the same counted, answered requests of a trace replay with
  block hashes, Σ the tokens an unbounded prefix cache could serve (the leading full blocks an
  earlier request of the replay sent) ÷ Σ prompt tokens (the client's counts: the trace's).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from tokenwatt.metrics.request import is_counted, ttft_s
from tokenwatt.records import RequestRecord
from tokenwatt.result import SessionStats

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["cached_prompt_fraction", "ideal_prefix_fraction", "session_stats"]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def session_stats(
    records: Sequence[RequestRecord],
    *,
    window_start_ns: int,
    window_end_ns: int,
    completed_ids: Collection[int],
) -> SessionStats | None:
    """Per-session figures; None when no record belongs to a session."""
    if not any(r.session_id is not None for r in records):
        return None
    started = {
        r.session_id
        for r in records
        if r.session_id is not None
        and r.turn == 0
        and is_counted(r, window_start_ns, window_end_ns)
    }
    answered = sum(1 for r in records if r.ok and r.session_id in started)
    first: list[float] = []
    later: list[float] = []
    for r in records:
        if r.session_id is None or not r.ok or not is_counted(r, window_start_ns, window_end_ns):
            continue
        t = ttft_s(r)
        if t is not None:
            (first if r.turn == 0 else later).append(t)
    return SessionStats(
        sessions_started=len(started),
        sessions_completed=sum(1 for s in started if s in completed_ids),
        turns_per_session_mean=answered / len(started) if started else None,
        ttft_first_turn_mean_s=_mean(first),
        ttft_later_turns_mean_s=_mean(later),
    )


def cached_prompt_fraction(
    records: Sequence[RequestRecord], *, window_start_ns: int, window_end_ns: int
) -> float | None:
    """Prompt tokens served from the server's prefix cache ÷ prompt tokens (see module)."""
    cached = prompt = 0
    for r in records:
        if (
            r.ok
            and r.cached_tokens is not None
            and r.prompt_tokens
            and is_counted(r, window_start_ns, window_end_ns)
        ):
            cached += min(r.cached_tokens, r.prompt_tokens)
            prompt += r.prompt_tokens
    return cached / prompt if prompt else None


def ideal_prefix_fraction(
    records: Sequence[RequestRecord],
    shared_tokens: npt.NDArray[np.int64] | None,
    *,
    window_start_ns: int,
    window_end_ns: int,
) -> float | None:
    """The hit rate the hashes allow these requests (see module); None without hashes."""
    if shared_tokens is None:
        return None
    shared = prompt = 0
    for r in records:
        if r.ok and is_counted(r, window_start_ns, window_end_ns):
            shared += min(int(shared_tokens[r.request_id]), r.prompt_tokens_client)
            prompt += r.prompt_tokens_client
    return shared / prompt if prompt else None
