"""Figures for conversations and cached prefixes, from the per-request records.

* ``session_stats``: a session belongs to the window when its first turn was scheduled in
  it (the window admits sessions, the conversation then dues its own turns). Turns per
  session counts answered turns of those sessions wherever they fell; TTFT of first vs later
  turns is over counted, answered turns: later turns resend the history, so with a prefix
  cache their TTFT covers only the new part, without one the whole grown prompt.
* ``cached_prompt_fraction``: Σ cached_tokens ÷ Σ prompt_tokens over counted, answered
  requests whose server reported ``usage.prompt_tokens_details.cached_tokens``; None when
  none did (absent is unknown, not zero).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tokenwatt.metrics.request import is_counted, ttft_s
from tokenwatt.records import RequestRecord
from tokenwatt.result import SessionStats

__all__ = ["cached_prompt_fraction", "session_stats"]


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
