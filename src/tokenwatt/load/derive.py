"""A probe's result: figures, MBU and the SLO verdict of one ``ProbeRun``, in the result type.

``tokenwatt probe`` and ``tokenwatt bench`` both call ``summarize_probe``, so the two commands
judge and report a probe one way by construction: T, τ and the KV reads of the same counted
requests, the one SLO judge (``metrics.slo.judge_probe``), the spec's node.
"""

from __future__ import annotations

import math
from typing import Any

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.hardware import Accelerator
from tokenwatt.load.engine_probe import ProbeEngine, engine_figures
from tokenwatt.load.intervals import probe_intervals
from tokenwatt.load.keepup import generator_failure, load_generator_summary
from tokenwatt.load.probe import ProbeRun
from tokenwatt.load.speculation import declared_drafter, probe_steps, step_basis
from tokenwatt.metrics.accuracy import probe_accuracy
from tokenwatt.metrics.agent import agent_figures
from tokenwatt.metrics.cost import cost_figures
from tokenwatt.metrics.latency import ProbeMetrics
from tokenwatt.metrics.mbu import MbuNode, MbuWindow, RequestSweep, window_mbu
from tokenwatt.metrics.mbu.kv_pressure import mark_kv_pressure
from tokenwatt.metrics.sessions import (
    cached_prompt_fraction,
    ideal_prefix_fraction,
    session_stats,
)
from tokenwatt.metrics.slo import EarlyStop, Limits, SLOVerdict, judge_probe
from tokenwatt.metrics.spec_chunks import (
    ChunkedSteps,
    coalesced_verify_steps,
    recounted,
)
from tokenwatt.result import (
    CostFigures,
    EnergySummary,
    EngineFigures,
    FigureIntervals,
    Mbu,
    ProbeDetail,
    ProbeSummary,
    SloDetail,
    StepSummary,
)
from tokenwatt.spec import BenchSpec, EngineSection, ProbeSettings
from tokenwatt.spec.engine import DrafterSection
from tokenwatt.spec.hardware import HardwareSection

__all__ = [
    "early_stop_for",
    "probe_detail",
    "probe_flags",
    "probe_mbu",
    "probe_verdict",
    "summarize_probe",
]


def early_stop_for(
    spec: BenchSpec, rate_rps: float | None, settings: ProbeSettings
) -> EarlyStop | None:
    """The early-stop rule of an open-loop probe at ``rate_rps`` (None: closed loop, or the
    settings turn it off). It expects the requests the window will count at that rate."""
    if rate_rps is None or not settings.early_stop:
        return None
    expected = max(settings.min_requests, math.ceil(rate_rps * settings.min_duration_s))
    return EarlyStop(Limits.from_spec(spec.slo), expected)


def probe_mbu(
    run: ProbeRun,
    geometry: ModelGeometry,
    hardware: HardwareSection,
    accelerator: Accelerator,
    engine: EngineSection | None = None,
    *,
    speculative: DrafterSection | None = None,
    kv_stalls: bool = True,
    block: bool = False,
    expert_load: ExpertLoad | None = None,
    engine_acceptance_length: float | None = None,
    sweep: RequestSweep | None = None,
) -> Mbu | None:
    """MBU of the probe's window; None when nothing was decoded (no T or no τ), or when the
    window was cut short (early stop, Ctrl-C): its counted requests were cancelled mid-stream,
    so T and the context sum no longer describe one steady state. The measured regime
    (request rate, prompt lengths, idle share) and the spec's ``engine`` limits feed the
    mixed-step term (``metrics.mbu.mixed_steps``); a measured expert load comes from the spec's
    engine section (read once per run: ``EngineSection.expert_load``). Speculative decoding
    (``speculative``: the declared drafter, or detected from the chunks) counts s and B from
    steps (``load.speculation``).
    ``expert_load``: the routing the engine counted over the probe (its /metrics scrapes,
    ``ProbeEngine.expert_load``), used before the spec's file.
    ``engine_acceptance_length``: the engine's own (spec-decode counters), which tells
    verify steps coalesced into one chunk and counts them (``metrics.spec_chunks``).
    ``kv_stalls=False`` does not look for preempted streams (a block of a window without any);
    ``block=True`` computes the figures only (no routing band or skew comparison: an interval
    block shows MBU and decode-only MBU, its routing is the window's). ``sweep``: the probe's
    records swept once (``metrics.mbu.spans``), which the window and its blocks all read."""
    m = run.metrics
    if run.stopped_early or run.interrupted or run.saturated:
        return None
    if m.output_tokens_per_s is None or m.itl_token_weighted_s is None:
        return None
    figures, chunked, counted_steps = _steps(run, speculative, engine_acceptance_length)
    window = MbuWindow(
        run.records, run.counted, run.window_start_ns, run.window_end_ns,
        m.output_tokens_per_s, m.itl_token_weighted_s, m.multi_token_chunks,
        sweep if sweep is not None else RequestSweep(run.records, hardware.replicas),
        figures, expert_load=expert_load, chunked=chunked,
    )  # fmt: skip
    node = MbuNode(
        geometry, hardware.replicas, hardware.gpus, accelerator.bandwidth_bytes_per_s,
        engine if engine is not None else EngineSection(),
    )  # fmt: skip
    basis = step_basis(counted_steps, speculative, window.pairs, None)
    return window_mbu(window, node, basis=basis, kv_stalls=kv_stalls, block=block)


