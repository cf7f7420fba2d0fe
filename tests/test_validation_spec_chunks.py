"""Verify steps coalesced into one chunk: detected, flagged the right way, counted again.

Virtual time (``sim.VirtualSim`` with speculative decoding), as tests/test_validation_spec.py,
but the engine sends the tokens of c verify steps as one chunk (the first token alone, then
every c steps, the rest with the last): what a server with a stream interval does. The client
sees those chunks; the engine's spec-decode counters over the window give its acceptance
length 1 + accepted ÷ drafts (the simulator's own step record, what vLLM's counters count).
Truth: the simulator's steps over the same window (``test_validation_spec._truth``).

The rule, per case (k = 2–5 draft tokens, c = 2–4 steps per chunk, dense and MoE targets, the
drafter declared or not): ``coalesced_chunks`` is raised and its note says that one step per
chunk reads MBU low; with the engine's counters the steps are the engine's and MBU is within
1 pt of the truth (a draft model nobody declared: ``drafter_bytes_unknown``, below the
truth, as that flag says); from the client alone each full chunk counts as the smallest
chunk's tokens in steps (at least c), so the truth lies between the one-step-per-chunk figure
(below it, as the note says) and that headline (+1 pt), and the headline is within 1 pt where
the smallest chunk holds c tokens.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import orjson
import pytest

from test_validation_moe import _arrivals
from test_validation_spec import _truth
from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.derive import summarize_probe
from tokenwatt.load.engine_probe import EngineWitness
from tokenwatt.load.probe import run_probe
from tokenwatt.load.target import open_target, resolve_accelerator
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.mixed_steps import StepRegime
from tokenwatt.metrics.mbu.spec_mbu import Drafter, StepBasis
from tokenwatt.metrics.spec_chunks import (
    ChunkedSteps,
    chunked_note,
    coalesced_verify_steps,
    recounted,
)
from tokenwatt.metrics.steps import step_figures
from tokenwatt.records import RequestRecord
from tokenwatt.result import Mbu, StepSummary
from tokenwatt.sim import SimConfig, VirtualSim
from tokenwatt.spec import parse_spec

LLAMA_405B = {  # Llama-3.1-405B's shape on Llama-3.1-70B's keys (its config.json values)
    "config.hidden_size": 16384,
    "config.num_hidden_layers": 126,
    "config.num_attention_heads": 128,
    "config.num_key_value_heads": 8,
    "config.intermediate_size": 53248,
}


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    model: str
    accelerator: str
    gpus: int
    method: str
    batch: float
    overrides: dict[str, Any] | None = None
    draft_model: str | None = None

    def geometry(self) -> ModelGeometry:
        return load_geometry(self.model, overrides=self.overrides)


L405 = Case("Llama-3.1-405B 8×H200 ngram", "llama-3.1-70b", "h200", 8, "ngram", 16, LLAMA_405B)
QWEN = Case("Qwen3-30B-A3B 1×H100 ngram", "qwen3-30b-a3b", "h100-sxm", 1, "ngram", 32)
L70 = Case("Llama-3.1-70B 4×H100 8B draft", "llama-3.1-70b", "h100-sxm", 4, "draft", 16,
           draft_model="llama-3.1-8b")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Outcome:
    truth: float
    one_per_chunk: float  # MBU counting one step per chunk (before)
    engine: Mbu  # steps from the engine's counters
    client: Mbu  # steps from the smallest chunk
    chunked_engine: ChunkedSteps | None
    chunked_client: ChunkedSteps | None
    smallest: int
    before: float  # what the probe reported before: steps from chunks, or the seed's formula

    def line(self, label: str) -> str:
        e, c = self.engine.mbu or 0.0, self.client.mbu or 0.0
        return (
            f"{label}: truth {100 * self.truth:.2f} | before {100 * self.before:.2f} | one step "
            "per chunk "
            f"{100 * self.one_per_chunk:.2f} ({100 * (self.one_per_chunk - self.truth):+.2f}) | "
            f"engine counters {100 * e:.2f} ({100 * (e - self.truth):+.2f}) | client alone "
            f"{100 * c:.2f} ({100 * (c - self.truth):+.2f}, smallest chunk {self.smallest})"
        )


def _chunks(rid: int, stamps: list[int], c: int) -> RequestRecord:
    """The first token alone, then the tokens of every c verify steps as one chunk."""
    steps = [(t, len(list(g))) for t, g in groupby(stamps)]
    ns, tokens = [steps[0][0]], [steps[0][1]]
    for i in range(1, len(steps), c):
        group = steps[i : i + c]
        ns.append(group[-1][0])
        tokens.append(sum(n for _, n in group))
    return RequestRecord(rid, 0, 0, 0, chunk_ns=ns, chunk_tokens=tokens, status="ok")


def _engine_acceptance(sim: VirtualSim, w0: int, w1: int) -> float:
    """The spec-decode counters' increase over the window: 1 + accepted ÷ drafts."""
    accepted = drafts = 0.0
    for s in sim.steps:
        if s.spec is not None and w0 <= s.t_end_ns < w1:
            accepted += s.spec.accepted
            drafts += s.spec.drafts
    return 1.0 + accepted / drafts


