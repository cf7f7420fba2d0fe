"""KV pressure from the client alone when no decoding stream falls silent: prompts prefilled
again, seen in the time to first token against the work-conserving prefill bound.

Hand-built: the bound worked by hand. Virtual time (``sim.VirtualSim``): Qwen3-235B-A22B-FP8's
shape on 8×H100 with 32k-token prompts and a 100 GiB KV cache, where the engine preempts
sequences in their prefill (279 preemptions in the window) and every decoding stream keeps
its pace (``metrics.mbu.kv_pressure`` finds no stall); the same load with a cache that fits raises
nothing. The client's figures go through ``regime_from_records`` and ``compute_mbu`` as a
probe's do; truth from the simulator's steps over the same window.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from builders import streamed_record
from test_validation_routing import QWEN235_SHAPE
from test_validation_single_stream import step_records
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.kv_pressure import stream_stalls
from tokenwatt.metrics.mbu.mixed_steps import regime_from_records
from tokenwatt.metrics.prompt_recompute import mark_recompute, prompt_recompute
from tokenwatt.records import RequestRecord
from tokenwatt.result import Mbu
from tokenwatt.sim import SimConfig, VirtualSim
from tokenwatt.sim.truth import FigureTruth, figure_truth

MS = 1_000_000


def test_the_bound_by_hand() -> None:
    """1000-token prompts prefilled in 100 ms when alone (0.1 ms a token): a request sent with
    one prompt ahead may wait 2 × (1000 + 1000) × 0.1 ms = 400 ms; one that waited 1 s had
    its prompt prefilled again."""
    alone = [
        streamed_record(i, [i * 10**10 + (100 + k) * MS for k in range(3)], sent_ns=i * 10**10,
                        prompt_tokens=1000)
        for i in range(4)
    ]  # fmt: skip
    t = 50_000 * MS
    ahead = streamed_record(10, [t + 150 * MS, t + 151 * MS], sent_ns=t, prompt_tokens=1000)
    late = streamed_record(11, [t + 1000 * MS, t + 1001 * MS], sent_ns=t + MS, prompt_tokens=1000)
    fine = streamed_record(12, [t + 390 * MS, t + 391 * MS], sent_ns=t + 2 * MS, prompt_tokens=1000)
    rec = prompt_recompute([*alone, ahead, late, fine], [*alone, ahead, late, fine])
    assert rec is not None and rec.prefill_s_per_token == pytest.approx(1e-4)
    # `late` had `ahead` in front (bound 2 × 2000 × 0.1 ms); `fine` had both (3000: 600 ms)
    assert rec.beyond == 1 and rec.excess_s == pytest.approx(0.999 - 0.4, abs=1e-6)
    assert not rec.seen  # one request is not a pattern


def _arrivals(rate: float, until_s: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    while (t := t + rng.exponential(1.0 / rate)) < until_s:
        out.append(t)
    return out


def _case(kv_cache_gib: float, rate: float = 1.0) -> dict[str, Any]:
    """32k-token prompts, 512-token outputs, 120 s window after 60 s of warm-up."""
    g = load_geometry("qwen3-30b-a3b-fp8", overrides=QWEN235_SHAPE)
    acc = get_accelerator("h100-sxm")
    cfg = SimConfig(geometry=g, accelerator=acc, gpus_per_replica=8, efficiency=0.6,
                    prefill_cost=True, kv_cache_gib=kv_cache_gib, seed=5)  # fmt: skip
    sim = VirtualSim(cfg)
    n_in, n_out, warm, window_s = 32_768, 512, 60.0, 120.0
    reqs = [sim.submit(t, n_in, n_out) for t in _arrivals(rate, warm + window_s, 5)]
    sim.run()
    w0, w1 = round(warm * 1e9), round((warm + window_s) * 1e9)
    records: list[RequestRecord] = []
    for r in reqs:
        if sim.token_ns[r.rid]:
            records.append(streamed_record(r.rid, sim.token_ns[r.rid], sent_ns=r.arrival_ns,
                                           prompt_tokens=n_in))  # fmt: skip
    counted = [x for x in records if w0 <= x.sent_ns < w1]  # type: ignore[operator]
    out = sum(x.output_tokens for x in counted)
    tau = sum(x.end_ns - x.first_token_ns for x in counted) / 1e9 / (out - len(counted))  # type: ignore[operator]
    ctx, kv_tok = kv_read_per_output_token(g, [(n_in, x.output_tokens) for x in counted])
    regime = regime_from_records(records, counted, w0, w1, replicas=1,
                                 chunk_budget_tokens=cfg.settings.max_batched_tokens,
                                 slot_limit=cfg.settings.max_num_seqs)  # fmt: skip
    mbu = compute_mbu(g, output_tokens_per_s=out / window_s, itl_token_weighted_s=tau,
                      replicas=1, gpus=8, bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s,
                      mean_context_per_token=ctx, kv_bytes_per_output_token=kv_tok,
                      regime=regime)  # fmt: skip
    truth: FigureTruth = figure_truth(
        step_records(sim), w0, w1, acc.bandwidth_bytes_per_s * 8, g.weight_bytes_per_step
    )
    return {
        "mbu": mbu,
        "truth": truth,
        "stalls": stream_stalls(records, counted, w0, w1),
        "recompute": prompt_recompute(records, counted),
        "preemptions": sum(r.preemptions for r in reqs if w0 <= r.arrival_ns < w1),
    }


@pytest.mark.timeout(120)
def test_32k_prompts_under_kv_pressure_are_flagged_from_the_client() -> None:
    c = _case(kv_cache_gib=100.0)
    mbu: Mbu = c["mbu"]
    truth: FigureTruth = c["truth"]
    rec = c["recompute"]
    assert mbu.mbu is not None and mbu.inputs.batch_per_replica is not None
    b = mbu.inputs.batch_per_replica
    print(f"preemptions {c['preemptions']} | stalls {c['stalls'].stalls} | beyond the bound "
          f"{rec.beyond} of {rec.requests} ({rec.excess_s:.0f} s) | B {b:.2f} true "
          f"{truth.mean_batch:.2f} | MBU {100 * mbu.mbu:.2f} truth {100 * truth.all_bytes:.2f} "
          f"band [{100 * (mbu.mbu_lower_bound or 0):.2f}, {100 * mbu.mbu:.2f}]")  # fmt: skip
    assert c["preemptions"] > 200
    assert not c["stalls"].seen  # the stall rule is blind here: no decoding stream falls silent
    assert rec is not None and rec.seen
    marked = mark_recompute(mbu, rec)
    assert marked.flags.kv_pressure and "B = T·τ/R reads high" in marked.notes[-1]
    assert mbu.inputs.batch_per_replica > 2 * truth.mean_batch  # the direction stated for B
    low = mbu.mbu_lower_bound
    held = abs(mbu.mbu - truth.all_bytes) <= 0.01 or (
        low is not None and low <= truth.all_bytes <= mbu.mbu
    )
    assert held


@pytest.mark.timeout(120)
def test_the_same_load_with_a_cache_that_fits_raises_nothing() -> None:
    c = _case(kv_cache_gib=2000.0)
    assert c["preemptions"] == 0
    rec = c["recompute"]
    assert rec is not None and rec.beyond == 0 and not rec.seen
    assert not mark_recompute(c["mbu"], rec).flags.kv_pressure


@pytest.mark.parametrize(("model", "prefill", "rate", "n_in"), [
    ("qwen3-30b-a3b", True, 20.0, 512),
    ("qwen3-30b-a3b", False, 20.0, 512),
    ("llama-3.1-8b", False, 40.0, 256),
])  # fmt: skip
def test_a_busy_queue_without_preemption_is_not_recompute(
    model: str, prefill: bool, rate: float, n_in: int
) -> None:
    """Moderate load, prompts queued behind each other and behind decode steps (prefill
    costed or free): no request beyond the bound. Overloaded until no request finds the queue
    empty, the prefill time per token cannot be measured: None (no flag, no claim)."""
    g, acc = load_geometry(model), get_accelerator("h100-sxm")

    def measured(r: float) -> Any:
        sim = VirtualSim(SimConfig(geometry=g, accelerator=acc, gpus_per_replica=1,
                                   efficiency=0.6, prefill_cost=prefill, seed=3))  # fmt: skip
        reqs = [sim.submit(t, n_in, 128) for t in _arrivals(r, 40.0, 3)]
        sim.run()
        recs = [
            streamed_record(x.rid, sim.token_ns[x.rid], sent_ns=x.arrival_ns, prompt_tokens=n_in)
            for x in reqs
            if sim.token_ns[x.rid]
        ]
        assert sum(x.preemptions for x in reqs) == 0 or r > rate
        return prompt_recompute(recs, [x for x in recs if x.sent_ns >= 10 * 10**9])  # type: ignore[operator]

    rec = measured(rate)
    assert rec is not None and rec.requests > 500 and rec.beyond == 0
    if prefill:
        assert measured(2 * rate) is None  # the queue never empties: nothing to measure by