def _steps(
    run: ProbeRun, speculative: DrafterSection | None, engine_acceptance_length: float | None
) -> tuple[StepSummary, ChunkedSteps | None, StepSummary]:
    """The probe's steps as its chunks show them, verify steps coalesced into chunks (if any,
    ``metrics.spec_chunks``), and the steps MBU counts (those counted again)."""
    figures = probe_steps(run.counted, speculative)
    chunked = coalesced_verify_steps(
        run.counted,
        figures,
        declared_k=None if speculative is None else speculative.num_tokens,
        engine_acceptance_length=engine_acceptance_length,
    )
    return figures, chunked, figures if chunked is None else recounted(figures, chunked)


UNRESPONSIVE = "endpoint unresponsive"
STALLS = "endpoint stalls every stream"


def halt_reason(run: ProbeRun) -> str | None:
    """Why the probe measured nothing an SLO can judge, or None.

    The sender failed (``run.sender_error``); or the endpoint never answered: every request
    the probe sent, warm-up included, timed out before its first token; or every stream
    stopped: each request went silent mid-stream (``stall``) or never began. Under load some
    requests still get answers (the first ones, before a queue builds), so first-token
    timeouts there stay SLO misses; a probe in which none ever did is an error probe."""
    if run.sender_error is not None:
        return f"load generator failed: the sender stopped on {run.sender_error}"
    judged = [r for r in run.records if not r.cancelled]
    if judged and all(r.error_kind == "timeout_first_token" for r in judged):
        first = judged[0].error_message or "no first token"
        return (
            f"{UNRESPONSIVE}: all {len(judged)} requests timed out before a first token ({first})"
        )
    stalled = [r for r in judged if r.error_kind == "stall"]
    if stalled and all(r.error_kind in ("stall", "timeout_first_token") for r in judged):
        # every stream went silent: not a rate the SLO can judge, whatever the rate
        why = stalled[0].error_message or "no bytes mid-stream"
        return (
            f"{STALLS}: all {len(judged)} requests stopped before their end, {len(stalled)} "
            f"of them silent after their first token ({why})"
        )
    return None


def probe_verdict(run: ProbeRun, spec: BenchSpec, early_stop_reason: str | None) -> SLOVerdict:
    """The one SLO verdict of a probe (send times counted from its first arrival slot). A
    sending worker that died makes it "load generator failed" instead (``load.keepup``)."""
    verdict = judge_probe(
        Limits.from_spec(spec.slo),
        run.counted,
        origin_ns=run.started_ns,
        early_stop_reason=(
            "stopped early: endpoint errors clearly over slo.max_error_rate"
            if run.error_stopped
            else early_stop_reason
        ),
        stopped_early=run.stopped_early,
        interrupted=run.interrupted,
        max_error_rate=spec.slo.max_error_rate,
        saturated=run.saturated,
        halted=halt_reason(run),
    )
    failure = generator_failure(run.keep_up)
    if failure is not None:  # the client broke: no SLO verdict may stand
        verdict.passed = False
        verdict.failed.insert(0, "load_generator_failed")
        verdict.reason = "; ".join(x for x in (failure, verdict.reason) if x)
    return verdict