def run_case(
    case: Case, *, k: int, c: int, acceptance: float, declared: bool, window_s: float = 30.0
) -> Outcome:
    g = case.geometry()
    draft = load_geometry(case.draft_model) if case.draft_model else None
    acc = get_accelerator(case.accelerator)
    node_bw = acc.bandwidth_bytes_per_s * case.gpus
    n_in, n_out, batch = 512, 256, case.batch
    alpha = sum(acceptance**i for i in range(k + 1))
    draft_step = (draft.dense_weight_bytes * k) if draft else 0.0
    step = (
        g.weight_bytes_per_step(batch * (k + 1)) + draft_step
        + batch * (n_in + n_out / 2) * g.kv_bytes_per_token_full_context
    ) / (node_bw * 0.6)  # fmt: skip
    rate = batch * alpha / (n_out * step)
    warm = max(2.0, 3 * n_out / alpha * step)
    spec = {"method": case.method, "num_tokens": k, "acceptance": acceptance}
    cfg = SimConfig(
        geometry=g, accelerator=acc, gpus_per_replica=case.gpus, efficiency=0.6,
        prefill_cost=False, seed=1, speculative=spec, draft_geometry=draft,
    )  # fmt: skip
    sim = VirtualSim(cfg)
    reqs = [sim.submit(t, n_in, n_out) for t in _arrivals(rate, warm + window_s + 1.0, 1)]
    sim.run()
    w0, w1 = round(warm * 1e9), round((warm + window_s) * 1e9)
    counted = [r for r in reqs if w0 <= r.arrival_ns < w1]
    records = [_chunks(r.rid, sim.token_ns[r.rid], c) for r in counted]
    out_tokens = sum(r.generated for r in counted)
    tau = (
        sum(r.last_token_ns - r.first_token_ns for r in counted) / 1e9 / (out_tokens - len(counted))
    )
    pairs = [(n_in, r.generated) for r in counted]
    ctx, kv_tok = kv_read_per_output_token(g, pairs)
    draft_kv = kv_read_per_output_token(draft, pairs)[1] if draft else 0.0
    kw: dict[str, Any] = {
        "output_tokens_per_s": out_tokens / window_s, "itl_token_weighted_s": tau,
        "replicas": 1, "gpus": case.gpus, "bandwidth_bytes_per_s": acc.bandwidth_bytes_per_s,
        "mean_context_per_token": ctx, "kv_bytes_per_output_token": kv_tok,
    }  # fmt: skip
    regime = StepRegime(len(counted) / window_s, float(n_in), out_tokens / len(counted))
    declared_k = k if declared else None
    figures = step_figures(records, declared_k=declared_k)

    def mbu_of(f: StepSummary) -> Mbu:
        kk = k if declared else max(1, f.max_chunk_tokens - 1)
        drafter = Drafter(case.method if declared else "unknown", kk, draft)  # type: ignore[arg-type]
        return compute_mbu(g, steps=StepBasis(f, drafter, draft_kv, regime), **kw)

    with_engine = coalesced_verify_steps(
        records, figures, declared_k=declared_k,
        engine_acceptance_length=_engine_acceptance(sim, w0, w1),
    )  # fmt: skip
    alone = coalesced_verify_steps(
        records, figures, declared_k=declared_k, engine_acceptance_length=None
    )
    one = mbu_of(figures.model_copy(update={"coalesced": False}))
    smallest = min(t for r in records for t in r.chunk_tokens[1:-1])
    return Outcome(
        truth=_truth(sim, w0, w1, node_bw).mbu,
        one_per_chunk=one.mbu or 0.0,
        engine=mbu_of(recounted(figures, with_engine)) if with_engine else one,
        client=mbu_of(recounted(figures, alone)) if alone else one,
        chunked_engine=with_engine,
        chunked_client=alone,
        smallest=smallest,
        before=_seed(g, kw) if figures.coalesced else one.mbu or 0.0,
    )


