"""The routing band (``metrics.mbu.routing_band``) against hand calculations, its flag both ways.

Without a measured expert load an MoE MBU is the uniform value (upper bound) with the value at
the fewest experts any routing reads (k per layer per step) beside it; ``routing_unmeasured``
is raised when they differ by more than 1 pt, at any batch, and never for a dense model or a
measured load.
"""

from __future__ import annotations

import math

import pytest

from test_mbu import DENSE, EXPERT_BYTES, MOE, _geom
from test_mbu_mixed import _mbu
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.metrics.mbu.mixed_steps import StepRegime
from tokenwatt.metrics.mbu.routing_band import routing_band


def test_zipf_inclusion_hand_calculation() -> None:
    # E = 4, k = 1, s = 1: π ∝ 1, 1/2, 1/3, 1/4 (sum 25/12) → 12/25, 6/25, 4/25, 3/25
    pi = ExpertLoad.zipf(4, 1, 1.0).inclusion[0]
    assert pi.tolist() == pytest.approx([0.48, 0.24, 0.16, 0.12], abs=1e-12)
    # E = 4, k = 2, s = 3: c·1 would exceed 1, so expert 1 is capped and the rest share 1
    # in proportion 1/8 : 1/27 : 1/64
    pi = ExpertLoad.zipf(4, 2, 3.0).inclusion[0]
    w = [1 / 8, 1 / 27, 1 / 64]
    assert pi[0] == 1.0
    assert pi[1:].tolist() == pytest.approx([x / sum(w) for x in w], abs=1e-12)
    assert ExpertLoad.zipf(4, 2, 3.0).source == "zipf:3"


# Two experts, top-1, one MoE layer, no dense bytes and no KV: a step reads only its experts,
# so under the estimate's step model (a step lasts in proportion to its bytes, scaled so the
# law reproduces τ) the weight traffic is the constant bandwidth per·B / (τ·E[b/d(b)]), the
# expectation over the busy batch law Poisson(μ) given b ≥ 1 (time-weighted, mean B), d(b) the
# distinct experts of b tokens: Σ_r 1 − (1 − π_r)^b.
TWO = _geom(layers=1, moe_layers=1, experts=2, experts_per_token=1, dense_weight_bytes=0,
            expert_bytes=10**9)  # fmt: skip


def _hand_bytes_per_s(pi: list[float], mu: float, tau: float) -> float:
    norm = 1.0 - math.exp(-mu)
    batch = mu / norm
    e_b_over_d = 0.0
    for b in range(1, 80):
        p = math.exp(-mu) * mu**b / math.factorial(b) / norm
        d = sum(1.0 - (1.0 - x) ** b for x in pi)
        e_b_over_d += p * b / d
    return 1e9 * batch / (tau * e_b_over_d)


def test_band_arithmetic_hand_calculation() -> None:
    mu, tau = 2.0, 0.01
    batch = mu / (1.0 - math.exp(-mu))  # 2.3130: the mean of Poisson(2) given ≥ 1
    regime = StepRegime(
        request_rate_rps=0.0, mean_prompt_tokens=0.0, mean_output_tokens=1e9, idle_fraction=0.0,
        decode_batch=batch,
    )  # fmt: skip
    band = routing_band(
        TWO,
        regime,
        batch_per_replica=batch,
        steps_per_s=1 / tau,
        replicas=1,
        kv_bytes_per_output_token=0.0,
        kv_bytes_per_s=0.0,
        node_bandwidth_bytes_per_s=1e12,
        zipf_s=1.0,
    )
    assert band is not None and band.reference == "zipf:1"
    upper = _hand_bytes_per_s([0.5, 0.5], mu, tau) / 1e12  # uniform
    lower = _hand_bytes_per_s([2 / 3, 1 / 3], mu, tau) / 1e12  # Zipf 1: π ∝ 1, ½ → ⅔, ⅓
    assert band.mbu_upper == pytest.approx(upper, rel=1e-9)
    assert band.mbu_lower == pytest.approx(lower, rel=1e-9)
    assert band.decode_only_lower == pytest.approx(lower, rel=1e-9)  # no prompts: same
    assert band.width_pt == pytest.approx(100 * (upper - lower), rel=1e-9)
    assert upper > lower  # colliding tokens read fewer experts


