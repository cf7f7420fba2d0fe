"""The single stream: one request at a time, checked against the simulator's truth.

At concurrency 1 every prompt runs in a prefill-only step (no decode in flight): its bytes are
not decode bytes and its time is not decode time. The client sees it as the interval from
send to first token (``metrics.mbu.prompt_phase``); the decode-busy share is what remains. Truth:
bytes of the steps that decode over the window ÷ (window × node bandwidth) (``figure_truth``,
elapsed-time denominator, as every MBU validation here).

Virtual time (exact, no HTTP) on a dense and an MoE model with prefill costed, and end to end
over HTTP against the simulator in its own process, as ``tokenwatt bench`` measures its
single-stream point (``run_probe(concurrency=1, max_requests=N)``, ``probe_mbu``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from test_validation_moe import Case
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.derive import probe_mbu
from tokenwatt.load.probe import run_probe
from tokenwatt.load.target import open_target, resolve_accelerator
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.mixed_steps import (
    StepRegime,
    decode_batch_from_intervals,
    idle_fraction_from_intervals,
)
from tokenwatt.metrics.mbu.prompt_phase import prompt_phase
from tokenwatt.result import Mbu
from tokenwatt.sim import SimConfig, VirtualSim
from tokenwatt.sim.truth import FigureTruth, figure_truth
from tokenwatt.spec import parse_spec

NETWORK_S = 0.0005  # client turnaround between one stream's end and the next send


def single_stream(
    case: Case, *, efficiency: float, requests: int = 60, n_in: int = 2048, n_out: int = 128,
    routing: str = "uniform",
) -> tuple[Mbu, FigureTruth]:  # fmt: skip
    """A closed loop of one in virtual time; the client's figures from its four stamps."""
    g = case.geometry()
    acc = get_accelerator(case.accelerator)
    cfg = SimConfig(
        geometry=g, accelerator=acc, gpus_per_replica=case.gpus, efficiency=efficiency,
        prefill_cost=True, routing=routing, seed=3,
    )  # fmt: skip
    sim = VirtualSim(cfg)
    t, reqs = 0.0, []
    for _ in range(requests):
        r = sim.submit(t, n_in, n_out)
        sim.run()
        reqs.append(r)
        t = r.last_token_ns / 1e9 + NETWORK_S
    w0, w1 = reqs[2].arrival_ns, reqs[-1].last_token_ns
    counted = reqs[2:]
    window_s = (w1 - w0) / 1e9
    out = sum(r.generated for r in counted)
    tau = sum(r.last_token_ns - r.first_token_ns for r in counted) / 1e9 / (out - len(counted))
    ctx, kv_tok = kv_read_per_output_token(g, [(n_in, r.generated) for r in counted])
    spans = [(r.arrival_ns, r.first_token_ns, r.last_token_ns, r.last_token_ns) for r in reqs]
    phase = prompt_phase(spans, w0, w1, 1)
    assert phase is not None
    regime = StepRegime(
        request_rate_rps=len(counted) / window_s,
        mean_prompt_tokens=float(n_in),
        mean_output_tokens=out / len(counted),
        idle_fraction=idle_fraction_from_intervals(
            ((r.arrival_ns, r.last_token_ns) for r in reqs), w0, w1, 1
        ),
        chunk_budget_tokens=cfg.settings.max_batched_tokens,
        decode_batch=decode_batch_from_intervals(
            [(r.first_token_ns, r.last_token_ns) for r in reqs], w0, w1, 1
        ),
        prefill_only_fraction=phase.prefill_only_fraction,
        prompt_mixing_share=phase.prompt_mixing_share,
    )
    mbu = compute_mbu(
        g, output_tokens_per_s=out / window_s, itl_token_weighted_s=tau, replicas=1,
        gpus=case.gpus, bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s,
        mean_context_per_token=ctx, kv_bytes_per_output_token=kv_tok, regime=regime,
    )  # fmt: skip
    rep = sim.node.replicas[0]
    records = step_records(sim)

    def w_of_batch(b: int) -> float:
        return (
            g.dense_weight_bytes + g.moe_layers * rep.routing.expected_per_layer(b) * g.expert_bytes
        )

    truth = figure_truth(records, w0, w1, acc.bandwidth_bytes_per_s * case.gpus, w_of_batch)
    return mbu, truth


