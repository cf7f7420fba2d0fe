"""Decode steps counted once from the token gaps (``metrics.mbu.step_gaps``), against hand-worked
streams, and the headline's weight term that uses their mean length and batch law.

τ weights each step by its batch; MBU's weight term needs steps per second, each step once,
and the weight bytes of the steps as they were batched. A long step with a larger batch than
the rest pulls τ above the mean step, so 1/τ undercounts the steps (the prefill-heavy case read
1.7 pt low with it); a batch law that is not Poisson over time misplaces W̄ on MoE models
(docs/methodology.md, "MBU: mixed steps").
"""

from __future__ import annotations

import numpy as np
import pytest

from builders import streamed_record
from test_mbu import DENSE, EXPERT_BYTES, H100_BW, MOE
from test_mbu_mixed import _mbu
from tokenwatt.metrics.mbu.mixed_steps import regime_from_records
from tokenwatt.metrics.mbu.step_gaps import StepLaw, step_law_from_gaps
from tokenwatt.records import RequestRecord


def _rec(i: int, chunks: list[int], tokens: list[int] | None = None) -> RequestRecord:
    return streamed_record(i, chunks, sent_ns=chunks[0] - 5, prompt_tokens=64, tokens=tokens)


# One engine, four steps: [0, 10) decodes A; [10, 20) A and B; [20, 50) A and B while a prompt
# is prefilled beside them (long); [50, 60) B. A's tokens at 0 (its prefill), 10, 20, 50; B's
# at 10 (its prefill), 20, 50, 60. τ = Σ gaps ÷ Σ (n − 1) = (10+10+30 + 10+30+10) / 6 = 16.67;
# the mean step, each once: (10 + 10 + 30 + 10) / 4 = 15. Batches: 1, 2, 2, 1 → half each.
A = [0, 10, 20, 50]
B = [10, 20, 50, 60]


def _law(recs: list[RequestRecord], lo: int, hi: int, replicas: int = 1) -> StepLaw:
    law = step_law_from_gaps(recs, lo, hi, replicas)
    assert law is not None
    return law


def test_each_step_once_by_hand() -> None:
    law = _law([_rec(1, A), _rec(2, B)], 0, 100)
    assert law.mean_step_s == pytest.approx(15e-9, rel=1e-12)
    tau_ns = (10 + 10 + 30 + 10 + 30 + 10) / 6
    assert law.mean_step_s != pytest.approx(tau_ns * 1e-9, rel=0.05)  # tells the two apart
    assert law.batches.tolist() == [1.0, 2.0]
    assert law.shares.tolist() == pytest.approx([0.5, 0.5])
    assert law.mean_batch == pytest.approx(1.5)  # T·τ/R would give (10+20+60+10)/60 = 1.67
    # the steps at batch 1 last 10 each; at batch 2, 10 and 30
    assert law.step_s.tolist() == pytest.approx([10e-9, 20e-9])
    assert law.steps_per_s == pytest.approx(4 / 100e-9)  # four steps in a 100 ns window


def test_only_gaps_whose_midpoint_is_in_the_window() -> None:
    # window [12, 40): midpoints A 15, 35; B 15, 35 (A 5 and B 55 are out); b = 2 at both
    law = _law([_rec(1, A), _rec(2, B)], 12, 40)
    assert law.mean_step_s == pytest.approx((10 / 2 + 30 / 2 + 10 / 2 + 30 / 2) / (4 / 2) * 1e-9)
    assert law.batches.tolist() == [2.0] and law.shares.tolist() == [1.0]


def test_a_chunk_of_k_tokens_is_k_steps() -> None:
    # one stream, three steps of 10: tokens at 0, 10, then two steps sent together at 30
    law = _law([_rec(1, [0, 10, 30], [1, 1, 2])], 0, 100)
    assert law.mean_step_s == pytest.approx(30 / 3 * 1e-9)


def test_two_replicas_share_the_requests_decoding() -> None:
    # A decodes alone on [0, 20), B joins with one long gap: A's gaps 10, 10, 10, 10 at
    # midpoints 5, 15 (1 decoding) and 25, 35 (2 decoding); B's gap of 20 at 30 (2 decoding)
    recs = [_rec(1, [0, 10, 20, 30, 40]), _rec(2, [20, 40])]
    one = _law(recs, 0, 100, replicas=1)  # weights 1, 1, ½, ½, ½
    assert one.mean_step_s == pytest.approx((10 + 10 + 5 + 5 + 10) / 3.5 * 1e-9)
    assert one.shares.tolist() == pytest.approx([2 / 3.5, 1.5 / 3.5])
    # two replicas: two requests are one each, b = max(1, 2/2) = 1, every gap its own step
    two = _law(recs, 0, 100, replicas=2)
    assert two.mean_step_s == pytest.approx((4 * 10 + 20) / 5 * 1e-9)
    assert two.batches.tolist() == [1.0]


