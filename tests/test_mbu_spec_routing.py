"""Speculative MBU and routing: the same bytes per step as the plain path, the same band and flags.

A speculative step verifies k + 1 positions per sequence, so its target reads the experts of
B·(k + 1) routed tokens. The plain path, given a window whose decode steps all ran at a batch
of B·(k + 1) (a one-point step law), reads the same bytes per step; under any expert load the
two must move together. Figures are checked against Σ_r 1 − (1 − π_r)^X written out here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from test_mbu import DENSE, H100_BW, MOE
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.metrics.mbu import StepRegime, compute_mbu
from tokenwatt.metrics.mbu.spec_mbu import Drafter, StepBasis
from tokenwatt.metrics.mbu.step_gaps import StepLaw
from tokenwatt.report.mbu_text import distinct_experts_at
from tokenwatt.result import Mbu, StepSummary

TAU_C = 0.02  # s per verify step
ALPHA = 2.0  # tokens per verify step


def _pi_zipf(experts: int, k: int, s: float) -> list[float]:
    """π_r = k·r^−s / Σ r^−s, written out (the exponents used here never cap an expert at 1)."""
    w = [r**-s for r in range(1, experts + 1)]
    pi = [k * x / sum(w) for x in w]
    assert max(pi) < 1.0
    return pi


def _hand_weight(g: ModelGeometry, pi: list[float], tokens: float) -> float:
    """dense + MoE layers × Σ_r (1 − (1 − π_r)^tokens) × bytes per expert."""
    return g.dense_weight_bytes + g.moe_layers * g.expert_bytes * sum(
        1.0 - (1.0 - p) ** tokens for p in pi
    )


def _regime(load: ExpertLoad | None = None, **kw: object) -> StepRegime:
    base: dict[str, object] = {
        "request_rate_rps": 0.0, "mean_prompt_tokens": 512.0, "mean_output_tokens": 1e9,
    }  # fmt: skip
    return StepRegime(**{**base, "expert_load": load, **kw})  # type: ignore[arg-type]


def _spec(
    g: ModelGeometry, *, batch: float, k: int, regime: StepRegime, routing_detail: bool = True
) -> Mbu:
    """A speculative window: B sequences per verify step of τ_c, α tokens per step, ngram."""
    steps, tokens = 10_000, int(10_000 * ALPHA)
    summary = StepSummary(
        requests=100, decode_steps=steps, decode_tokens=tokens, acceptance_length=ALPHA,
        itl_chunk_s=TAU_C, itl_token_s=TAU_C / ALPHA, steps_per_s=1 / TAU_C,
        max_chunk_tokens=k + 1, speculation="declared", coalesced=False, tokens=tokens,
    )  # fmt: skip
    return compute_mbu(
        g, output_tokens_per_s=batch * ALPHA / TAU_C, itl_token_weighted_s=TAU_C / ALPHA,
        replicas=1, gpus=1, bandwidth_bytes_per_s=H100_BW, mean_context_per_token=0.0,
        kv_bytes_per_output_token=0.0, regime=regime,
        steps=StepBasis(summary, Drafter("ngram", k), 0.0, regime), routing_detail=routing_detail,
    )  # fmt: skip


def _plain_one_point(
    g: ModelGeometry, *, tokens: float, regime: StepRegime, routing_detail: bool = True
) -> Mbu:
    """The plain path over a window whose every decode step had ``tokens`` sequences."""
    law = StepLaw(TAU_C, 1 / TAU_C, np.array([tokens]), np.array([1.0]), np.array([TAU_C]))
    return compute_mbu(
        g, output_tokens_per_s=tokens / TAU_C, itl_token_weighted_s=TAU_C, replicas=1, gpus=1,
        bandwidth_bytes_per_s=H100_BW, mean_context_per_token=0.0, kv_bytes_per_output_token=0.0,
        regime=dataclasses.replace(regime, step_law=law), routing_detail=routing_detail,
    )  # fmt: skip


@pytest.mark.parametrize(("batch", "k"), [(4.0, 3), (24.0, 1), (60.0, 3)])
def test_speculative_moves_with_a_measured_load_exactly_as_the_plain_path(
    batch: float, k: int
) -> None:
    s_exp = 0.6
    measured = ExpertLoad.zipf(MOE.experts, MOE.experts_per_token, s_exp)
    pi_u = [MOE.experts_per_token / MOE.experts] * MOE.experts
    pi_m = _pi_zipf(MOE.experts, MOE.experts_per_token, s_exp)
    tokens = batch * (k + 1)
    spec_u = _spec(MOE, batch=batch, k=k, regime=_regime())
    spec_m = _spec(MOE, batch=batch, k=k, regime=_regime(measured))
    plain_u = _plain_one_point(MOE, tokens=tokens, regime=_regime())
    plain_m = _plain_one_point(MOE, tokens=tokens, regime=_regime(measured))
    for r in (spec_u, spec_m, plain_u, plain_m):
        assert r.mbu is not None
    hand_u = _hand_weight(MOE, pi_u, tokens) / TAU_C / H100_BW
    hand_m = _hand_weight(MOE, pi_m, tokens) / TAU_C / H100_BW
    assert spec_u.mbu == pytest.approx(hand_u, rel=1e-9)
    assert spec_m.mbu == pytest.approx(hand_m, rel=1e-9)
    assert spec_m.mbu < spec_u.mbu  # skewed routing collides: fewer experts read
    # the same move on both paths
    assert spec_m.mbu - spec_u.mbu == pytest.approx(plain_m.mbu - plain_u.mbu, rel=1e-9)  # type: ignore[operator]
    assert spec_m.mbu == pytest.approx(plain_m.mbu, rel=1e-9)
    # flags: no uniform upper bound under a measured load; the skew note and its flag
    assert spec_m.flags.speculative_steps and not spec_m.flags.moe_uniform_routing_upper_bound
    assert spec_m.flags.routing_skew == plain_m.flags.routing_skew
    note = "routing from the measured expert load (zipf:0.6)"
    assert any(n.startswith(note) for n in spec_m.notes)
    assert spec_m.mbu_lower_bound is None and not spec_m.flags.routing_unmeasured
    # the views say where the distinct experts were counted and under which routing
    assert spec_m.inputs.speculation is not None
    assert spec_m.inputs.speculation.routing == "zipf:0.6"
    where = distinct_experts_at(spec_m.inputs)
    assert f"·{k + 1} verify positions" in where and "zipf:0.6 routing" in where
    assert "uniform routing" in distinct_experts_at(plain_m.inputs)


@pytest.mark.parametrize("batch", [4.0, 60.0])
def test_speculation_carries_the_routing_band_and_its_flags(batch: float) -> None:
    k, s_ref = 3, 0.5
    r = _spec(MOE, batch=batch, k=k, regime=_regime(routing_zipf=s_ref))
    plain = _plain_one_point(MOE, tokens=batch * (k + 1), regime=_regime(routing_zipf=s_ref))
    assert r.mbu is not None and r.mbu_lower_bound is not None
    assert r.routing_reference == "zipf:0.5"
    pi = _pi_zipf(MOE.experts, MOE.experts_per_token, s_ref)
    hand_low = _hand_weight(MOE, pi, batch * (k + 1)) / TAU_C / H100_BW
    assert r.mbu_lower_bound == pytest.approx(hand_low, rel=1e-9)
    assert r.mbu_lower_bound == pytest.approx(plain.mbu_lower_bound, rel=1e-9)
    assert r.mbu_decode_only_lower_bound == pytest.approx(hand_low, rel=1e-9)  # no prompts
    assert r.flags.routing_unmeasured == (100 * (r.mbu - r.mbu_lower_bound) > 1.0)
    # both ways: wide at B 4 (16 routed tokens), under 1 pt at B 60 under this mild skew
    assert r.flags.routing_unmeasured == (batch < 10)
    assert r.flags.routing_unmeasured == plain.flags.routing_unmeasured
    assert any(n.startswith("routing not measured") for n in r.notes)
    assert r.flags.speculative_steps


def test_dense_speculation_has_no_band() -> None:
    r = _spec(DENSE, batch=16.0, k=3, regime=_regime())
    assert r.mbu == pytest.approx(DENSE.dense_weight_bytes / TAU_C / H100_BW, rel=1e-9)
    assert r.mbu_lower_bound is None and not r.flags.routing_unmeasured


@pytest.mark.parametrize("speculative", [False, True])
def test_an_interval_block_gets_the_same_figures_without_the_routing_detail(
    speculative: bool,
) -> None:
    """Blocks show only MBU and decode-only MBU: without the routing detail (band, skew
    comparison) both figures are the full call's, and nothing else is evaluated."""
    measured = ExpertLoad.zipf(MOE.experts, MOE.experts_per_token, 0.6)
    for regime in (_regime(request_rate_rps=200.0), _regime(measured, request_rate_rps=200.0)):
        if speculative:
            full = _spec(MOE, batch=12.0, k=3, regime=regime)
            bare = _spec(MOE, batch=12.0, k=3, regime=regime, routing_detail=False)
        else:
            full = _plain_one_point(MOE, tokens=48.0, regime=regime)
            bare = _plain_one_point(MOE, tokens=48.0, regime=regime, routing_detail=False)
        assert full.mbu is not None and full.mbu_decode_only is not None
        assert bare.mbu == full.mbu and bare.mbu_decode_only == full.mbu_decode_only
        assert full.mbu_decode_only < full.mbu  # prompts ride along: the two figures differ
        assert bare.mbu_lower_bound is None and not bare.flags.routing_skew
        assert not any(n.startswith("routing") for n in bare.notes)
        assert any(n.startswith("routing") for n in full.notes)