def step_records(sim: VirtualSim) -> Iterator[dict[str, Any]]:
    """The simulator's steps in the truth log's keys, for ``figure_truth``."""
    for s in sim.steps:
        yield {
            "sched_start_ns": s.t_start_ns, "deadline_ns": s.t_end_ns, "batch": s.batch,
            "prefill_tokens": s.prefill_tokens, "weight_bytes": s.weight_bytes,
            "kv_bytes": s.kv_bytes, "memory_s": s.memory_s,
        }  # fmt: skip


QWEN_MOE = Case("Qwen3-30B-A3B 1×H100", "qwen3-30b-a3b", "h100-sxm", 1)
LLAMA_DENSE = Case("Llama-3.1-8B 1×H100", "llama-3.1-8b", "h100-sxm", 1)


@pytest.mark.parametrize(
    ("case", "efficiency"), [(LLAMA_DENSE, 0.6), (QWEN_MOE, 0.3)], ids=["dense", "moe"]
)
def test_single_stream_within_a_point_virtual(case: Case, efficiency: float) -> None:
    mbu, truth = single_stream(case, efficiency=efficiency)
    assert mbu.mbu is not None and mbu.inputs.mixed_steps is not None
    print(
        f"{case.label}: MBU {mbu.mbu:.4f} truth {truth.all_bytes:.4f} "
        f"({100 * (mbu.mbu - truth.all_bytes):+.2f} pt); prefill-only "
        f"{1 - truth.idle_fraction - mbu.inputs.mixed_steps.busy_fraction:.3f}"
    )
    assert mbu.mbu == pytest.approx(truth.all_bytes, abs=0.01)
    assert mbu.mbu <= efficiency  # never above what the engine was told to draw
    assert mbu.flags.prefill_only
    assert mbu.inputs.mixed_steps.mixed_step_fraction == 0.0  # no prompt rode a decode step


def _http_truth(path: Path, w0: int, w1: int, node_bw: float) -> float:
    decode_bytes = 0.0
    with path.open("rb") as fh:
        for line in fh:
            s = orjson.loads(line)
            a, b = s["sched_start_ns"], s["deadline_ns"]
            lo, hi = max(a, w0), min(b, w1)
            if hi > lo and b > a and s["batch"] > 0:
                decode_bytes += (hi - lo) / (b - a) * (s["weight_bytes"] + s["kv_bytes"])
    return decode_bytes / ((w1 - w0) / 1e9 * node_bw)


@pytest.mark.exclusive
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("model", "requests"),
    [("qwen3-30b-a3b", 10), pytest.param("llama-3.1-8b", 10, marks=pytest.mark.slow)],
)
def test_single_stream_over_http(model: str, requests: int, tmp_path: Path) -> None:
    """The demo's MoE model at efficiency 0.30 (the issue's 33.6 % against 20.9 %) and a dense
    model, measured as bench's single-stream point measures it. The dense model sends the
    bench's default 10 single-stream requests, as does the MoE model: each model's derived
    MBU and the truth log agree within 0.0002 over 10, 20 or 40 requests (docs/validation.md),
    well inside the 0.01 asserted."""
    spec = parse_spec(
        {
            "model": {"source": model},
            "hardware": {"accelerator": "h100-sxm", "gpus": 1},
            "endpoint": {"url": "sim"},
            "sim": {"efficiency": 0.3, "prefill_cost": True, "step_overhead_ms": 0.5},
            "workload": {"input_tokens": 2048, "output_tokens": 64, "seed": 2},
            "search": {"probe": {"warmup_s": 0.5, "max_duration_s": 60}},
        }
    )
    log = tmp_path / "truth.jsonl"

    async def go():  # type: ignore[no-untyped-def]
        async with open_target(spec, sim_mode="subprocess", truth_log=log) as target:
            return await run_probe(
                spec, target.client, rate_rps=None, seed=2, concurrency=1, max_requests=requests
            )

    run = asyncio.run(go())
    assert run.metrics.requests_failed == 0
    acc = resolve_accelerator(spec.hardware)
    mbu = probe_mbu(run, load_geometry(model), spec.hardware, acc)
    assert mbu is not None and mbu.mbu is not None
    truth = _http_truth(log, run.window_start_ns, run.window_end_ns, acc.bandwidth_bytes_per_s)
    print(f"{model} single stream over HTTP: MBU {mbu.mbu:.4f} truth {truth:.4f}")
    assert mbu.flags.prefill_only
    assert mbu.mbu == pytest.approx(truth, abs=0.01)
    assert mbu.mbu < 0.3