def probe_flags(run: ProbeRun, mbu: Mbu | None, engine: EngineFigures | None = None) -> list[str]:
    """Conditions a reader of the figures must know, as short flags."""
    m = run.metrics
    flags = [] if mbu is None else [k for k, v in mbu.flags.model_dump().items() if v]
    if engine is not None and any(a.ok is False for a in engine.agreements):
        flags.append("engine_disagrees")
    if run.stopped_early or run.interrupted or run.saturated or run.sender_error:
        flags.append("window_cut")
    if run.saturated:
        flags.append("load_generator_saturated")
    if m.timestamp_source not in ("kernel", "none"):
        flags.append(f"timestamps_{m.timestamp_source}")
    if run.drain_timeouts:
        flags.append("drain_timeouts")
    if run.stray_answers:
        flags.append("stray_answers")
    if run.stopped_early:
        flags.append("early_stopped")
    if m.usage_fallback_requests:
        flags.append("usage_fallback")
    return flags


def _or0(x: float | None) -> float:
    return 0.0 if x is None or not math.isfinite(x) else float(x)


def _slo_detail(verdict: SLOVerdict) -> SloDetail:
    trend = verdict.trend
    return SloDetail(
        kind=verdict.kind,
        failed=verdict.failed,
        trend_rising=trend is not None and trend.rising,
        early_stopped=verdict.early_stopped,
        reason=verdict.reason,
        quantiles_s=verdict.quantiles_s,
        medians_s=verdict.medians_s,
        trend_first_third_ttft_s=None if trend is None else trend.first_third_ttft_s,
        trend_last_third_ttft_s=None if trend is None else trend.last_third_ttft_s,
        trend_rise_s=None if trend is None else trend.rise_s,
        trend_rank_correlation=None if trend is None else trend.rank_correlation,
        error_probe=verdict.error_probe,
        error_rate=verdict.error_rate,
        load_generator_saturated=verdict.saturated,
        load_generator_failed="load_generator_failed" in verdict.failed,
    )


def _workload_figures(
    run: ProbeRun, spec: BenchSpec, energy: EnergySummary | None
) -> dict[str, Any]:
    """What the workload kind adds to a probe: the rate's unit, conversation figures, the
    share of prompt tokens the server's prefix cache served and the share a trace's block
    hashes allow; an agent trace's sessions held and TTFT by context length."""
    w0, w1 = run.window_start_ns, run.window_end_ns
    return {
        "rate_unit": run.rate_unit,
        "sessions": session_stats(
            run.records, window_start_ns=w0, window_end_ns=w1, completed_ids=run.sessions_completed
        ),
        "cached_prompt_fraction": cached_prompt_fraction(
            run.records, window_start_ns=w0, window_end_ns=w1
        ),
        "ideal_prefix_fraction": ideal_prefix_fraction(
            run.records, run.shared_prefix_tokens, window_start_ns=w0, window_end_ns=w1
        ),
        "agent": agent_figures(
            run.records,
            run.conversations,
            window_start_ns=w0,
            window_end_ns=w1,
            gpus=spec.hardware.gpus,
            mean_power_w=None if energy is None else energy.mean_power_w,
            price_per_gpu_hour=spec.hardware.price_per_gpu_hour,
        ),
    }


def _mbu_and_engine(
    run: ProbeRun,
    spec: BenchSpec,
    geometry: ModelGeometry | None,
    accelerator: Accelerator | None,
    engine_window: ProbeEngine | None,
    *,
    declared: DrafterSection | None,
    sweep: RequestSweep | None = None,
) -> tuple[Mbu | None, EngineFigures | None]:
    """The probe's MBU (no geometry or accelerator: none) and the engine's own figures; an
    engine that counted preemptions raises ``kv_pressure`` where the client saw none."""
    engine = None
    if engine_window is not None:
        engine = engine_figures(engine_window, run, spec, geometry, accelerator, sweep=sweep)
    mbu = None
    if geometry is not None and accelerator is not None:
        mbu = probe_mbu(
            run, geometry, spec.hardware, accelerator, spec.engine, speculative=declared,
            expert_load=_scraped_load(engine_window, geometry),
            engine_acceptance_length=None if engine is None else engine.acceptance_length,
            sweep=sweep,
        )  # fmt: skip
    if engine is not None and mbu is not None and not mbu.flags.kv_pressure:
        # the engine counted preemptions
        mbu = mark_kv_pressure(mbu, pressure=None, engine_preemptions=engine.preemptions)
    return mbu, engine


