"""A probe's figures as intervals: each figure over each time block of the window.

The window is cut into k equal blocks; each block is a window of its own for the probe's own
derivation (``metrics.latency.compute_probe_metrics`` and the caller's MBU function), so a
block's T, τ, goodput and MBU are the same definitions over a shorter span, and
``metrics.intervals`` turns their spread into intervals around the whole window's figures.
The caller's MBU function reads the window's one sweep of the records (``metrics.mbu.spans``)
over each block's span, so a block's MBU makes no pass of its own over the records.

A block's requests are those *sent* in it (τ, the p99s, MBU's context) and its T the tokens
*received* in it, as for the window: the block T's add up to the window's exactly. Adjacent
blocks share requests in flight, which the autocorrelation factor of ``metrics.intervals``
accounts for. (T from the tokens of the block's own requests instead, independent Poisson
counts, over-covered: the server's feedback, a larger batch stepping slower, damps the
delivered tokens below the arrivals' spread; measured, docs/methodology.md.) Tokens per
joule per block divide the block's T by its mean power from the probe's power series; with
no series (or too few bins) its interval is T's, scaled (the energy taken as exact, a note
says so).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise

import numpy as np

from tokenwatt.load.probe import ProbeRun
from tokenwatt.metrics.intervals import (
    FIGURE_CONFIDENCE,
    Span,
    batch_means,
    block_count,
    quantile_interval,
    window_for_half_width_s,
)
from tokenwatt.metrics.latency import compute_probe_metrics
from tokenwatt.metrics.request import tpot_s, ttft_s
from tokenwatt.records import RequestRecord
from tokenwatt.result import FigureIntervals, Mbu
from tokenwatt.spec.slo import SLO

__all__ = ["MBU_HALF_WIDTH_NOTE", "block_edges", "block_runs", "probe_intervals"]

# MBU's interval is worth a note when wider than this on either side (1 percentage point).
MBU_HALF_WIDTH_NOTE = 0.01
MbuOf = Callable[[ProbeRun], Mbu | None]
Pair = tuple[float | None, float | None]


def block_edges(start_ns: int, end_ns: int, k: int) -> list[tuple[int, int]]:
    """k equal blocks of [start, end), in integer nanoseconds, edge to edge."""
    cuts = [start_ns + (end_ns - start_ns) * i // k for i in range(k + 1)]
    return list(pairwise(cuts))


def _last_ns(r: RequestRecord) -> int:
    """A record's last stamp: done, end or its last chunk (0: none)."""
    return max(r.done_ns or 0, r.end_ns or 0, r.chunk_ns[-1] if r.chunk_ns else 0)


class _Lifetimes:
    """Every record's life, gathered once for all blocks: scheduled, last stamp (done, end or
    last chunk), and whether it is still open (neither done nor ended)."""

    def __init__(self, records: Sequence[RequestRecord]) -> None:
        self.records = records
        self.scheduled = np.array([r.scheduled_ns for r in records], dtype=np.int64)
        self.last = np.array([_last_ns(r) for r in records], dtype=np.int64)
        self.open = np.array([r.done_ns is None and r.end_ns is None for r in records], dtype=bool)

    def overlapping(self, a: int, b: int) -> list[RequestRecord]:
        """The records that lived during [a, b), in the window's order: scheduled before b and
        not over before a. No figure of the block reads any other (each counts sends, tokens
        or busy time inside it); leaving them out makes k blocks cost about
        (block + lifetime)/window of k windows."""
        alive = (self.scheduled < b) & ((self.last >= a) | self.open)
        return [self.records[i] for i in np.flatnonzero(alive).tolist()]


def block_runs(run: ProbeRun, slo: SLO | None, k: int) -> list[ProbeRun]:
    """The probe seen over each of k blocks: its records alive then, a block for a window."""
    out = []
    lives = _Lifetimes(run.records)
    for a, b in block_edges(run.window_start_ns, run.window_end_ns, k):
        recs = lives.overlapping(a, b)
        metrics = compute_probe_metrics(
            recs, window_start_ns=a, window_end_ns=b, slo=slo, target_rate_rps=run.rate_rps
        )
        out.append(replace(run, records=recs, window_start_ns=a, window_end_ns=b, metrics=metrics))
    return out


def _pair(span: Span | None) -> Pair | None:
    return None if span is None else (span.low, span.high)


