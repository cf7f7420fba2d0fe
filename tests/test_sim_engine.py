"""The engine in virtual time: step times against hand calculations, and the scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from test_sim_support import H100, config, geometry
from tokenwatt.errors import SpecError
from tokenwatt.geometry.model import KVGroup
from tokenwatt.sim import BLOCK_SIZE, VirtualSim

BW = H100.bandwidth_bytes_per_s  # 3.35e12 B/s


def step_s(weight_bytes: float, kv_bytes: float, eff: float = 0.5, gpus: int = 1) -> float:
    return (weight_bytes + kv_bytes) / (BW * gpus * eff)


def times_s(sim: VirtualSim, rid: int) -> list[float]:
    return [t / 1e9 for t in sim.token_ns[rid]]


# -- step time: dense, prefill cost, overhead -----------------------------------------------------


def test_dense_step_times_match_hand_calculation() -> None:
    sim = VirtualSim(config())
    req = sim.submit(0.0, prompt_tokens=100, max_tokens=3)
    sim.run()
    w, kv = 1e9, 65536
    s0 = step_s(w, 0)  # prefill step: weights only (prefill compute is off)
    s1 = step_s(w, kv * 101)  # token 1 reads L + 1 = 101 cached tokens
    s2 = step_s(w, kv * 102)
    # token times are whole nanoseconds
    assert times_s(sim, req.rid) == pytest.approx([s0, s0 + s1, s0 + s1 + s2], abs=2e-9)
    assert [s.batch for s in sim.steps] == [0, 1, 1]
    assert [s.prefill_tokens for s in sim.steps] == [100, 0, 0]
    assert req.finish_reason == "length"


def test_prefill_cost_and_overhead_are_added() -> None:
    geom = geometry(active_params=8_000_000_000)
    sim = VirtualSim(config(geom, prefill_cost=True, prefill_efficiency=0.4, step_overhead_ms=2.0))
    sim.submit(0.0, prompt_tokens=1000, max_tokens=2)
    sim.run()
    prefill = 1000 * 2 * 8e9 / (H100.peak_flops("bf16") * 0.4)  # type: ignore[operator]
    first, second = sim.steps
    assert first.prefill_s == pytest.approx(prefill, rel=1e-12)
    assert first.duration_s == pytest.approx(step_s(1e9, 0) + prefill + 0.002, rel=1e-12)
    assert second.duration_s == pytest.approx(step_s(1e9, 65536 * 1001) + 0.002, rel=1e-12)


def test_gpus_and_efficiency_scale_bandwidth() -> None:
    sim = VirtualSim(config(gpus_per_replica=4, efficiency=0.8))
    sim.submit(0.0, 10, 2)
    sim.run()
    assert sim.steps[1].duration_s == pytest.approx(
        step_s(1e9, 65536 * 11, eff=0.8, gpus=4), rel=1e-12
    )


# -- KV geometry: MLA and sliding windows ---------------------------------------------------------


def test_mla_reads_the_latent_cache_of_the_whole_context() -> None:
    per_token = 61 * (512 + 64) * 2  # DeepSeek-V3: 61 layers × (kv_lora_rank + rope dim) × bf16
    geom = geometry(groups=(KVGroup("mla", 61, per_token),))
    sim = VirtualSim(config(geom))
    sim.submit(0.0, 500, 4)
    sim.run()
    assert [s.kv_bytes for s in sim.steps] == [0, 501 * per_token, 502 * per_token, 503 * per_token]


def test_sliding_window_layers_read_at_most_the_window() -> None:
    full, sliding = KVGroup("full", 12, 12 * 1024), KVGroup("sliding", 12, 12 * 1024, window=128)
    geom = geometry(groups=(full, sliding))
    sim = VirtualSim(config(geom))
    req = sim.submit(0.0, 120, 20)
    sim.run()
    decode = [s for s in sim.steps if s.batch]
    # token i reads 120 + i tokens of the full layers and min(120 + i, 128) of the windowed ones
    expected = [12 * 1024 * (120 + i) + 12 * 1024 * min(120 + i, 128) for i in range(1, 20)]
    assert [s.kv_bytes for s in decode] == expected
    # consistent with the geometry's closed form, less token 0 (charged as prefill)
    total = geom.kv_bytes_read_sum(120, 20) - geom.kv_bytes_read(120)
    assert sum(s.kv_bytes for s in decode) == total
    assert req.generated == 20


# -- MoE: distinct experts ------------------------------------------------------------


def moe_geometry(experts: int = 128, k: int = 8) -> object:
    return geometry(
        name="toy-moe",
        dense_weight_bytes=500_000_000,
        moe_layers=48,
        experts=experts,
        experts_per_token=k,
        expert_bytes=9_437_184,  # Qwen3-30B-A3B: 3 × 2048 × 768 × 2 bytes
    )


def test_moe_batch_of_one_reads_exactly_k_experts_per_layer() -> None:
    geom = moe_geometry()
    sim = VirtualSim(config(geom))
    sim.submit(0.0, 50, 5)
    sim.run()
    for s in sim.steps[1:]:  # decode steps: one token → top-k distinct experts per layer
        assert s.distinct_experts == 48 * 8
        assert s.weight_bytes == 500_000_000 + 48 * 8 * 9_437_184
        assert s.duration_s == pytest.approx(step_s(s.weight_bytes, s.kv_bytes), rel=1e-12)
    # the prefill step's 50 tokens hit many more experts
    assert sim.steps[0].distinct_experts > 48 * 8 * 4


def test_moe_distinct_experts_follow_the_uniform_expectation() -> None:
    geom = moe_geometry()
    sim = VirtualSim(config(geom, max_num_seqs=16))
    for _ in range(16):
        sim.submit(0.0, 10, 400)
    sim.run()
    decode16 = [s.distinct_experts for s in sim.steps if s.batch == 16]
    assert len(decode16) > 300
    expected = 48 * 128 * (1 - (1 - 8 / 128) ** 16)  # seed formula: E·(1 − (1 − k/E)^B)
    mean = float(np.mean(decode16))
    sem = float(np.std(decode16)) / np.sqrt(len(decode16))
    assert abs(mean - expected) < 4 * sem + 1e-9
    assert geom.expected_unique_experts(16) * 48 == pytest.approx(expected)  # type: ignore[attr-defined]


def test_zipf_routing_touches_fewer_experts_than_uniform() -> None:
    geom = moe_geometry()
    runs = {}
    for routing in ("uniform", "zipf:1.2"):
        sim = VirtualSim(config(geom, routing=routing, max_num_seqs=8))
        for _ in range(8):
            sim.submit(0.0, 10, 100)
        sim.run()
        runs[routing] = np.mean([s.distinct_experts for s in sim.steps if s.batch == 8])
    assert runs["zipf:1.2"] < 0.8 * runs["uniform"]


# -- scheduler ------------------------------------------------------------


def test_chunked_prefill_splits_a_long_prompt_over_the_token_budget() -> None:
    sim = VirtualSim(config(max_batched_tokens=64))
    req = sim.submit(0.0, 200, 3)
    sim.run()
    assert [s.prefill_tokens for s in sim.steps[:4]] == [64, 64, 64, 8]
    assert [len(s.emits) for s in sim.steps[:4]] == [0, 0, 0, 1]  # token 0 ends the prompt
    assert len(sim.token_ns[req.rid]) == 3


def test_decodes_share_the_budget_with_a_prefill_chunk() -> None:
    sim = VirtualSim(config(max_batched_tokens=64))
    sim.submit(0.0, 10, 50)  # decoding by the time the long prompt arrives
    late = sim.submit(0.01, 300, 2)
    sim.run()
    mixed = [s for s in sim.steps if s.prefill_tokens and s.batch]
    assert mixed, "the long prompt was never chunked next to a decode"
    assert all(s.prefill_tokens + s.batch <= 64 for s in sim.steps)
    assert all(s.prefill_tokens == 63 for s in mixed[:-1])
    assert late.generated == 2


def test_max_num_seqs_caps_the_running_set() -> None:
    sim = VirtualSim(config(max_num_seqs=2))
    reqs = [sim.submit(0.0, 10, 5) for _ in range(4)]
    sim.run()
    assert max(len(s.emits) for s in sim.steps) == 2
    first_two_done = max(sim.token_ns[reqs[0].rid][-1], sim.token_ns[reqs[1].rid][-1])
    assert sim.token_ns[reqs[2].rid][0] > first_two_done - 1  # admitted only after a slot frees
    assert all(r.generated == 5 for r in reqs)


def test_fcfs_order_of_first_tokens() -> None:
    sim = VirtualSim(config(max_num_seqs=1))
    reqs = [sim.submit(0.001 * i, 10, 3) for i in range(5)]
    sim.run()
    firsts = [sim.token_ns[r.rid][0] for r in reqs]
    assert firsts == sorted(firsts)


def test_kv_exhaustion_preempts_the_newest_and_recomputes() -> None:
    # 10 blocks of 16 tokens: two 70-token prompts fill them; growth past 80 tokens preempts
    per_token = 65536
    sim = VirtualSim(config(kv_cache_gib=10 * BLOCK_SIZE * per_token / 2**30, max_model_len=160))
    old = sim.submit(0.0, 70, 80)
    new = sim.submit(0.0, 70, 80)
    sim.run()
    replica = sim.node.replicas[0]
    assert replica.num_blocks == 10
    assert old.preemptions == 0 and new.preemptions >= 1
    assert old.generated == new.generated == 80
    assert len(sim.token_ns[new.rid]) == 80  # no token re-sent after recompute
    # the old request ran alone to its end; the new one resumed with a full recompute
    resumed = [s for s in sim.steps if s.prefill_seqs == 1 and s.prefill_tokens > 70]
    assert resumed, "no recompute prefill seen"
    assert resumed[0].t_start_ns >= sim.token_ns[old.rid][-1]
    assert replica.free_blocks == 10
    assert replica.preemptions == new.preemptions


def test_kv_capacity_in_blocks() -> None:
    sim = VirtualSim(config(kv_cache_blocks=300, max_model_len=4096))
    assert sim.node.replicas[0].num_blocks == 300
    a = sim.submit(0.0, 2000, 100)
    sim.run(until_s=0.0003)  # inside the first step: the prompt holds its 125 blocks
    assert sim.node.replicas[0].free_blocks == 300 - 125
    sim.run()
    assert a.generated == 100 and sim.node.replicas[0].free_blocks == 300


def test_kv_cache_smaller_than_one_request_is_an_error() -> None:
    with pytest.raises(SpecError, match="max_model_len"):
        config(kv_cache_gib=4 * BLOCK_SIZE * 65536 / 2**30, max_model_len=4096)


def test_model_that_does_not_fit_is_an_error() -> None:
    with pytest.raises(SpecError, match="do not fit"):
        config(geometry(dense_weight_bytes=200_000_000_000), kv_cache_gib=None)


def test_default_kv_cache_is_memory_minus_weights() -> None:
    c = config(kv_cache_gib=None, gpus_per_replica=2)
    d = c.derive()
    assert d.kv_cache_bytes == pytest.approx(80e9 * 2 * 0.9 - 1e9)
    assert d.num_blocks == int(d.kv_cache_bytes // (16 * 65536))


def test_output_length_without_ignore_eos() -> None:
    sim = VirtualSim(config(output_len="fixed:5"))
    short = sim.submit(0.0, 10, 100, ignore_eos=False)
    capped = sim.submit(0.0, 10, 3, ignore_eos=False)
    floor = sim.submit(0.0, 10, 100, ignore_eos=False, min_tokens=8)
    sim.run()
    assert (short.generated, short.finish_reason) == (5, "stop")
    assert (capped.generated, capped.finish_reason) == (3, "length")
    assert (floor.generated, floor.finish_reason) == (8, "stop")


def test_geometric_output_lengths_have_the_configured_mean() -> None:
    sim = VirtualSim(config(output_len="geometric:20"))
    lengths = [sim.node.output_tokens(10_000) for _ in range(4000)]
    assert np.mean(lengths) == pytest.approx(20, rel=0.06)


# -- replicas ------------------------------------------------------------


def test_replicas_run_independently_behind_least_outstanding_routing() -> None:
    one = VirtualSim(config())
    for _ in range(2):
        one.submit(0.0, 10, 5)
    one.run()
    two = VirtualSim(config(replicas=2))
    reqs = [two.submit(0.0, 10, 5) for _ in range(4)]
    two.run()
    assert sorted(r.replica for r in reqs) == [0, 0, 1, 1]
    # each replica does what one replica does with two requests
    assert two.token_ns[reqs[0].rid] == one.token_ns[1]
    assert len(two.steps) == 2 * len(one.steps)


def test_router_prefers_the_less_loaded_replica() -> None:
    sim = VirtualSim(config(replicas=2))
    long = sim.submit(0.0, 10, 2000)  # still running at 0.5 s
    short = sim.submit(0.0, 10, 2)
    later = [sim.submit(0.5, 10, 2) for _ in range(3)]
    sim.run()
    assert long.replica != short.replica
    # at t = 0.5 s the short one is done: replica of `short` gets 2 of 3, then alternates
    counts = [sum(r.replica == i for r in later) for i in (0, 1)]
    assert counts[short.replica] == 2


# -- ground truth log ------------------------------------------------------------


def test_truth_log_has_one_record_per_step(tmp_path: Path) -> None:
    path = tmp_path / "truth.jsonl"
    sim = VirtualSim(config(), truth_log=path)
    sim.submit(0.0, 10, 4)
    sim.submit(0.5, 10, 4)
    sim.run()
    sim.close()
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(recs) == len(sim.steps) == 8
    need = {
        "t_start_ns", "t_end_ns", "deadline_ns", "duration_s", "replica", "batch",
        "prefill_tokens", "distinct_experts", "weight_bytes", "kv_bytes", "prefill_s",
        "overhead_s", "energy_j",
    }  # fmt: skip
    assert need <= set(recs[0])
    # the second request arrived after an idle gap
    assert recs[4]["idle_before_s"] == pytest.approx(0.5 - recs[3]["deadline_ns"] / 1e9)
    for r in recs:
        assert r["duration_s"] == pytest.approx((r["weight_bytes"] + r["kv_bytes"]) / (BW * 0.5))


def test_energy_is_idle_power_plus_dynamic_share_of_tdp() -> None:
    sim = VirtualSim(config(idle_w=100.0))
    sim.submit(0.0, 10, 50)
    sim.run()
    for s in sim.steps:  # memory-bound step: idle + (TDP − idle) × efficiency
        assert s.energy_j == pytest.approx(s.duration_s * (100 + (700 - 100) * 0.5), rel=1e-12)
    truth = sim.truth[0]
    assert truth.energy_j == pytest.approx(sum(s.energy_j for s in sim.steps))
    # a meter keeps running while idle
    end = sim.steps[-1].t_end_ns
    assert truth.energy_at(end + 10**9) == pytest.approx(truth.energy_j + 100.0)