def _scraped_load(
    engine_window: ProbeEngine | None, geometry: ModelGeometry | None
) -> ExpertLoad | None:
    """The expert load the engine's per-expert counters gave over the probe, if any."""
    if engine_window is None or geometry is None:
        return None
    return engine_window.expert_load(geometry)


def _run_figures(run: ProbeRun) -> dict[str, Any]:
    """What the run itself records: its seed, loop, window and the sender's own counts."""
    return {
        "seed": run.seed,
        "concurrency": run.concurrency,
        "warmup_s": (run.window_start_ns - run.started_ns) / 1e9,
        "window_start_ns": run.window_start_ns,
        "window_end_ns": run.window_end_ns,
        "interrupted": run.interrupted,
        "stray_answers": run.stray_answers,
        "late_sends": run.late_sends,
        "max_send_lag_s": run.max_send_lag_s,
    }


# the run record's figures that ``metrics.latency`` computes (one list: the record's fields)
_DETAIL_METRICS = tuple(k for k in ProbeDetail.model_fields if k in ProbeMetrics.model_fields)


def probe_detail(run: ProbeRun, *, max_requests: int | None = None) -> ProbeDetail:
    """The run's own record: how it was sent, how the window ended, the counts behind the
    figures and the client's clock (what ``probe.json`` held before schema version 3)."""
    m = run.metrics
    return ProbeDetail(
        arrival=run.arrival,
        prompt_format=str(run.prompt_format),
        max_requests=max_requests,
        started_ns=run.started_ns,
        ended_ns=run.ended_ns,
        drain_s=max(0, run.ended_ns - run.window_end_ns) / 1e9,
        stopped_early=run.stopped_early,
        drain_timeouts=run.drain_timeouts,
        error_stopped=run.error_stopped,
        clock=run.clock,
        connections={k: int(v) for k, v in run.client_stats.items()},
        **{k: getattr(m, k) for k in _DETAIL_METRICS},
    )


def _intervals(
    run: ProbeRun,
    spec: BenchSpec,
    mbu: Mbu | None,
    energy: EnergySummary | None,
    power_series: list[tuple[float, float]] | None,
    *,
    model: tuple[
        ModelGeometry | None,
        Accelerator | None,
        DrafterSection | None,
        tuple[ExpertLoad | None, EngineFigures | None],
    ],
    sweep: RequestSweep | None = None,
) -> FigureIntervals | None:
    """The probe's figures as intervals (``load.intervals``): MBU per block by ``probe_mbu``
    with the probe's geometry, accelerator, declared drafter and what the engine counted
    (``model``); each block reads the window's ``sweep`` of the records instead of sweeping
    its own."""
    geometry, accelerator, declared, witness = model
    # blocks take the window's corrections: stalls are looked for only where the window saw them
    stalled = mbu is not None and mbu.flags.kv_pressure

    def mbu_of(sub: ProbeRun) -> Mbu | None:
        if geometry is None or accelerator is None:
            return None
        return probe_mbu(
            sub,
            geometry,
            spec.hardware,
            accelerator,
            spec.engine,
            speculative=declared,
            kv_stalls=stalled,
            block=True,
            expert_load=witness[0],
            engine_acceptance_length=None if witness[1] is None else witness[1].acceptance_length,
            sweep=sweep,
        )

    return probe_intervals(
        run,
        spec.slo,
        mbu=mbu,
        mbu_of=mbu_of,
        tokens_per_joule=None if energy is None else energy.tokens_per_joule,
        power_series=power_series,
    )


def _cost(spec: BenchSpec, goodput: float, energy: EnergySummary | None) -> CostFigures | None:
    """$/Mtok at the probe's goodput, from the spec's prices (``metrics.cost``); an energy the
    audit found invalid adds no cost (its part is None, the rental alone is the figure)."""
    joules = energy.joules_per_output_token if energy is not None and energy.valid else None
    return cost_figures(
        price_per_gpu_hour=spec.hardware.price_per_gpu_hour,
        gpus=spec.hardware.gpus,
        goodput_output_tokens_per_s=goodput,
        joules_per_output_token=joules,
        price_per_kwh=spec.hardware.price_per_kwh,
    )


