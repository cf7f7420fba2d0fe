"""Figures derived from one probe beyond its latency metrics: MBU and the SLO verdict.

Both ``tokenwatt probe`` and the benchmark call these, so a probe's MBU is computed one way:
T, τ and the KV reads of the same counted requests (``ProbeRun.counted``), the spec's node.
"""

from __future__ import annotations

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import load_expert_load
from tokenwatt.hardware import Accelerator
from tokenwatt.load.probe import ProbeRun
from tokenwatt.metrics.latency import e2e_s, tpot_s, ttft_s
from tokenwatt.metrics.mbu import MBUResult, compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mixed_steps import regime_from_records
from tokenwatt.metrics.slo import Limits, RequestLatency, SLOVerdict, evaluate_slo
from tokenwatt.spec import SLO, EngineSection
from tokenwatt.spec.hardware import HardwareSection

__all__ = ["probe_latencies", "probe_mbu", "probe_slo_verdict"]


def probe_mbu(
    run: ProbeRun,
    geometry: ModelGeometry,
    hardware: HardwareSection,
    accelerator: Accelerator,
    engine: EngineSection | None = None,
) -> MBUResult | None:
    """MBU of the probe's window; None when nothing was decoded (no T or no τ). The measured
    regime (request rate, prompt lengths, idle share) and the spec's ``engine`` limits feed
    the mixed-step term (``metrics.mixed_steps``)."""
    m = run.metrics
    if m.output_tokens_per_s is None or m.itl_token_weighted_s is None:
        return None
    pairs = [(r.prompt_tokens, r.output_tokens) for r in run.counted if r.prompt_tokens is not None]
    context, kv_per_token = kv_read_per_output_token(geometry, pairs)
    eng = engine if engine is not None else EngineSection()
    load = None
    if eng.expert_load_file is not None and geometry.is_moe:
        load = load_expert_load(
            eng.expert_load_file,
            experts=geometry.experts,
            k=geometry.experts_per_token,
            layers=geometry.moe_layers,
        )
    regime = regime_from_records(
        run.records,
        run.counted,
        run.window_start_ns,
        run.window_end_ns,
        replicas=hardware.replicas,
        chunk_budget_tokens=eng.max_num_batched_tokens,
        slot_limit=eng.max_num_seqs,
        expert_load=load,
    )
    return compute_mbu(
        geometry,
        output_tokens_per_s=m.output_tokens_per_s,
        itl_token_weighted_s=m.itl_token_weighted_s,
        replicas=hardware.replicas,
        gpus=hardware.gpus,
        bandwidth_bytes_per_s=accelerator.bandwidth_bytes_per_s,
        mean_context_per_token=context,
        kv_bytes_per_output_token=kv_per_token,
        multi_token_chunks=m.multi_token_chunks,
        regime=regime,
    )


def probe_latencies(run: ProbeRun) -> list[RequestLatency]:
    """The counted requests as the SLO verdict sees them (send time in seconds from t0)."""
    return [
        RequestLatency(
            ok=r.ok,
            sent_s=((r.sent_ns if r.sent_ns is not None else r.scheduled_ns) - run.started_ns)
            / 1e9,
            ttft_s=ttft_s(r),
            tpot_s=tpot_s(r),
            e2e_s=e2e_s(r),
        )
        for r in run.counted
    ]


def probe_slo_verdict(run: ProbeRun, slo: SLO) -> SLOVerdict:
    return evaluate_slo(Limits.from_spec(slo), probe_latencies(run))
