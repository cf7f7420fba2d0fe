"""Speculative decoding: the client's steps, acceptance length and MBU against the truth.

Virtual time (``sim.VirtualSim``), as tests/test_validation_moe.py: exact and deterministic.
The "client" sees what a client sees over HTTP: each request's chunks (one per engine step,
1 + accepted tokens each, stamped at the step's end) and its prompt length; from those
``metrics.steps`` derives steps and the acceptance length and ``compute_mbu(steps=...)`` the
MBU. The truth comes from the simulator's own steps over the same window: acceptance length =
tokens the verify steps emitted ÷ sequences verified; steps/s = decode sequences ÷ Σ
(sequences × step time) (each running sequence sits in every step); MBU = every byte the
decode steps read (target weights for k + 1 positions, KV, the drafter's bytes) ÷ (window ×
node bandwidth). Targets: acceptance length within 3 %, steps/s within 2 %, MBU
within 1 pt; the seed's token-based formula (before) is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Any

import pytest

from test_validation_moe import _arrivals
from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.mixed_steps import StepRegime
from tokenwatt.metrics.mbu.spec_mbu import Drafter, StepBasis
from tokenwatt.metrics.steps import step_figures
from tokenwatt.records import RequestRecord
from tokenwatt.result import Mbu, StepSummary
from tokenwatt.sim import SimConfig, VirtualSim


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    model: str
    accelerator: str
    gpus: int
    method: str
    draft_model: str | None = None


DENSE = Case("Llama-3.1-70B 4×H100, 8B draft", "llama-3.1-70b", "h100-sxm", 4, "draft",
             "llama-3.1-8b")  # fmt: skip
DENSE_NGRAM = Case("Llama-3.1-8B 1×H100 ngram", "llama-3.1-8b", "h100-sxm", 1, "ngram")
MOE = Case("Qwen3-30B-A3B 1×H100 ngram", "qwen3-30b-a3b", "h100-sxm", 1, "ngram")
MTP = Case("DeepSeek-V3 8×H200 MTP", "deepseek-v3", "h200", 8, "mtp")


@dataclass(frozen=True, slots=True)
class Truth:
    acceptance_length: float
    steps_per_s: float
    mbu: float
    mean_batch: float


@dataclass(frozen=True, slots=True)
class Outcome:
    steps: StepSummary
    mbu: Mbu
    seed: Mbu  # today's formula: s = 1/τ, B = T·τ/R, no drafter bytes
    truth: Truth

    @property
    def seed_mbu(self) -> float:
        """The seed formula's value even where it is refused as above the rated bandwidth."""
        i = self.seed.inputs
        assert i.bytes_per_s is not None
        return i.bytes_per_s / i.node_bandwidth_bytes_per_s

    def line(self, label: str) -> str:
        s, t = self.steps, self.truth
        assert s.acceptance_length and s.steps_per_s and self.mbu.mbu
        return (
            f"{label}: α {s.acceptance_length:.3f} truth {t.acceptance_length:.3f} "
            f"({100 * (s.acceptance_length / t.acceptance_length - 1):+.2f} %) | steps/s "
            f"{s.steps_per_s:.2f} truth {t.steps_per_s:.2f} "
            f"({100 * (s.steps_per_s / t.steps_per_s - 1):+.2f} %) | MBU {self.mbu.mbu:.4f} "
            f"truth {t.mbu:.4f} ({100 * (self.mbu.mbu - t.mbu):+.2f} pt) | seed "
            f"{self.seed_mbu:.4f} ({100 * (self.seed_mbu - t.mbu):+.2f} pt) | B {t.mean_batch:.1f}"
        )


def _record(rid: int, stamps: list[int]) -> RequestRecord:
    """The request as a client records it: one chunk per distinct step end, its tokens."""
    ns, tokens = [], []
    for t, group in groupby(stamps):
        ns.append(t)
        tokens.append(len(list(group)))
    return RequestRecord(rid, 0, 0, 0, chunk_ns=ns, chunk_tokens=tokens, status="ok")


def _truth(sim: VirtualSim, w0: int, w1: int, node_bw: float) -> Truth:
    emitted = drafts = batch = batch_s = read = dsteps = 0.0
    for s in sim.steps:
        lo, hi = max(s.t_start_ns, w0), min(s.t_end_ns, w1)
        if hi <= lo or s.batch == 0:
            continue
        f = (hi - lo) / (s.t_end_ns - s.t_start_ns)
        read += f * (s.weight_bytes + s.kv_bytes + s.draft_bytes)
        assert s.spec is not None
        emitted += f * s.spec.emitted
        drafts += f * s.spec.drafts
        batch += f * s.batch
        batch_s += f * s.batch * s.duration_s
        dsteps += f
    return Truth(emitted / drafts, batch / batch_s, read / ((w1 - w0) / 1e9 * node_bw),
                 batch / dsteps)  # fmt: skip