def _seed(g: ModelGeometry, kw: dict[str, Any]) -> float:
    """The seed's formula's value (what a flagged coalesced probe fell back to), refused or not."""
    i = compute_mbu(g, **kw).inputs
    assert i.bytes_per_s is not None
    return i.bytes_per_s / i.node_bandwidth_bytes_per_s


def _check(o: Outcome, c: int, unknown_draft: bool = False) -> None:
    assert o.chunked_engine is not None and o.chunked_engine.source == "engine"
    assert o.chunked_engine.steps_per_chunk <= c
    if unknown_draft:  # a draft model nobody declared: its bytes left out, reads low (its own
        # flag, drafter_bytes_unknown); the steps are still the engine's
        assert o.engine.flags.drafter_bytes_unknown
        assert o.engine.mbu is not None and o.engine.mbu < o.truth - 0.01
        assert o.one_per_chunk < o.engine.mbu
        return
    assert o.engine.mbu == pytest.approx(o.truth, abs=0.01)
    # the direction the note states: one step per chunk reads low
    assert o.one_per_chunk < o.truth - 0.01
    assert "MBU would read low" in chunked_note(o.chunked_engine, None)
    # the client alone sees it too, and the headline reads high only where c < the smallest
    assert o.chunked_client is not None and o.chunked_client.source == "smallest chunk"
    assert o.client.mbu is not None
    assert o.one_per_chunk < o.truth < o.client.mbu + 0.01
    if o.smallest == c:
        assert o.client.mbu == pytest.approx(o.truth, abs=0.01)


QUICK = [(L405, 4, 3, 0.7, False), (QWEN, 3, 2, 0.8, True), (L70, 2, 4, 0.7, True)]


@pytest.mark.parametrize(("case", "k", "c", "p", "declared"), QUICK, ids=lambda v: str(v)[:14])
def test_chunked_speculation_quick(case: Case, k: int, c: int, p: float, declared: bool) -> None:
    o = run_case(case, k=k, c=c, acceptance=p, declared=declared)
    print(o.line(f"{case.label} k={k} c={c} p={p} declared={declared}"))
    _check(o, c, case.draft_model is not None and not declared)


GRID = [
    (case, k, c, 0.7, declared)
    for case in (L405, QWEN, L70)
    for k in (2, 5)
    for c in (2, 3, 4)
    for declared in (False, True)
]


@pytest.mark.slow
@pytest.mark.virtual
@pytest.mark.parametrize(("case", "k", "c", "p", "declared"), GRID, ids=lambda v: str(v)[:14])
def test_chunked_speculation_grid(case: Case, k: int, c: int, p: float, declared: bool) -> None:
    o = run_case(case, k=k, c=c, acceptance=p, declared=declared)
    print(o.line(f"{case.label} k={k} c={c} p={p} declared={declared}"))
    _check(o, c, case.draft_model is not None and not declared)


def test_one_step_per_chunk_is_not_flagged() -> None:
    """The same speculation sent one verify step per chunk: neither rule fires (the engine's
    acceptance agrees with the chunks; the smallest chunk is one token)."""
    o = run_case(QWEN, k=3, c=1, acceptance=0.8, declared=False, window_s=20.0)
    assert o.chunked_engine is None and o.chunked_client is None and o.smallest == 1
    assert o.engine.mbu == pytest.approx(o.truth, abs=0.01)


