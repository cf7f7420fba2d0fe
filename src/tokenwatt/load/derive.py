"""Figures derived from one probe beyond its latency metrics: MBU and the SLO verdict.

Both ``tokenwatt probe`` and the benchmark call these, so a probe's MBU is computed one way:
T, τ and the KV reads of the same counted requests (``ProbeRun.counted``), the spec's node.
"""

from __future__ import annotations

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.load.probe import ProbeRun
from tokenwatt.metrics.latency import e2e_s, tpot_s, ttft_s
from tokenwatt.metrics.mbu import MBUResult, compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.slo import Limits, RequestLatency, SLOVerdict, evaluate_slo
from tokenwatt.spec import SLO
from tokenwatt.spec.hardware import HardwareSection

__all__ = ["probe_latencies", "probe_mbu", "probe_slo_verdict"]


def probe_mbu(
    run: ProbeRun, geometry: ModelGeometry, hardware: HardwareSection, accelerator: Accelerator
) -> MBUResult | None:
    """MBU of the probe's window; None when nothing was decoded (no T or no τ)."""
    m = run.metrics
    if m.output_tokens_per_s is None or m.itl_token_weighted_s is None:
        return None
    pairs = [(r.prompt_tokens, r.output_tokens) for r in run.counted if r.prompt_tokens is not None]
    context, kv_per_token = kv_read_per_output_token(geometry, pairs)
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