def test_band_is_none_for_dense_and_for_a_measured_load() -> None:
    d = _mbu(DENSE, batch=40.0)
    assert d.mbu_lower_bound is None and not d.flags.routing_unmeasured
    load = ExpertLoad.zipf(MOE.experts, MOE.experts_per_token, 1.2)
    m = _mbu(MOE, batch=140.0, expert_load=load)
    assert m.mbu_lower_bound is None and not m.flags.routing_unmeasured
    assert not any("routing not measured" in n for n in m.notes)


@pytest.mark.parametrize("batch", [4.0, 24.0, 140.0, 240.0])
def test_flag_raised_at_every_batch_where_the_band_is_wide(batch: float) -> None:
    """128 experts top-8: a routing may keep all but 8 experts cold even at B 240, so the flag
    is raised where the small-batch flag (``moe_uniform_routing_upper_bound``) is quiet."""
    r = _mbu(MOE, batch=batch)
    assert r.mbu is not None and r.mbu_lower_bound is not None and r.mbu_decode_only is not None
    assert r.mbu - r.mbu_lower_bound > 0.01
    assert r.flags.routing_unmeasured
    assert r.routing_reference == "fewest:8"
    assert r.mbu_decode_only_lower_bound is not None
    assert r.mbu_decode_only_lower_bound < r.mbu_decode_only
    note = next(n for n in r.notes if n.startswith("routing not measured"))
    assert "upper bound" in note and "decode-only likewise reads high" in note
    assert f"{100 * r.mbu_lower_bound:.1f}" in note
    if batch >= 140:
        assert not r.flags.moe_uniform_routing_upper_bound


def test_flag_quiet_when_the_band_is_narrow() -> None:
    """Every token reads every expert (k = E): uniform and the fewest coincide, band 0."""
    every = _geom(
        layers=32, moe_layers=32, experts=2, experts_per_token=2,
        dense_weight_bytes=2_000_000_000, expert_bytes=176_160_768,
    )  # fmt: skip
    r = _mbu(every, batch=24.0)
    assert r.mbu is not None and r.mbu_lower_bound is not None
    assert r.mbu_lower_bound == pytest.approx(r.mbu, abs=1e-12)
    assert not r.flags.routing_unmeasured
    # the user's own skew: s = 0 is uniform routing, a band of zero
    flat = _mbu(MOE, batch=24.0, routing_zipf=0.0)
    assert flat.mbu_lower_bound == pytest.approx(flat.mbu, abs=1e-12)
    assert not flat.flags.routing_unmeasured


def test_fewest_bound_hand_calculation() -> None:
    """The lower end by hand: every step reads dense + k experts per MoE layer whatever its
    batch, so with the steps lasting τ each (no KV, no prompts, no idle) the weight traffic is
    (dense + layers·k·expert) / τ; the fewest load reads exactly k experts for any token count."""
    fewest = ExpertLoad.fewest(MOE.experts, MOE.experts_per_token)
    assert fewest.source == "fewest:8"
    for tokens in (1, 3, 40, 4000):
        assert fewest.expected_distinct_fixed(tokens) == pytest.approx(8.0, abs=1e-12)
    assert fewest.expected_distinct_fixed(0) == 0.0
    tau = 0.02
    regime = StepRegime(
        request_rate_rps=0.0, mean_prompt_tokens=0.0, mean_output_tokens=1e9, idle_fraction=0.0,
        decode_batch=50.0,
    )  # fmt: skip
    band = routing_band(
        MOE, regime, batch_per_replica=50.0, steps_per_s=1 / tau, replicas=1,
        kv_bytes_per_output_token=0.0, kv_bytes_per_s=0.0, node_bandwidth_bytes_per_s=1e12,
    )  # fmt: skip
    assert band is not None and band.reference == "fewest:8"
    hand = (2_000_000_000 + 48 * 8 * EXPERT_BYTES) / tau / 1e12
    assert band.mbu_lower == pytest.approx(hand, rel=1e-9)
    assert band.decode_only_lower == pytest.approx(hand, rel=1e-9)
    # no routing reads fewer: the lower end sits below every Zipf skew, however steep
    for s in (0.6, 1.2, 2.0, 4.0):
        z = routing_band(
            MOE, regime, batch_per_replica=50.0, steps_per_s=1 / tau, replicas=1,
            kv_bytes_per_output_token=0.0, kv_bytes_per_s=0.0,
            node_bandwidth_bytes_per_s=1e12, zipf_s=s,
        )  # fmt: skip
        assert z is not None and band.mbu_lower < z.mbu_lower < band.mbu_upper