def test_no_gap_in_the_window() -> None:
    assert step_law_from_gaps([_rec(1, A)], 200, 300, replicas=1) is None
    assert step_law_from_gaps([_rec(1, [5])], 0, 100, replicas=1) is None


def test_the_regime_carries_it_and_the_dense_weight_term_uses_it() -> None:
    recs = [_rec(1, A), _rec(2, B)]
    regime = regime_from_records(recs, recs, 0, 100, replicas=1)
    assert regime is not None and regime.step_law is not None
    assert regime.step_law.mean_step_s == pytest.approx(15e-9)
    # dense, no KV, no prompts: weight bytes/s = W × the steps counted per second, not W ÷ τ
    tau, step, per_s = 0.02, 0.016, 55.0  # busy 88 % of the window
    w = 16e9  # test_mbu's DENSE: 16 GB read per step
    plain = _mbu(DENSE, batch=8.0, tau=tau, mean_prompt_tokens=0.0)
    assert plain.mbu == pytest.approx(w / tau / H100_BW, rel=1e-9)
    law = _hand_law(step, per_s, [4.0, 12.0], [0.5, 0.5])
    counted = _mbu(DENSE, batch=8.0, tau=tau, mean_prompt_tokens=0.0, step_law=law)
    assert counted.mbu == pytest.approx(w * per_s / H100_BW, rel=1e-9)
    assert counted.inputs.mixed_steps is not None
    assert counted.inputs.mixed_steps.decode_step_s == step  # recorded, to redo by hand
    assert counted.inputs.mixed_steps.decode_steps_per_s == per_s
    assert counted.inputs.mixed_steps.batch_busy == pytest.approx(8.0)


def test_moe_weight_bytes_are_the_mean_over_the_steps_batches() -> None:
    # uniform routing over 128 experts, top-8: a step of b tokens reads 128·(1 − (1 − 8/128)^b)
    # experts per layer. Steps half at b = 1, half at b = 16, 100 per second, no prompts, no KV.
    law = _hand_law(0.010, 100.0, [1.0, 16.0], [0.5, 0.5])
    got = _mbu(MOE, batch=8.5, tau=0.02, mean_prompt_tokens=0.0, step_law=law)
    by_hand = (0.5 * _w_moe(1) + 0.5 * _w_moe(16)) * 100.0
    assert got.mbu == pytest.approx(by_hand / H100_BW, rel=1e-9)
    # the mean batch's W would be higher (W is concave in b): the law is what the steps read
    assert _w_moe(8.5) * 100.0 > by_hand * 1.05


def test_prompts_ride_in_steps_in_proportion_to_their_length() -> None:
    # A step admits the prompts that arrived during the step before it. Steps half at b = 1
    # (5 ms) and half at b = 16 (15 ms), 100 per second; 2 prompts/s of 512 tokens, all riding
    # in decode steps: 0.02 prompts per step on average, m(1) = 0.01 and m(16) = 0.03.
    law = _hand_law(0.010, 100.0, [1.0, 16.0], [0.5, 0.5], step_s=[0.005, 0.015])
    got = _mbu(MOE, batch=8.5, tau=0.02, request_rate_rps=2.0, step_law=law)
    miss = 1 - 8 / 128

    def w_avg(b: float, m: float) -> float:  # E over J ~ Poisson(m) prompts of L = 512 tokens
        g = np.exp(-m * (1 - miss**512))  # generating function of the prompt tokens at miss
        return 2e9 + 48 * EXPERT_BYTES * 128 * (1 - miss**b * g)

    by_hand = (0.5 * w_avg(1, 0.01) + 0.5 * w_avg(16, 0.03)) * 100.0
    assert got.mbu == pytest.approx(by_hand / H100_BW, rel=1e-9)
    ms = got.inputs.mixed_steps
    assert ms is not None
    share = 0.5 * -np.expm1(-0.01) + 0.5 * -np.expm1(-0.03)
    assert ms.mixed_step_fraction == pytest.approx(share, rel=1e-9)
    assert ms.prompts_per_step == pytest.approx(0.02, rel=1e-9)


def _w_moe(b: float) -> float:
    return 2e9 + 48 * EXPERT_BYTES * 128 * (1 - (1 - 8 / 128) ** b)


def _hand_law(
    mean_s: float, per_s: float, batches: list[float], shares: list[float],
    step_s: list[float] | None = None,
) -> StepLaw:  # fmt: skip
    return StepLaw(
        mean_step_s=mean_s, steps_per_s=per_s, batches=np.array(batches),
        shares=np.array(shares), step_s=np.array(step_s or [mean_s] * len(batches)),
    )  # fmt: skip