def _p99_spans(run: ProbeRun, k: int) -> tuple[Pair | None, Pair | None]:
    """Woodruff intervals of the p99 TTFT and TPOT, blocks by send time."""
    w0, span = run.window_start_ns, max(1, run.window_end_ns - run.window_start_ns)
    out: list[Pair | None] = []
    m = run.metrics
    for fn, point in ((ttft_s, m.ttft_s.p99), (tpot_s, m.tpot_s.p99)):
        vals, blocks = [], []
        for r in run.counted:
            v = fn(r) if r.ok else None
            if v is not None:
                vals.append(v)
                blocks.append(min(k - 1, (r.scheduled_ns - w0) * k // span))
        out.append(_pair(quantile_interval(vals, blocks, 0.99, point)))
    return out[0], out[1]


def _block_power_w(series: Sequence[tuple[float, float]], block_s: float, k: int) -> list[float]:
    """Mean power per block from the probe's series ((t from window start, W) per bin)."""
    sums, counts = [0.0] * k, [0] * k
    for t, w in series:
        i = int(t // block_s)
        if 0 <= i < k:
            sums[i] += w
            counts[i] += 1
    return [s / c if c else math.nan for s, c in zip(sums, counts, strict=True)]


def _tokens_per_joule(
    point: float | None,
    *,
    t_blocks: list[float],
    t_span: Span | None,
    t_point: float,
    series: Sequence[tuple[float, float]] | None,
    block_s: float,
) -> tuple[Pair | None, list[str]]:
    if point is None:
        return None, []
    k = len(t_blocks)
    power = _block_power_w(series or [], block_s, k)
    if sum(1 for p in power if p > 0) == k:
        return _pair(batch_means(point, [t / p for t, p in zip(t_blocks, power, strict=True)])), []
    if t_span is None or t_span.low is None or t_span.high is None or t_point <= 0:
        return None, []
    scale = point / t_point
    note = "tokens per joule: interval from T's alone (no power per block; energy taken as exact)"
    return (t_span.low * scale, t_span.high * scale), [note]


def _mbu_note(span: Pair | None, point: float | None, window_s: float) -> tuple[float | None, str]:
    if span is None or point is None or span[0] is None or span[1] is None:
        return None, ""
    half = (span[1] - span[0]) / 2
    need_s = window_for_half_width_s(window_s, half, MBU_HALF_WIDTH_NOTE)
    if half <= MBU_HALF_WIDTH_NOTE:
        return need_s, ""
    return need_s, (
        f"MBU ±{100 * half:.1f} pt ({FIGURE_CONFIDENCE:.0%}) over this {window_s:.0f} s window: "
        f"a window of about {need_s:.0f} s would bring it within ±1 pt"
    )


def probe_intervals(
    run: ProbeRun,
    slo: SLO | None,
    *,
    mbu: Mbu | None,
    mbu_of: MbuOf | None,
    tokens_per_joule: float | None = None,
    power_series: Sequence[tuple[float, float]] | None = None,
) -> FigureIntervals | None:
    """Every figure of the probe with its interval; None when the window holds too few
    requests for ``metrics.intervals.MIN_BLOCKS`` blocks."""
    m = run.metrics
    k = block_count(m.requests_counted)
    if k == 0 or m.window_s <= 0 or m.output_tokens_per_s is None:
        return None
    subs = block_runs(run, slo, k)
    t_blocks = [math.nan if (t := s.metrics.output_tokens_per_s) is None else t for s in subs]
    t_span = batch_means(m.output_tokens_per_s, t_blocks)
    block_mbu = [None if mbu is None or mbu_of is None else mbu_of(s) for s in subs]
    mbu_point = None if mbu is None else mbu.mbu
    mbu_span = _pair(batch_means(mbu_point, [None if b is None else b.mbu for b in block_mbu]))
    dec_point = None if mbu is None else mbu.mbu_decode_only
    dec_span = batch_means(dec_point, [None if b is None else b.mbu_decode_only for b in block_mbu])
    ttft, tpot = _p99_spans(run, k)
    block_s = m.window_s / k
    tpj, notes = _tokens_per_joule(
        tokens_per_joule,
        t_blocks=t_blocks,
        t_span=t_span,
        t_point=m.output_tokens_per_s,
        series=power_series,
        block_s=block_s,
    )
    need_s, mbu_note = _mbu_note(mbu_span, mbu_point, m.window_s)
    return FigureIntervals(
        confidence=FIGURE_CONFIDENCE,
        blocks=k,
        block_s=block_s,
        output_tokens_per_s=_pair(t_span),
        itl_token_weighted_s=_pair(
            batch_means(m.itl_token_weighted_s, [s.metrics.itl_token_weighted_s for s in subs])
        ),
        ttft_p99_s=ttft,
        tpot_p99_s=tpot,
        goodput_output_tokens_per_s=_pair(
            batch_means(
                m.goodput_output_tokens_per_s, [s.metrics.goodput_output_tokens_per_s for s in subs]
            )
        ),
        mbu=mbu_span,
        mbu_decode_only=_pair(dec_span),
        tokens_per_joule=tpj,
        mbu_window_for_1pt_s=need_s,
        notes=[*notes, *([mbu_note] if mbu_note else [])],
    )
