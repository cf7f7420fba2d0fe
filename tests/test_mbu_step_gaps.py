"""The mean decode step with each step counted once (``metrics.mixed_steps.decode_step_from_gaps``),
against hand-worked streams, and the headline's weight term that uses it.

τ weights each step by its batch; MBU's weight term needs steps per second, each step once.
A long step with a larger batch than the rest (a step that also carried a prompt's chunk)
pulls τ above the mean step, so 1/τ undercounts the steps (docs/methodology.md, the
coverage table: the prefill-heavy case read 1.9 pt low before this).
"""

from __future__ import annotations

import pytest

from test_mbu import DENSE, H100_BW
from test_mbu_mixed import _mbu
from tokenwatt.metrics.mixed_steps import decode_step_from_gaps, regime_from_records
from tokenwatt.records import RequestRecord


def _rec(i: int, chunks: list[int], tokens: list[int] | None = None) -> RequestRecord:
    return RequestRecord(
        request_id=i,
        scheduled_ns=chunks[0] - 5,
        prompt_tokens_client=64,
        max_tokens=len(chunks),
        sent_ns=chunks[0] - 5,
        first_token_ns=chunks[0],
        end_ns=chunks[-1],
        done_ns=chunks[-1],
        chunk_ns=chunks,
        chunk_tokens=tokens or [1] * len(chunks),
        prompt_tokens=64,
        completion_tokens=sum(tokens or [1] * len(chunks)),
    )


# One engine, four steps: [0, 10) decodes A; [10, 20) A and B; [20, 50) A and B while a prompt
# is prefilled beside them (long); [50, 60) B. A's tokens at 0 (its prefill), 10, 20, 50; B's
# at 10 (its prefill), 20, 50, 60. τ = Σ gaps ÷ Σ (n − 1) = (10+10+30 + 10+30+10) / 6 = 16.67;
# the mean step, each once: (10 + 10 + 30 + 10) / 4 = 15.
A = [0, 10, 20, 50]
B = [10, 20, 50, 60]


def test_each_step_once_by_hand() -> None:
    got = decode_step_from_gaps([_rec(1, A), _rec(2, B)], 0, 100, replicas=1)
    assert got == pytest.approx(15e-9, rel=1e-12)
    tau_ns = (10 + 10 + 30 + 10 + 30 + 10) / 6
    assert got != pytest.approx(tau_ns * 1e-9, rel=0.05)  # the test can tell the two apart


def test_only_gaps_whose_midpoint_is_in_the_window() -> None:
    # window [12, 40): midpoints A 15, 35; B 15, 35 (A 5 and B 55 are out); b = 2 at both
    got = decode_step_from_gaps([_rec(1, A), _rec(2, B)], 12, 40, replicas=1)
    assert got == pytest.approx((10 / 2 + 30 / 2 + 10 / 2 + 30 / 2) / (4 / 2) * 1e-9)


def test_a_chunk_of_k_tokens_is_k_steps() -> None:
    # one stream, three steps of 10: tokens at 0, 10, then two steps sent together at 30
    got = decode_step_from_gaps([_rec(1, [0, 10, 30], [1, 1, 2])], 0, 100, replicas=1)
    assert got == pytest.approx(30 / 3 * 1e-9)


def test_two_replicas_share_the_requests_decoding() -> None:
    # A decodes alone on [0, 20), B joins with one long gap: A's gaps 10, 10, 10, 10 at
    # midpoints 5, 15 (1 decoding) and 25, 35 (2 decoding); B's gap of 20 at 30 (2 decoding)
    recs = [_rec(1, [0, 10, 20, 30, 40]), _rec(2, [20, 40])]
    one = decode_step_from_gaps(recs, 0, 100, replicas=1)  # weights 1, 1, ½, ½, ½
    assert one == pytest.approx((10 + 10 + 5 + 5 + 10) / 3.5 * 1e-9)
    # two replicas: two requests are one each, b = max(1, 2/2) = 1, every gap its own step
    two = decode_step_from_gaps(recs, 0, 100, replicas=2)
    assert two == pytest.approx((4 * 10 + 20) / 5 * 1e-9)


def test_no_gap_in_the_window() -> None:
    assert decode_step_from_gaps([_rec(1, A)], 200, 300, replicas=1) is None
    assert decode_step_from_gaps([_rec(1, [5])], 0, 100, replicas=1) is None


def test_the_regime_carries_it_and_the_weight_term_uses_it() -> None:
    recs = [_rec(1, A), _rec(2, B)]
    regime = regime_from_records(recs, recs, 0, 100, replicas=1)
    assert regime is not None and regime.decode_step_s == pytest.approx(15e-9)
    # dense, no KV, no idle, no prompts: weight bytes/s = W ÷ the mean step, not W ÷ τ
    tau, step = 0.02, 0.016
    w = 16e9  # test_mbu's DENSE: 16 GB read per step
    plain = _mbu(DENSE, batch=8.0, tau=tau, mean_prompt_tokens=0.0)
    assert plain.mbu == pytest.approx(w / tau / H100_BW, rel=1e-9)
    counted = _mbu(DENSE, batch=8.0, tau=tau, mean_prompt_tokens=0.0, decode_step_s=step)
    assert counted.mbu == pytest.approx(w / step / H100_BW, rel=1e-9)
    assert counted.inputs.mixed_steps is not None
    assert counted.inputs.mixed_steps.decode_step_s == step  # recorded, to redo by hand
