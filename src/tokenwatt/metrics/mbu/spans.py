"""One sweep over the requests' spans, read by every MBU refinement of a window and its blocks.

Every request gives up to three spans on the client's clock (sent, first token, last token,
done): in flight [sent, done), decoding [first, last), in its prompt [sent, first). Swept once
in time order they give, per replica, step functions of the time:

    N(t) in flight,  D(t) decoding,  P(t) in their prompt

and every refinement is an integral of one of them over the window: the idle share
E[max(0, R − N)]/R (``mixed_steps.idle_fraction_from_intervals``), the prompt-only share
E[max(0, min(R, N) − min(R, D))]/R and the share of prompt time with a decode in flight
(``prompt_phase``), the decode batch E[D]/R (``mixed_steps.decode_batch_from_intervals``),
the share of time anything decodes E[D > 0] (the engine witness's decode share).
The sweep keeps their running integrals at each event (exact integers of nanoseconds), so
the integral over any [a, b) costs two look-ups: a window and each of its interval blocks
read the same sweep instead of sweeping their records again. A span clipped to a window
contributes to it exactly what the sweep's step function does there, so a block's figures are
those of its own records (a request that lived outside the block adds nothing inside it).

The token gaps that count decode steps (``step_gaps``) are gathered in the same pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tokenwatt.metrics.mbu.step_gaps import StepGaps
from tokenwatt.records import RequestRecord

__all__ = ["RequestSpan", "RequestSweep", "SpanSweep", "SpanTotals"]

# (sent, first token, last token, done); None where the stamp is missing (failed request)
RequestSpan = tuple[int | None, int | None, int | None, int | None]
IntArray = np.ndarray[tuple[int, ...], np.dtype[np.int64]]


@dataclass(frozen=True, slots=True)
class SpanTotals:
    """Integrals over one window, in nanoseconds × requests (exact integers)."""

    span_ns: int  # the window's length
    replicas: int
    idle_ns: int  # ∫ max(0, R − N)
    prompt_alone_ns: int  # ∫ max(0, min(R, N) − min(R, D))
    prompt_ns: int  # ∫ P
    prompt_mixed_ns: int  # ∫ P · [D > 0]
    decoding_ns: int  # ∫ D
    decode_busy_ns: int  # ∫ [D > 0]

    @property
    def idle_fraction(self) -> float:
        """Share of the window a replica had no request."""
        return self.idle_ns / self.replicas / self.span_ns

    @property
    def prefill_only_fraction(self) -> float:
        """Share of the window a replica was busy with no decode in flight."""
        return self.prompt_alone_ns / self.replicas / self.span_ns

    @property
    def prompt_mixing_share(self) -> float | None:
        """Share of prompt time with a decode in flight; None without prompt time."""
        return self.prompt_mixed_ns / self.prompt_ns if self.prompt_ns > 0 else None

    @property
    def decode_share(self) -> float:
        """Share of the window in which some request was between its first and last token."""
        return 1.0 - (self.span_ns - self.decode_busy_ns) / self.span_ns

    @property
    def decode_batch(self) -> float:
        """Mean number of requests decoding per replica."""
        return self.decoding_ns / self.span_ns / self.replicas


def _events(spans: Iterable[RequestSpan]) -> tuple[list[int], list[tuple[int, int, int]]]:
    """(times, (ΔN, ΔD, ΔP)) of every span with a positive length."""
    times: list[int] = []
    deltas: list[tuple[int, int, int]] = []

    def add(a: int | None, b: int | None, delta: tuple[int, int, int]) -> None:
        if a is not None and b is not None and b > a:
            times.extend((a, b))
            deltas.extend((delta, (-delta[0], -delta[1], -delta[2])))

    for sent, first, last, done in spans:
        stop = done if done is not None else last
        add(sent, stop, (1, 0, 0))
        add(first, last, (0, 1, 0))
        add(sent, first if first is not None else stop, (0, 0, 1))
    return times, deltas


class SpanSweep:
    """N, D and P swept once (module doc); ``totals`` integrates them over any window."""

    def __init__(self, spans: Iterable[RequestSpan], replicas: int) -> None:
        times, deltas = _events(spans)
        order = np.argsort(np.asarray(times, dtype=np.int64), kind="stable")
        self.replicas = replicas
        self.times: IntArray = np.asarray(times, dtype=np.int64)[order]
        d = np.asarray(deltas, dtype=np.int64).reshape(-1, 3)[order]
        n, dec, p = (np.cumsum(d[:, j]) for j in range(3))  # state after each event
        r = replicas
        # the integrands on each segment [t_i, t_i+1), and at rest (nothing in flight)
        self.values: IntArray = np.stack(
            [
                np.maximum(0, r - n),
                np.maximum(0, np.minimum(r, n) - np.minimum(r, dec)),
                p,
                p * (dec > 0),
                dec,
                (dec > 0).astype(np.int64),
            ]
        )
        self.rest = np.array([r, 0, 0, 0, 0, 0], dtype=np.int64)
        seg = np.diff(self.times)
        self.cumulative: IntArray = np.concatenate(
            [np.zeros((6, 1), dtype=np.int64), np.cumsum(self.values[:, :-1] * seg, axis=1)],
            axis=1,
        )

    def _at(self, t: int) -> IntArray:
        """The six running integrals from the first event to ``t`` (negative before it)."""
        if len(self.times) == 0:
            return self.rest * t
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        if i < 0:
            return self.rest * (t - int(self.times[0]))
        return self.cumulative[:, i] + self.values[:, i] * (t - int(self.times[i]))

    def totals(self, window_start_ns: int, window_end_ns: int) -> SpanTotals | None:
        """The integrals over [start, end); None without a window or a replica."""
        span = window_end_ns - window_start_ns
        if span <= 0 or self.replicas < 1:
            return None
        idle, alone, prompt, mixed, decoding, busy = (
            int(x) for x in self._at(window_end_ns) - self._at(window_start_ns)
        )
        return SpanTotals(span, self.replicas, idle, alone, prompt, mixed, decoding, busy)


def record_spans(records: Iterable[RequestRecord]) -> list[RequestSpan]:
    """Every record's four stamps (module doc)."""
    return [(r.sent_ns, r.first_token_ns, r.end_ns, r.done_ns) for r in records]


class RequestSweep:
    """A probe's records swept once for MBU: their spans and their token gaps. A window and
    its interval blocks read it (``mixed_steps.regime_from_records(sweep=...)``)."""

    def __init__(self, records: Sequence[RequestRecord], replicas: int) -> None:
        self.replicas = replicas
        self.spans = SpanSweep(record_spans(records), replicas)
        self.gaps = StepGaps(records)