def _latency_figures(m: ProbeMetrics) -> dict[str, Any]:
    """The probe's latency distributions and attainment, as the result names them."""
    return {
        "attainment": m.slo_attainment,
        "ttft_s": m.ttft_s,
        "tpot_s": m.tpot_s,
        "itl_s": m.itl_chunk_s,
        "e2e_s": m.e2e_s,
        "reasoning_output_tokens": m.reasoning_output_tokens if m.ttft_reasoning_s else None,
        "ttft_reasoning_s": m.ttft_reasoning_s,
        "ttft_answer_s": m.ttft_answer_s,
    }


def _request_counts(m: ProbeMetrics) -> dict[str, Any]:
    """How the probe's requests ended, its send lateness and its window."""
    return {
        "send_lateness_s": m.send_lateness_s,
        "requests_ok": m.requests_ok,
        "requests_failed": m.requests_failed,
        "requests_cancelled": m.requests_cancelled,
        "errors_by_kind": m.errors_by_kind,
        "window_s": m.window_s,
    }


def summarize_probe(
    *,
    index: int,
    run: ProbeRun,
    spec: BenchSpec,
    geometry: ModelGeometry | None,
    accelerator: Accelerator | None,
    energy: EnergySummary | None = None,
    power_series: list[tuple[float, float]] | None = None,
    early_stop_reason: str | None = None,
    requests_file: str | None = None,
    phase: str | None = None,
    engine_window: ProbeEngine | None = None,
    engine_series_file: str | None = None,
    max_requests: int | None = None,
) -> ProbeSummary:
    """One probe's figures and verdict, in the result's shape (no geometry: no MBU); with
    ``engine_window`` the engine's own figures beside the client's (``load.engine_probe``)."""
    m = run.metrics
    verdict = probe_verdict(run, spec, early_stop_reason)
    declared = declared_drafter(spec)
    # the records swept once: the MBU of the window and of every block, and the witness
    swept = geometry is not None or engine_window is not None
    sweep = RequestSweep(run.records, spec.hardware.replicas) if swept else None
    mbu, engine = _mbu_and_engine(
        run, spec, geometry, accelerator, engine_window, declared=declared, sweep=sweep
    )
    witness = (_scraped_load(engine_window, geometry), engine)  # MBU's blocks use it too
    goodput = _or0(m.goodput_output_tokens_per_s)
    return ProbeSummary(
        index=index,
        rate_rps=run.rate_rps,
        counted_rate_rps=_or0(m.counted_requests_per_s),
        achieved_rate_rps=_or0(m.achieved_requests_per_s),
        output_tokens_per_s=_or0(m.output_tokens_per_s),
        itl_token_weighted_s=m.itl_token_weighted_s,
        batch_per_replica=None if mbu is None else mbu.inputs.batch_per_replica,
        mean_context_per_token=m.mean_context_per_token,
        mbu=None if mbu is None else mbu.mbu,
        mbu_detail=mbu,
        goodput_output_tokens_per_s=goodput,
        goodput_output_tokens_per_s_per_gpu=goodput / spec.hardware.gpus,
        tokens_per_joule=energy.tokens_per_joule if energy is not None else None,
        energy=energy,
        power_series=power_series,
        slo_passed=verdict.passed,
        slo_detail=_slo_detail(verdict),
        **_latency_figures(m),
        accuracy=probe_accuracy(run.counted),
        steps=probe_steps(run.counted, declared).model_copy(
            update={
                "engine_acceptance_length": None if engine is None else engine.acceptance_length
            }
        ),
        **_request_counts(m),
        requests_file=requests_file,
        flags=probe_flags(run, mbu, engine),
        phase=phase,
        mean_concurrency=m.mean_concurrency,
        requests_counted=m.requests_counted,
        **_run_figures(run),
        **_workload_figures(run, spec, energy),
        engine=engine,
        engine_series_file=engine_series_file,
        cost=_cost(spec, goodput, energy),
        load_generator=load_generator_summary(run.workers, run.keep_up, saturated=run.saturated),
        run=probe_detail(run, max_requests=max_requests),
        intervals=_intervals(
            run,
            spec,
            mbu,
            energy,
            power_series,
            model=(geometry, accelerator, declared, witness),
            sweep=sweep,
        ),
    )