@pytest.mark.exclusive
@pytest.mark.timeout(180)
def test_over_http_the_engines_counters_count_the_steps(tmp_path: Path) -> None:
    """The simulator sending 3 verify steps per chunk (``sim.steps_per_chunk``) behind a plain
    URL, n-gram k = 3 not declared, the witness scraping its vLLM spec-decode counters: the
    probe (``summarize_probe``, as bench and probe run it) flags ``coalesced_chunks``, says
    the steps are the engine's, and MBU lands on the truth; without the scrape the client's
    own evidence (the smallest chunk) flags it and says which way."""
    body: dict[str, Any] = {
        "model": {"source": "llama-3.1-8b"},
        "hardware": {"accelerator": "h100-sxm", "gpus": 1},
        "endpoint": {"url": "sim"},
        "sim": {"efficiency": 0.5, "prefill_cost": False, "steps_per_chunk": 3,
                "speculative": {"method": "ngram", "num_tokens": 3, "acceptance": 0.7}},
        "workload": {"input_tokens": 512, "output_tokens": 128, "seed": 1},
        "search": {"probe": {"warmup_s": 1.5, "min_duration_s": 3, "min_requests": 20,
                             "max_duration_s": 18, "drain_timeout_s": 60}},
    }  # fmt: skip
    log = tmp_path / "truth.jsonl"
    spec = parse_spec(body)
    warnings: list[str] = []

    async def main() -> tuple[Any, Any]:
        async with open_target(spec, sim_mode="subprocess", truth_log=log) as target:
            plain = parse_spec({**body, "sim": {}, "endpoint": {"url": target.base_url}})
            witness = EngineWitness(plain.server_metrics, target.base_url, warnings)
            async with open_target(plain) as endpoint:
                scraper = await witness.start()
                run = await run_probe(plain, endpoint.client, rate_rps=8.0, seed=1)
                return run, await witness.stop(scraper, run)

    run, window = asyncio.run(main())
    plain = parse_spec({**body, "sim": {}, "endpoint": {"url": "http://127.0.0.1:9/v1"}})
    acc = resolve_accelerator(plain.hardware)
    g = load_geometry("llama-3.1-8b")
    scraped = summarize_probe(
        index=1, run=run, spec=plain, geometry=g, accelerator=acc, engine_window=window
    )
    alone = summarize_probe(index=1, run=run, spec=plain, geometry=g, accelerator=acc)
    truth = _http_truth(log, run.window_start_ns, run.window_end_ns, acc.bandwidth_bytes_per_s)
    with_c, without = scraped.mbu_detail, alone.mbu_detail
    assert with_c is not None and without is not None
    assert with_c.mbu is not None and without.mbu is not None
    print(f"3 steps per chunk over HTTP: truth {truth:.4f} | engine counters {with_c.mbu:.4f} "
          f"| client alone {without.mbu:.4f} | notes {with_c.notes[-1]}")  # fmt: skip
    assert with_c.flags.coalesced_chunks and "coalesced_chunks" in scraped.flags
    assert any("engine's spec-decode counters" in n for n in with_c.notes)
    assert with_c.mbu == pytest.approx(truth, abs=0.01)
    assert without.flags.coalesced_chunks
    assert any("MBU would read low" in n and "smallest chunk" in n for n in without.notes)
    assert without.mbu == pytest.approx(truth, abs=0.01)


def _http_truth(path: Path, w0: int, w1: int, node_bw: float) -> float:
    """Every byte the steps read inside [w0, w1) over the window × the node's bandwidth."""
    read = 0.0
    with path.open("rb") as fh:
        for line in fh:
            s = orjson.loads(line)
            a, b = s["sched_start_ns"], s["deadline_ns"]
            lo, hi = max(a, w0), min(b, w1)
            if hi > lo and b > a and s["batch"] > 0:
                read += (hi - lo) / (b - a) * (s["weight_bytes"] + s["kv_bytes"] + s["draft_bytes"])
    return read / ((w1 - w0) / 1e9 * node_bw)