def run_case(
    case: Case,
    *,
    k: int,
    acceptance: float,
    batch: float,
    efficiency: float = 0.6,
    n_in: int = 512,
    n_out: int = 256,
    window_s: float = 60.0,
    seed: int = 1,
    routing: str = "uniform",
    expert_load: ExpertLoad | None = None,
) -> Outcome:
    g = load_geometry(case.model)
    draft = load_geometry(case.draft_model) if case.draft_model else None
    acc = get_accelerator(case.accelerator)
    node_bw = acc.bandwidth_bytes_per_s * case.gpus
    spec: dict[str, Any] = {"method": case.method, "num_tokens": k, "acceptance": acceptance}
    alpha = sum(acceptance**i for i in range(k + 1))
    draft_step = (draft.dense_weight_bytes * k) if draft else 0.0
    step = (
        g.weight_bytes_per_step(batch * (k + 1)) + draft_step
        + batch * (n_in + n_out / 2) * g.kv_bytes_per_token_full_context
    ) / (node_bw * efficiency)  # fmt: skip
    rate = batch * alpha / (n_out * step)  # placement only (MTP bytes left out of it)
    warm = max(2.0, 3 * n_out / alpha * step)
    cfg = SimConfig(
        geometry=g, accelerator=acc, gpus_per_replica=case.gpus, efficiency=efficiency,
        prefill_cost=False, seed=seed, speculative=spec, draft_geometry=draft, routing=routing,
    )  # fmt: skip
    sim = VirtualSim(cfg)
    reqs = [sim.submit(t, n_in, n_out) for t in _arrivals(rate, warm + window_s + 1.0, seed)]
    sim.run()
    w0, w1 = round(warm * 1e9), round((warm + window_s) * 1e9)
    counted = [r for r in reqs if w0 <= r.arrival_ns < w1]
    records = [_record(r.rid, sim.token_ns[r.rid]) for r in counted]
    out_tokens = sum(r.generated for r in counted)
    t_rate = out_tokens / window_s
    tau = (
        sum(r.last_token_ns - r.first_token_ns for r in counted)
        / 1e9
        / sum(r.generated - 1 for r in counted)
    )
    ctx, kv_tok = kv_read_per_output_token(g, [(n_in, r.generated) for r in counted])
    pairs = [(n_in, r.generated) for r in counted]
    draft_kv = kv_read_per_output_token(draft, pairs)[1] if draft else 0.0
    figures = step_figures(records, declared_k=k)
    kw: dict[str, Any] = {
        "output_tokens_per_s": t_rate, "itl_token_weighted_s": tau, "replicas": 1,
        "gpus": case.gpus, "bandwidth_bytes_per_s": acc.bandwidth_bytes_per_s,
        "mean_context_per_token": ctx, "kv_bytes_per_output_token": kv_tok,
    }  # fmt: skip
    regime = StepRegime(
        len(counted) / window_s, float(n_in), out_tokens / len(counted), expert_load=expert_load
    )
    drafter = Drafter(case.method, k, draft)  # type: ignore[arg-type]
    basis = StepBasis(figures, drafter, draft_kv, regime)
    return Outcome(figures, compute_mbu(g, steps=basis, **kw), compute_mbu(g, **kw),
                   _truth(sim, w0, w1, node_bw))  # fmt: skip


def _check(o: Outcome) -> None:
    s, t, m = o.steps, o.truth, o.mbu
    assert s.speculation == "declared" and not s.coalesced
    assert s.acceptance_length == pytest.approx(t.acceptance_length, rel=0.03)
    assert s.steps_per_s == pytest.approx(t.steps_per_s, rel=0.02)
    assert m.mbu == pytest.approx(t.mbu, abs=0.01)
    assert m.flags.speculative_steps and m.inputs.speculation is not None


QUICK = [(DENSE, 3, 0.7, 16), (MOE, 3, 0.8, 32), (MTP, 1, 0.8, 32)]


@pytest.mark.parametrize(("case", "k", "acceptance", "batch"), QUICK, ids=lambda v: str(v)[:12])
def test_speculation_quick(case: Case, k: int, acceptance: float, batch: int) -> None:
    o = run_case(case, k=k, acceptance=acceptance, batch=batch, window_s=30)
    print(o.line(f"{case.label} k={k} p={acceptance}"))
    _check(o)


GRID = [
    (case, k, p, batch)
    for case, batch in ((DENSE, 16), (DENSE_NGRAM, 32), (MOE, 32), (MTP, 32))
    for k in (1, 3, 5)
    for p in (0.5, 0.9)
]


@pytest.mark.slow
@pytest.mark.virtual
@pytest.mark.parametrize(("case", "k", "acceptance", "batch"), GRID, ids=lambda v: str(v)[:12])
def test_speculation_grid(case: Case, k: int, acceptance: float, batch: int) -> None:
    o = run_case(case, k=k, acceptance=acceptance, batch=batch, window_s=120)
    print(o.line(f"{case.label} k={k} p={acceptance}"))
    _check(o)


def test_mtp_under_skewed_routing_measured_and_not() -> None:
    """DeepSeek-V3 with MTP (k = 3) where the simulator routes by Zipf 1.2: given that expert
    load, MBU lands on the truth (target and MTP layer alike); without it the headline is the
    uniform upper bound, the truth lies inside the routing band and the band is flagged."""
    g = load_geometry(MTP.model)
    zipf = ExpertLoad.zipf(g.experts, g.experts_per_token, 1.2)
    kw: dict[str, Any] = {"k": 3, "acceptance": 0.8, "batch": 32, "window_s": 30,
                          "routing": "zipf:1.2"}  # fmt: skip
    measured = run_case(MTP, expert_load=zipf, **kw)
    print(measured.line("DeepSeek-V3 MTP k=3 zipf 1.2, measured load"))
    _check(measured)
    assert not measured.mbu.flags.moe_uniform_routing_upper_bound
    assert measured.mbu.mbu_lower_bound is None
    blind = run_case(MTP, **kw)
    print(blind.line("DeepSeek-V3 MTP k=3 zipf 1.2, not measured"))
    m, truth = blind.mbu, blind.truth.mbu
    assert m.mbu is not None and m.mbu_lower_bound is not None
    assert m.mbu - truth > 0.01  # uniform reads high under skew
    assert m.mbu_lower_bound - 0.01 <= truth <= m.mbu + 0.01
    assert m.flags.routing_unmeasured and m.flags.speculative_steps
