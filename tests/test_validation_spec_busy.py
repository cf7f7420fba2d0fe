"""Speculative MBU at low load: verify steps run only while a sequence decodes.

Virtual time: Llama-3.1-405B's shape on 8×H200 with n-gram speculation (k = 4, acceptance
0.7) and prefill costed, at a mean batch of about 4, where the replica idles part of the
window. The client's figures go through ``regime_from_records`` (idle share and prompts run
alone, from the records' stamps) and ``compute_mbu(steps=…)`` as a probe's do; truth from the
simulator's steps over the same window (``test_validation_spec._truth``). s = 1/τ_c is a rate
while decoding, so the weight term is scaled by the decode-busy share
(``spec_mbu.decode_busy_share``); without it (before) MBU read high by about 1/(1 − idle).
"""

from __future__ import annotations

import dataclasses
from itertools import groupby

import pytest

from builders import streamed_record
from test_validation_moe import _arrivals
from test_validation_spec import _truth
from test_validation_spec_chunks import LLAMA_405B
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.mixed_steps import regime_from_records
from tokenwatt.metrics.mbu.spec_mbu import Drafter, StepBasis
from tokenwatt.metrics.steps import step_figures
from tokenwatt.records import RequestRecord
from tokenwatt.sim import SimConfig, VirtualSim


def _run(n_in: int, batch: float = 4.0, k: int = 4, p: float = 0.7) -> tuple[float, float, float]:
    """(MBU, MBU before the busy share, truth)."""
    g = load_geometry("llama-3.1-70b", overrides=LLAMA_405B)
    acc = get_accelerator("h200")
    node_bw, n_out, window_s = 8 * acc.bandwidth_bytes_per_s, 256, 40.0
    alpha = sum(p**i for i in range(k + 1))
    kv_step = batch * (n_in + n_out / 2) * g.kv_bytes_per_token_full_context
    step = (g.weight_bytes_per_step(batch * (k + 1)) + kv_step) / (node_bw * 0.6)
    rate, warm = batch * alpha / (n_out * step), max(2.0, 3 * n_out / alpha * step)
    cfg = SimConfig(geometry=g, accelerator=acc, gpus_per_replica=8, efficiency=0.6,
                    prefill_cost=True, seed=1,
                    speculative={"method": "ngram", "num_tokens": k, "acceptance": p})  # fmt: skip
    sim = VirtualSim(cfg)
    reqs = [sim.submit(t, n_in, n_out) for t in _arrivals(rate, warm + window_s + 1.0, 1)]
    sim.run()
    w0, w1 = round(warm * 1e9), round((warm + window_s) * 1e9)
    records: list[RequestRecord] = []
    for r in reqs:
        steps = [(t, len(list(grp))) for t, grp in groupby(sim.token_ns[r.rid])]
        stamps, sizes = [t for t, _ in steps], [n for _, n in steps]
        records.append(
            streamed_record(r.rid, stamps, sent_ns=r.arrival_ns, prompt_tokens=n_in, tokens=sizes)
        )
    counted = [x for x in records if w0 <= x.sent_ns < w1]  # type: ignore[operator]
    out = sum(x.output_tokens for x in counted)
    tau = sum(x.end_ns - x.first_token_ns for x in counted) / 1e9 / (out - len(counted))  # type: ignore[operator]
    ctx, kv_tok = kv_read_per_output_token(g, [(n_in, x.output_tokens) for x in counted])
    regime = regime_from_records(records, counted, w0, w1, replicas=1,
                                 chunk_budget_tokens=cfg.settings.max_batched_tokens,
                                 slot_limit=cfg.settings.max_num_seqs)  # fmt: skip
    assert regime is not None and (regime.idle_fraction or 0.0) > 0.03  # the case: idle time
    figures = step_figures(counted, declared_k=k)

    def mbu(reg: object) -> float:
        m = compute_mbu(g, output_tokens_per_s=out / window_s, itl_token_weighted_s=tau,
                        replicas=1, gpus=8, bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s,
                        mean_context_per_token=ctx, kv_bytes_per_output_token=kv_tok,
                        steps=StepBasis(figures, Drafter("ngram", k), 0.0, reg))  # type: ignore[arg-type]  # fmt: skip
        assert m.mbu is not None
        return m.mbu

    before = dataclasses.replace(regime, idle_fraction=None, prefill_only_fraction=None)
    return mbu(regime), mbu(before), _truth(sim, w0, w1, node_bw).mbu


@pytest.mark.parametrize("n_in", [512, 1024])
def test_speculative_mbu_at_low_load_counts_busy_steps_only(n_in: int) -> None:
    after, before, truth = _run(n_in)
    print(f"405B n-gram k=4, prompts {n_in}, B≈4: truth {100 * truth:.2f} | before "
          f"{100 * before:.2f} ({100 * (before - truth):+.2f}) | after {100 * after:.2f} "
          f"({100 * (after - truth):+.2f})")  # fmt: skip
    assert before > truth + 0.02  # the idle share read as steps: high
    assert after == pytest.approx(truth, abs=0.01)
