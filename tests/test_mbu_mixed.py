"""The mixed-step term, measured routing and the regime flags, against hand calculations.

Each flag is tested in both directions: raised where the measured regime says so (with the
direction and size in its note), quiet where it does not. Figures are checked against closed
forms written out here, not against the code path under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from test_mbu import DENSE, EXPERT_BYTES, H100_BW, MOE
from tokenwatt.errors import SpecError
from tokenwatt.geometry.routing import ExpertLoad, load_expert_load
from tokenwatt.metrics.mbu import StepRegime, compute_mbu
from tokenwatt.metrics.mbu.mixed_steps import (
    decode_batch_from_intervals,
    idle_fraction_from_intervals,
)
from tokenwatt.result import Mbu, MbuInputs
from tokenwatt.sim.routing import ZipfRouting, zipf_inclusion


def _mbu(geometry=MOE, *, batch: float = 40.0, tau: float = 0.02, **regime: object) -> Mbu:  # type: ignore[no-untyped-def]
    base: dict[str, object] = {
        "request_rate_rps": 0.0,
        "mean_prompt_tokens": 512.0,
        "mean_output_tokens": 1e9,  # no first-token correction unless a test asks
    }
    base.update(regime)
    return compute_mbu(
        geometry,
        output_tokens_per_s=batch / tau,
        itl_token_weighted_s=tau,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=H100_BW,
        mean_context_per_token=0.0,
        kv_bytes_per_output_token=0.0,
        regime=StepRegime(**base),  # type: ignore[arg-type]
    )


# -- idle fraction from arrival and completion times --------------------------------------------


def test_idle_fraction_one_replica_hand_calculation() -> None:
    # in flight [0, 2) and [5, 6) s of a 10 s window; one outside: idle 7 of 10 s
    ns = 1_000_000_000
    iv = [(0, 2 * ns), (5 * ns, 6 * ns), (20 * ns, 21 * ns)]
    assert idle_fraction_from_intervals(iv, 0, 10 * ns, 1) == pytest.approx(0.7)


def test_idle_fraction_two_replicas_counts_half_while_one_request() -> None:
    # [0, 4): 1 request (one replica idle: ½), [4, 6): 2 (none), [6, 10): 0 (both)
    ns = 1_000_000_000
    iv = [(0, 6 * ns), (4 * ns, 6 * ns)]
    assert idle_fraction_from_intervals(iv, 0, 10 * ns, 2) == pytest.approx((4 * 0.5 + 4) / 10)


# -- dense and no prompts: the seed's formula ----------------------------------------------------


def test_dense_without_kv_is_the_seed_formula() -> None:
    r = _mbu(DENSE, batch=16, tau=0.01)
    assert r.mbu == pytest.approx(16e9 / 0.01 / H100_BW, rel=1e-9)
    assert r.mbu == r.mbu_decode_only
    assert not r.flags.mixed_steps and not r.flags.idle


def test_moe_decode_only_is_the_poisson_batch_law() -> None:
    """No prompts, no KV: every busy-time batch b ≥ 1 reads the same bytes per second only if
    W is linear; the estimate is E_t[W(b)/W(b)]/scale = 1/scale with scale = τ·E_t[b/W]/E_t[b],
    i.e. bytes per second = E_t[b] / (τ · E_t[b / W(b)]) — computed here by hand."""
    r = _mbu(MOE, batch=40.0, tau=0.02)
    mu = 40.0
    for _ in range(200):
        mu = 40.0 * -math.expm1(-mu)
    b = np.arange(1, 200)
    p = np.exp(b * math.log(mu) - mu - np.array([math.lgamma(v + 1) for v in b]))
    p /= p.sum()
    w = 2e9 + 48 * EXPERT_BYTES * 128 * (1 - (1 - 8 / 128) ** b)
    expected = float((p * b).sum()) / (0.02 * float((p * b / w).sum())) / H100_BW
    assert r.mbu == pytest.approx(expected, rel=1e-6)
    assert r.mbu == r.mbu_decode_only


# -- mixed steps: raised when prompts ride along, quiet when none ------------------------------


def test_mixed_flag_raised_with_prompt_traffic_and_mbu_above_decode_only() -> None:
    r = _mbu(batch=10, request_rate_rps=20.0)  # 20 rps × 20 ms: 0.4 prompts per step
    assert r.inputs.mixed_steps is not None and r.mbu is not None and r.mbu_decode_only is not None
    assert r.inputs.mixed_steps.mixed_step_fraction == pytest.approx(1 - math.exp(-0.4), rel=0.1)
    assert r.flags.mixed_steps
    assert r.mbu > r.mbu_decode_only + 0.01
    assert any("carry prompt chunks" in n and "sits" in n and "below it" in n for n in r.notes)


def test_mixed_flag_quiet_without_prompts_or_with_cached_prompts() -> None:
    assert not _mbu(batch=10, request_rate_rps=0.0).flags.mixed_steps
    cached = _mbu(batch=10, request_rate_rps=20.0, mean_cached_prompt_tokens=512.0)
    assert not cached.flags.mixed_steps
    assert cached.mbu == cached.mbu_decode_only


def test_prompts_longer_than_the_chunk_budget_fill_whole_chunks() -> None:
    r = _mbu(batch=10, request_rate_rps=5.0, mean_prompt_tokens=20_000, chunk_budget_tokens=2048)
    assert r.inputs.mixed_steps is not None
    assert r.inputs.mixed_steps.prompt_tokens_per_mixed_step == pytest.approx(2048 - 10, abs=2)
    m = r.inputs.mixed_steps.prompts_per_step  # ~0.1 prompts per step, ~10 chunks each
    assert r.inputs.mixed_steps.mixed_step_fraction == pytest.approx(
        min(1.0, m * 20_000 / 2038), rel=0.01
    )
    assert r.inputs.mixed_steps.mixed_step_fraction > 0.9


# -- idle: scaled by the measured busy share, note says how high it would read -------------------


def test_idle_flag_scales_the_weight_term_and_says_by_how_much() -> None:
    busy = _mbu(batch=10, idle_fraction=0.0)
    idle = _mbu(batch=10, idle_fraction=0.2)
    assert busy.mbu is not None and idle.mbu is not None
    assert not busy.flags.idle and idle.flags.idle
    assert idle.mbu < busy.mbu
    assert any("idle 20.0%" in n and "high" in n for n in idle.notes)
    assert not idle.flags.low_load_busy_bias  # measured and corrected, not guessed from e^−B


# -- slot limit: above it the window was not steady: no MBU -------------------------------------


def test_batch_above_slot_limit_gives_no_mbu() -> None:
    r = _mbu(batch=4.69, slot_limit=4)  # the 4-slot llama.cpp probe of the issue
    assert r.mbu is None and r.flags.over_slot_limit
    assert any("slot limit 4" in n and "no MBU" in n for n in r.notes)


def test_batch_within_slot_limit_keeps_mbu() -> None:
    r = _mbu(batch=3.9, slot_limit=4)
    assert r.mbu is not None and not r.flags.over_slot_limit


# -- small batch ---------------------------------------------------------------------------------


def test_small_batch_flag_each_way() -> None:
    assert _mbu(batch=3.0).flags.small_batch
    assert not _mbu(batch=40.0).flags.small_batch


# -- routing: measured load in place of uniform ------------------------------------------------


def test_uniform_counts_give_the_seed_formula() -> None:
    load = ExpertLoad.from_counts([[5.0] * 128], 8, "flat")
    for t in (1, 7, 64):
        assert load.expected_distinct_fixed(t) == pytest.approx(128 * (1 - (1 - 8 / 128) ** t))


def test_measured_zipf_load_matches_the_simulators_own_expectation() -> None:
    sim = ZipfRouting(256, 8, 58, 1.2, np.random.default_rng(0))
    counts = zipf_inclusion(256, 8, 1.2) * 1000  # a histogram proportional to π
    load = ExpertLoad.from_counts([counts], 8, "hist")
    for t in (1, 10, 100):
        assert load.expected_distinct_fixed(t) == pytest.approx(sim.expected_per_layer(t), rel=1e-9)


def test_capped_inclusion_keeps_k_per_token() -> None:
    load = ExpertLoad.from_counts([[100.0, 1.0, 1.0, 1.0]], 2, "hot")
    assert load.inclusion.sum() == pytest.approx(2.0)
    assert load.inclusion.max() == pytest.approx(1.0)


def test_measured_routing_note_replaces_the_uniform_warning() -> None:
    skew = ExpertLoad.from_counts([zipf_inclusion(128, 8, 1.2)], 8, "engine histogram")
    uniform = _mbu(batch=4.0)
    measured = _mbu(batch=4.0, expert_load=skew)
    assert uniform.mbu is not None and measured.mbu is not None
    assert uniform.flags.moe_uniform_routing_upper_bound
    assert any("reads high" in n for n in uniform.notes)
    assert not measured.flags.moe_uniform_routing_upper_bound
    assert any("engine histogram" in n for n in measured.notes)
    assert measured.mbu < uniform.mbu  # collisions: fewer distinct experts read


def test_expert_load_file_round_trip_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "load.json"
    good.write_text(json.dumps({"counts": [[1, 2, 3, 4]] * 3}))
    assert load_expert_load(good, experts=4, k=2, layers=3).inclusion.shape == (3, 4)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"counts": [[1, 2, 3]]}))
    with pytest.raises(SpecError, match=r"engine\.expert_load_file .* one row per MoE layer"):
        load_expert_load(bad, experts=4, k=2, layers=3)
    with pytest.raises(SpecError, match=r"engine\.expert_load_file .* unreadable"):
        load_expert_load(tmp_path / "missing.json", experts=4, k=2, layers=3)


def test_result_dict_keeps_flags_boolean_and_carries_both_figures() -> None:
    d = _mbu(batch=10, request_rate_rps=20.0, idle_fraction=0.1).model_dump()
    assert all(isinstance(v, bool) for v in d["flags"].values())
    assert d["mbu_decode_only"] < d["mbu"]
    assert d["inputs"]["mixed_steps"]["mixed_step_fraction"] > 0.05
    assert any("carry prompt chunks" in n for n in d["notes"])


def test_routing_skew_flag_each_way_at_large_batch() -> None:
    """Zipf at B ≈ 117: uniform routing predicts every expert hit and raises no small-batch
    warning, yet reads high; a measured load says so (flag + direction), a flat one does not."""
    skew = ExpertLoad.from_counts([zipf_inclusion(128, 8, 1.2)], 8, "zipf histogram")
    flat = ExpertLoad.from_counts([[1.0] * 128], 8, "flat histogram")
    assert not _mbu(batch=117.0).flags.moe_uniform_routing_upper_bound  # no warning uniform
    skewed = _mbu(batch=117.0, expert_load=skew)
    assert skewed.flags.routing_skew
    assert any("uniform routing would read" in n and "higher" in n for n in skewed.notes)
    assert not _mbu(batch=117.0, expert_load=flat).flags.routing_skew


def test_decode_batch_from_intervals_hand_calculation() -> None:
    # decoding [1, 5) and [3, 13) s in a 10 s window: 4 + 7 = 11 s → 1.1 per replica, 0.55 for R=2
    ns = 1_000_000_000
    iv: list[tuple[int | None, int | None]] = [(1 * ns, 5 * ns), (3 * ns, 13 * ns), (None, 1)]
    assert decode_batch_from_intervals(iv, 0, 10 * ns, 1) == pytest.approx(1.1)
    assert decode_batch_from_intervals(iv, 0, 10 * ns, 2) == pytest.approx(0.55)


def test_slot_limit_uses_the_counted_batch_not_the_decode_intervals() -> None:
    """A 4-slot engine never decodes more than 4, so the window's decode intervals stay ≤ 4;
    T·τ/R = 4.69 from the counted requests is what shows the window was not steady."""
    r = _mbu(batch=4.69, slot_limit=4, decode_batch=3.9)
    assert r.mbu is None and r.flags.over_slot_limit


def test_spec_engine_section_defaults_and_errors() -> None:
    from tokenwatt.spec import parse_spec

    base = {
        "endpoint": {"url": "sim"},
        "model": {"source": "deepseek-v3"},
        "hardware": {"accelerator": "h200", "gpus": 8},
    }
    spec = parse_spec(base)
    assert spec.engine.max_num_batched_tokens == 8192
    assert spec.engine.max_num_seqs is None and spec.engine.expert_load_file is None
    with pytest.raises(SpecError, match=r"engine\.max_num_seqs"):
        parse_spec({**base, "engine": {"max_num_seqs": 0}})


def test_regime_from_records_hand_calculation() -> None:
    from tokenwatt.metrics.mbu.mixed_steps import regime_from_records
    from tokenwatt.records import RequestRecord

    ns = 1_000_000_000

    def rec(  # noqa: PLR0917 - a table row
        i: int, sent: float, first: float, end: float, prompt: int, n: int
    ) -> RequestRecord:
        return RequestRecord(
            request_id=i,
            scheduled_ns=round(sent * ns),
            prompt_tokens_client=prompt,
            max_tokens=n,
            sent_ns=round(sent * ns),
            first_token_ns=round(first * ns),
            end_ns=round(end * ns),
            done_ns=round(end * ns),
            prompt_tokens=prompt,
            completion_tokens=n,
        )

    warm = rec(0, -1.0, -0.5, 2.0, 100, 10)  # before the window: load, not counted
    a = rec(1, 1.0, 1.5, 4.0, 300, 20)
    b = rec(2, 6.0, 6.5, 8.0, 500, 40)
    r = regime_from_records([warm, a, b], [a, b], 0, 10 * ns, replicas=1, slot_limit=8)
    assert r is not None
    assert r.request_rate_rps == pytest.approx(0.2)
    assert r.mean_prompt_tokens == pytest.approx(400)
    assert r.mean_output_tokens == pytest.approx(30)
    assert r.idle_fraction == pytest.approx((10 - 4 - 2) / 10)  # in flight [0, 4) and [6, 8)
    assert r.decode_batch == pytest.approx((2 + 2.5 + 1.5) / 10)
    assert r.slot_limit == 8


def test_the_headline_is_redone_from_its_inputs_and_the_kv_figure_says_what_it_holds() -> None:
    """Issue 21: redoing the arithmetic from ``inputs`` gave the seed's figure (31.0 %) where
    the headline said 28.9 %. ``headline_bytes_per_s`` is the headline's own numerator, and
    ``bytes_per_s`` the seed's, which differs here (mixed steps, an idle share)."""
    from tokenwatt.geometry import load_geometry

    m = _mbu(batch=10, request_rate_rps=20.0, idle_fraction=0.1)
    i = m.inputs
    assert m.mbu is not None and i.headline_bytes_per_s is not None and i.bytes_per_s is not None
    assert i.headline_bytes_per_s / i.node_bandwidth_bytes_per_s == pytest.approx(m.mbu, rel=1e-12)
    assert i.mixed_steps is not None
    assert i.headline_bytes_per_s == pytest.approx(
        i.mixed_steps.weight_bytes_per_s + (i.kv_bytes_per_s or 0.0), rel=1e-12
    )
    assert abs(i.bytes_per_s / i.node_bandwidth_bytes_per_s - m.mbu) > 0.005  # not the seed's
    assert m.seed_mbu == pytest.approx(i.bytes_per_s / i.node_bandwidth_bytes_per_s)
    # gpt-oss-20b: 12 of its 24 layers attend the whole context (the others a 128-token
    # window): 12 × 2 (K, V) × 8 heads × 64 × 2 B = 24,576 B, not the 49,152 of all layers
    g = load_geometry("gpt-oss-20b")
    oss = compute_mbu(
        g, output_tokens_per_s=500.0, itl_token_weighted_s=0.02, replicas=1, gpus=1,
        bandwidth_bytes_per_s=H100_BW, mean_context_per_token=1000.0,
        kv_bytes_per_output_token=1000.0 * 24_576,
    )  # fmt: skip
    assert oss.inputs.kv_bytes_per_token_full_context == 24_576
    # an older file's name still loads
    old = oss.inputs.model_dump()
    old["kv_bytes_per_token"] = old.pop("kv_bytes_per_token_full_context")
    assert MbuInputs.model_validate(old).kv_bytes_per_token_full_context == 24_576
