"""Per-request latency definitions, the one place each is written down.

TTFT = first content chunk − request sent; E2E = last content chunk − request sent (a
trailing usage-only chunk does not extend it); TPOT = (E2E − TTFT) / (n − 1) for n ≥ 2
output tokens (the vLLM / MLPerf definition). Reasoning tokens are output tokens in every one
of these; a reasoning model's stream also has a time to first reasoning token and a time to
first answer token (first chunk of each kind − request sent), TTFT being the earlier.
``latency`` (distributions) and ``slo`` (the verdict) both read requests through these, so a
figure and its check cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenwatt.records import RequestRecord

__all__ = [
    "counted_records",
    "decode_ns",
    "e2e_s",
    "is_counted",
    "tpot_s",
    "ttft_answer_s",
    "ttft_reasoning_s",
    "ttft_s",
]

_NS = 1e9


def is_counted(rec: RequestRecord, window_start_ns: int, window_end_ns: int) -> bool:
    """A request counts when it was scheduled inside the window, half-open ``[start, end)``."""
    return window_start_ns <= rec.scheduled_ns < window_end_ns


def counted_records(
    records: Iterable[RequestRecord], window_start_ns: int, window_end_ns: int
) -> list[RequestRecord]:
    return [r for r in records if is_counted(r, window_start_ns, window_end_ns)]


def ttft_s(rec: RequestRecord) -> float | None:
    if rec.sent_ns is None or rec.first_token_ns is None:
        return None
    return (rec.first_token_ns - rec.sent_ns) / _NS


def ttft_reasoning_s(rec: RequestRecord) -> float | None:
    """First chunk carrying reasoning text − request sent; None without reasoning."""
    if rec.sent_ns is None or rec.first_reasoning_ns is None:
        return None
    return (rec.first_reasoning_ns - rec.sent_ns) / _NS


def ttft_answer_s(rec: RequestRecord) -> float | None:
    """First chunk carrying answer text (content, tool calls) − request sent; None when the
    answer never began (e.g. all ``max_tokens`` went to reasoning)."""
    if rec.sent_ns is None or rec.first_answer_ns is None:
        return None
    return (rec.first_answer_ns - rec.sent_ns) / _NS


def e2e_s(rec: RequestRecord) -> float | None:
    if rec.sent_ns is None or rec.end_ns is None:
        return None
    return (rec.end_ns - rec.sent_ns) / _NS


def decode_ns(rec: RequestRecord) -> int | None:
    """E2E − TTFT: last content chunk − first content chunk."""
    if rec.first_token_ns is None or rec.end_ns is None:
        return None
    return rec.end_ns - rec.first_token_ns


def tpot_s(rec: RequestRecord) -> float | None:
    """(E2E − TTFT) / (n − 1); None when n < 2 (no inter-token time exists)."""
    n = rec.output_tokens
    d = decode_ns(rec)
    if d is None or n < 2:
        return None
    return d / _NS / (n - 1)
