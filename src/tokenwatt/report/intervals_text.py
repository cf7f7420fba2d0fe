"""A probe's figures with their intervals, in words, for the terminal and HTML reports.

One place writes "3,084 tok/s (2,851–3,317, 95 %)" for every figure of ``probe.intervals``
(``load.intervals``), so both views read alike; figures without an interval keep their point.
"""

from __future__ import annotations

from collections.abc import Callable

from tokenwatt.report.format import fmt_float, fmt_interval, fmt_tokens_per_s
from tokenwatt.result import MBU_DECODE_ONLY, FigureIntervals, ProbeSummary

__all__ = ["interval_caption", "interval_rows"]


def _ms(x: float | None) -> str:
    return fmt_float(None if x is None else x * 1e3)


def _pct(x: float | None) -> str:
    return fmt_float(None if x is None else x * 100, 3)


Row = tuple[str, float | None, str, str, Callable[[float | None], str]]


def _rows(p: ProbeSummary) -> list[Row]:
    """(label, point, field of ``FigureIntervals``, unit, number format) of each figure."""
    d = p.mbu_detail
    return [
        ("T", p.output_tokens_per_s, "output_tokens_per_s", "tok/s", fmt_tokens_per_s),
        ("τ", p.itl_token_weighted_s, "itl_token_weighted_s", "ms", _ms),
        ("TTFT p99", p.ttft_s.p99, "ttft_p99_s", "ms", _ms),
        ("TPOT p99", p.tpot_s.p99, "tpot_p99_s", "ms", _ms),
        ("goodput", p.goodput_output_tokens_per_s, "goodput_output_tokens_per_s", "tok/s",
         fmt_tokens_per_s),
        ("MBU", p.mbu, "mbu", "%", _pct),
        (MBU_DECODE_ONLY.label, None if d is None else d.mbu_decode_only, "mbu_decode_only", "%",
         _pct),
        ("tokens per joule", p.tokens_per_joule, "tokens_per_joule", "tok/J", fmt_float),
    ]  # fmt: skip


def interval_rows(p: ProbeSummary) -> list[tuple[str, str]]:
    """(label, "x unit (lo–hi, 95 %)") for each figure the probe has; [] without intervals."""
    iv: FigureIntervals | None = p.intervals
    if iv is None:
        return []
    out = []
    for label, point, field, unit, fmt in _rows(p):
        if point is not None:
            out.append((label, fmt_interval(point, getattr(iv, field), iv.confidence, unit, fmt)))
    return out


def interval_caption(p: ProbeSummary) -> str | None:
    """How the intervals were made, in one line; None without them."""
    iv = p.intervals
    if iv is None:
        return None
    return (
        f"{iv.confidence * 100:g} % intervals: batch means over {iv.blocks} blocks of "
        f"{iv.block_s:.1f} s of the window (p99s: Woodruff; an open end: the window does not "
        "bound it)"
    )
