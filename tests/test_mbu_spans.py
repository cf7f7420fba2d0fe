"""The one sweep over request spans (``metrics.mbu.spans``) against hand-worked integrals, and a
window's blocks read from the window's sweep against each block's own records."""

from __future__ import annotations

import random

import numpy as np
import pytest

from builders import streamed_record
from tokenwatt.load.intervals import block_edges
from tokenwatt.metrics.mbu.mixed_steps import regime_from_records
from tokenwatt.metrics.mbu.spans import RequestSweep, SpanSweep
from tokenwatt.records import RequestRecord

# A: sent 0, first token 10, last 30, done 40; B: sent 20, first 25, last 50, done 60 (ns)
TWO = [(0, 10, 30, 40), (20, 25, 50, 60)]


def test_one_replica_by_hand() -> None:
    """N = 1 on [0, 20), 2 on [20, 40), 1 on [40, 60); D = 1 on [10, 25), 2 on [25, 30), 1 on
    [30, 50); prompts [0, 10) (nothing decoding) and [20, 25) (A decoding)."""
    t = SpanSweep(TWO, 1).totals(0, 100)
    assert t is not None
    assert t.idle_ns == 40  # [60, 100)
    assert t.decoding_ns == 15 + 2 * 5 + 20
    assert t.prompt_ns == 15
    assert t.prompt_mixed_ns == 5
    assert t.prompt_alone_ns == 10 + 10  # [0, 10) and [50, 60): busy, nothing decoding
    assert t.decode_busy_ns == 40  # [10, 50): something decoding
    assert t.decode_share == pytest.approx(0.4)
    assert t.idle_fraction == pytest.approx(0.4)
    assert t.decode_batch == pytest.approx(0.45)
    assert t.prompt_mixing_share == pytest.approx(1 / 3)
    assert t.prefill_only_fraction == pytest.approx(0.2)


def test_a_window_inside_the_spans_by_hand() -> None:
    t = SpanSweep(TWO, 1).totals(15, 55)
    assert t is not None
    assert (t.idle_ns, t.decoding_ns, t.prompt_ns, t.prompt_mixed_ns) == (0, 40, 5, 5)
    assert t.prompt_alone_ns == 5  # [50, 55)
    assert t.decode_batch == pytest.approx(1.0)


def test_two_replicas_by_hand() -> None:
    """idle = ∫ max(0, 2 − N) = 20 + 20 + 80; alone = ∫ max(0, min(2, N) − min(2, D)) =
    10 ([0, 10)) + 5 ([20, 25)) + 10 ([30, 40)) + 10 ([50, 60))."""
    t = SpanSweep(TWO, 2).totals(0, 100)
    assert t is not None
    assert t.idle_ns == 120
    assert t.prompt_alone_ns == 35
    assert t.idle_fraction == pytest.approx(0.6)
    assert t.prefill_only_fraction == pytest.approx(0.175)
    assert t.decode_batch == pytest.approx(0.225)


def test_no_spans_and_no_window() -> None:
    empty = SpanSweep([], 1)
    t = empty.totals(0, 50)
    assert t is not None and t.idle_fraction == 1.0 and t.decode_batch == 0.0
    assert t.prompt_mixing_share is None
    assert empty.totals(50, 50) is None
    # a failed request's missing stamps add no span; one that failed after its first token
    # still ran its prompt [sent, first) but was never seen in flight to a done
    t = SpanSweep([(0, None, None, None), (0, 5, None, None)], 1).totals(0, 10)
    assert t is not None and (t.idle_ns, t.decoding_ns, t.prompt_ns) == (10, 0, 5)


def _records(n: int, seed: int) -> list[RequestRecord]:
    """Poisson-ish sends over 1 s, prompts then 5–40 chunks 8–30 ms apart (ns)."""
    rng = random.Random(seed)
    out, t = [], 0
    for i in range(n):
        t += int(rng.expovariate(n) * 1e9)
        first = t + rng.randint(5, 80) * 1_000_000
        gaps = [rng.randint(8, 30) * 1_000_000 for _ in range(rng.randint(5, 40))]
        chunks = list(np.cumsum([first, *gaps]))
        out.append(streamed_record(i, [int(c) for c in chunks], sent_ns=t, prompt_tokens=64))
    return out


def _alive(records: list[RequestRecord], a: int, b: int) -> list[RequestRecord]:
    """A block's records as ``load.intervals`` selects them: scheduled before its end, not
    over before its start."""
    return [r for r in records if r.scheduled_ns < b and (r.done_ns or 0) >= a]


@pytest.mark.parametrize("replicas", [1, 2])
def test_blocks_read_from_the_window_sweep_equal_their_own(replicas: int) -> None:
    """Each block's regime from the window's one sweep is exactly the regime from the block's
    own records swept alone: idle, prompt-only, mixing share, decode batch and step law."""
    records = _records(300, seed=replicas)
    w0 = min(r.sent_ns or 0 for r in records) + 100_000_000
    w1 = max(r.sent_ns or 0 for r in records)  # every block has sends and a tail in flight
    sweep = RequestSweep(records, replicas)
    checked = 0
    for a, b in block_edges(w0, w1, 7):
        own = _alive(records, a, b)
        counted = [r for r in own if a <= (r.sent_ns or 0) < b]
        shared = regime_from_records(own, counted, a, b, replicas=replicas, sweep=sweep)
        alone = regime_from_records(own, counted, a, b, replicas=replicas)
        assert shared is not None and alone is not None
        assert shared.step_law is not None and alone.step_law is not None
        for name in ("idle_fraction", "prefill_only_fraction", "prompt_mixing_share"):
            assert getattr(shared, name) == getattr(alone, name), name
        assert shared.decode_batch == alone.decode_batch
        assert shared.step_law.steps_per_s == alone.step_law.steps_per_s
        assert np.array_equal(shared.step_law.shares, alone.step_law.shares)
        assert np.array_equal(shared.step_law.batches, alone.step_law.batches)
        checked += 1
    assert checked == 7
