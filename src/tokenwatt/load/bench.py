"""A whole benchmark run: single-stream point, SLO-boundary search, MBU and energy per probe.

``run_bench(spec, out_dir)`` opens the target (starting the embedded simulator for
``endpoint: sim``), the geometry, the accelerator and the power monitor, then

1. measures the single-stream point (one request at a time: the latency floor),
2. searches for the highest Poisson rate at which the SLO holds (``load.search``), each probe
   a ``load.probe.run_probe`` judged by ``metrics.slo`` (verdict, binomial early stop, trend),
3. derives at every probe T, τ, B, MBU (``metrics.mbu``) and tokens per joule
   (``metrics.energy`` over the probe's exact window),

and writes ``DIR/requests-NN.jsonl`` per probe and ``DIR/result.json`` (``report.schema``)
after every probe, atomically, so an interrupted or crashed run keeps what it measured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from tokenwatt import __version__
from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.config import preset_stand_in
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.load.capacity import Stage, lifetime_at, next_concurrency, start_rate
from tokenwatt.load.derive import early_stop_for, summarize_probe
from tokenwatt.load.energy_window import open_probe_power, power_warnings
from tokenwatt.load.engine_probe import EngineWitness
from tokenwatt.load.fit import check_fits
from tokenwatt.load.measure import ProbeFiles, ProbeLoad, ProbeSetup, measure_probe
from tokenwatt.load.probe import LateFirstTokens, ProbeProgress, ProbeRun, run_probe
from tokenwatt.load.safe_rate import checked_safe_rate
from tokenwatt.load.search import (
    CHECK_ROLE,
    RESOLUTION,
    SINGLE_STREAM_ROLE,
    BoundarySearch,
    ProbeOutcome,
    SearchOutcome,
    drift_check_plan,
    probe_seed,
    step_role,
)
from tokenwatt.load.search import SearchStep as SearchStepT
from tokenwatt.load.target import SimMode, Target, open_target, resolve_accelerator
from tokenwatt.metrics.boundary import (
    FITTED_POINT_LEANS,
    LOW_END_MIN_BELOW,
    BoundaryFit,
    Evidence,
    low_end_min_below,
    reported_boundary,
)
from tokenwatt.metrics.drift import Level, level_rate, slower_than_search
from tokenwatt.metrics.sequential import SequentialStop, Sprt, decide_probe, miss_counts
from tokenwatt.metrics.slo import EarlyStop, Limits, latencies
from tokenwatt.power import PowerMonitor
from tokenwatt.records import RequestRecord
from tokenwatt.result import (
    BenchResult,
    Latency,
    ProbeSummary,
    SearchStep,
    SearchSummary,
    write_result,
)
from tokenwatt.spec import BenchSpec, ProbeSettings, redact_text

__all__ = [
    "WARMUP_LIFETIMES",
    "BenchEvent",
    "run_bench",
    "summarize_probe",
]

EventKind = Literal[
    "started",
    "probe_start",
    "probe_progress",
    "probe_done",
    "search_step",
    "search_done",
    "written",
]


@dataclass(frozen=True, slots=True)
class BenchEvent:
    """What a progress display needs; ``index`` 0 is the single-stream point."""

    kind: EventKind
    index: int | None = None
    rate_rps: float | None = None
    phase: str | None = None  # search phase (grow, descend, bisect, confirm) or single_stream
    progress: ProbeProgress | None = None
    summary: ProbeSummary | None = None
    lo_rps: float | None = None
    hi_rps: float | None = None
    message: str | None = None
    result: BenchResult | None = None
    warmup_s: float | None = None  # probe_start: this probe's warm-up (``_Run.settings_for``)


OnEvent = Callable[[BenchEvent], None]
# A probe's warm-up lasts at least this many request lifetimes (see _Run.settings_for).
WARMUP_LIFETIMES = 3.0
# A drift check's: it is read by its median TPOT against 2.5 × its neighbours'
# (``metrics.drift``), and an engine not yet full reads faster, never slower: a short warm-up
# can hide a change, never call one (docs/methodology.md, "A server that changed").
CHECK_WARMUP_LIFETIMES = 1.0


def warmup_lifetime_s(
    rate_rps: float,
    measured: Sequence[tuple[float, float]],
    stages: Sequence[Stage],
    single_stream_s: float | None,
) -> float | None:
    """The request lifetime a probe at ``rate_rps`` warms up for: the median E2E of the
    nearest probe at or below its rate (``measured``: rate, median E2E); with none, the
    closed-loop staircase's lifetime at that rate (``load.capacity.lifetime_at``: measured
    at about that load); else the single-stream lifetime. A search started near the
    boundary probes at and below its start with nothing measured below it, and the
    single-stream lifetime (2.4 s against ~8–11 s near the boundary of README's flag form)
    would open that window on an engine about two thirds full."""
    lower = [m for m in measured if m[0] <= rate_rps]
    if lower:
        return max(lower)[1]
    staircase = lifetime_at(stages, rate_rps) if stages else None
    return staircase if staircase is not None else single_stream_s


class _InterruptedError(Exception):
    """A probe came back interrupted (Ctrl-C): stop the search, keep what was measured."""


@dataclass(slots=True)
class _Run:
    spec: BenchSpec
    out_dir: Path
    target: Target
    geometry: ModelGeometry
    accelerator: Accelerator
    monitor: PowerMonitor | None
    result: BenchResult
    on_event: OnEvent | None
    summaries: dict[int, ProbeSummary] = field(default_factory=dict)
    witness: EngineWitness | None = None
    sequential: bool = False  # search probes stop at the sequential verdict (metrics.sequential)
    start_note: str | None = None  # how the first rate was found
    # The two-sided low end's distance below the point, from the output tokens measured.
    low_end_min_below: float = LOW_END_MIN_BELOW
    stages: list[Stage] = field(default_factory=list)  # the closed-loop staircase's
    drift: list[str] = field(default_factory=list)

    def settings_for(self, rate_rps: float, phase: str = "") -> ProbeSettings:
        """The spec's probe settings, with the warm-up stretched to at least WARMUP_LIFETIMES
        request lifetimes (``warmup_lifetime_s``), so that the engine's batch has reached its
        steady state when the window opens; a drift check's to CHECK_WARMUP_LIFETIMES."""
        base = self.spec.search.probe
        measured = [
            (s.rate_rps, s.e2e_s.p50)
            for s in self.summaries.values()
            if s.e2e_s.p50 is not None and s.rate_rps is not None
        ]
        single = self.result.single_stream
        lifetime = warmup_lifetime_s(
            rate_rps, measured, self.stages, single.e2e_s.p50 if single is not None else None
        )
        if lifetime is None:
            return base
        n = CHECK_WARMUP_LIFETIMES if phase == "check" else WARMUP_LIFETIMES
        warmup = min(max(base.warmup_s, n * lifetime), base.max_duration_s)
        if warmup <= base.warmup_s:
            return base
        return base.model_copy(update={"warmup_s": warmup})

    def emit(self, ev: BenchEvent) -> None:
        if self.on_event is not None:
            self.on_event(ev)

    def write(self) -> None:
        write_result(self.result, self.out_dir)

    async def measure(
        self,
        index: int,
        *,
        rate_rps: float | None,
        seed: int,
        phase: str,
        settings: ProbeSettings | None = None,
        concurrency: int | None = None,
        max_requests: int | None = None,
        want_judged: int | None = None,
    ) -> ProbeSummary:
        """One probe; ``want_judged``: its pass may not close the window before that many
        judged requests (the two-sided low end's long window, ``load.search``)."""
        spec = self.spec
        if settings is None and rate_rps is not None:
            settings = _long_window(self.settings_for(rate_rps, phase), want_judged)
        seq = self._sequential_stop(rate_rps, phase, settings)
        probe_settings = settings or spec.search.probe
        stopper = None if seq is not None else early_stop_for(spec, rate_rps, probe_settings)

        def progress(p: ProbeProgress) -> None:
            if stopper is not None:
                stopper.on_counted(p.counted)
            self.emit(
                BenchEvent(
                    "probe_progress", index=index, rate_rps=rate_rps, phase=phase, progress=p
                )
            )

        warm = probe_settings.warmup_s
        self.emit(BenchEvent("probe_start", index, rate_rps, phase=phase, warmup_s=warm))
        setup = ProbeSetup(spec, self.target, self.geometry, self.accelerator, self.monitor,
                           self.witness)  # fmt: skip
        load = ProbeLoad(
            rate_rps,
            seed,
            settings=settings,
            concurrency=concurrency,
            max_requests=max_requests,
            on_progress=progress,
            should_stop=seq.should_stop if seq is not None else stopper,
            should_close=_close_after(seq, want_judged) if seq is not None else None,
            late=LateFirstTokens.of(seq),
        )
        names = (f"requests-{index:02d}.jsonl", f"engine-{index:02d}.jsonl")
        files = ProbeFiles(index, self.out_dir, *names, phase=phase, record_max_requests=False)
        run, summary = await measure_probe(
            setup,
            load,
            files,
            lambda r: _stop_reason(seq, stopper) if r.stopped_early else None,
        )
        _add_counts(summary, run, spec)
        _add_in_flight(summary, run, seq)
        self._record(summary, interrupted=run.interrupted)
        self.emit(
            BenchEvent("probe_done", index=index, rate_rps=rate_rps, phase=phase, summary=summary)
        )
        if run.interrupted:
            raise _InterruptedError
        return summary

    def _sequential_stop(
        self, rate_rps: float | None, phase: str, settings: ProbeSettings | None
    ) -> SequentialStop | None:
        """The probe's sequential test (None: the fixed-window early stop decides)."""
        base = settings or self.spec.search.probe
        if not (self.sequential and rate_rps is not None and base.early_stop):
            return None
        seq = SequentialStop(Limits.from_spec(self.spec.slo))
        if phase == "check":  # read by its median TPOT (metrics.drift): a full window
            seq.min_fail_judged = seq.test.clean_pass_n
        return seq

    def _record(self, summary: ProbeSummary, *, interrupted: bool) -> None:
        """Keep the probe in the result and write the file now: a kill after this loses
        nothing measured (index 0 is the single-stream point)."""
        self.summaries[summary.index] = summary
        if summary.index == 0:
            self.result.single_stream = summary
        else:
            self.result.probes.append(summary)
        if interrupted:
            self.result.interrupted = True
        self.write()


def _long_window(settings: ProbeSettings, want_judged: int | None) -> ProbeSettings:
    """The settings with the window's request minimum raised to ``want_judged`` (else the
    window would close at ``min_duration_s`` short of them)."""
    if want_judged is None or want_judged <= settings.min_requests:
        return settings
    return settings.model_copy(update={"min_requests": want_judged})


def _close_after(
    seq: SequentialStop, want_judged: int | None
) -> Callable[[Sequence[RequestRecord]], bool]:
    """The sequential pass's ``should_close``, held until ``want_judged`` requests are judged
    (None: at the verdict). A failure still stops the probe at once (``should_stop``)."""
    if not want_judged:
        return seq.should_close
    need = want_judged

    def should_close(done: Sequence[RequestRecord]) -> bool:
        return seq.should_close(done) and seq.judged >= need

    return should_close


def _stop_reason(seq: SequentialStop | None, stopper: EarlyStop | None) -> str | None:
    if seq is not None:
        return seq.reason
    return stopper.reason if stopper is not None else None


def _add_in_flight(summary: ProbeSummary, run: ProbeRun, seq: SequentialStop | None) -> None:
    """The known misses in flight that decided an early stop (``load.probe.LateFirstTokens``)."""
    if seq is not None and run.stopped_early and seq.in_flight_misses:
        summary.slo_detail.in_flight_misses = dict(seq.in_flight_misses)
        summary.slo_detail.sequential = "fail"  # decided with them (metrics.sequential)


def _add_counts(summary: ProbeSummary, run: ProbeRun, spec: BenchSpec) -> None:
    """The verdict's counts (judged requests, misses per limit) and the sequential test's
    decision over them: the evidence the boundary fit reads."""
    limits = Limits.from_spec(spec.slo)
    lats = latencies(run.counted)
    misses = miss_counts(limits, lats)
    d = summary.slo_detail
    d.judged, d.misses = len(lats), misses
    d.sequential = decide_probe(Sprt(limits.allowed_violation_fraction), misses, len(lats))


def outcome_of(s: ProbeSummary) -> ProbeOutcome[ProbeSummary]:
    """The search's view of a probe: its verdict, whether it halts the search, and the
    rate the window really held (``counted_rate_rps``: arrivals, failures included) with the
    number of arrivals behind it (the search places the verdict by them, see
    ``bracket_rate``)."""
    n = round(s.counted_rate_rps * s.window_s) if s.window_s else None
    d = s.slo_detail
    rate = s.counted_rate_rps if s.counted_rate_rps > 0 else (s.rate_rps or 0.0)
    late = d.in_flight_misses or {}
    evidence = (
        Evidence(rate, d.judged or 0, d.misses, late)
        if (d.judged or late) and not s.interrupted
        else None
    )
    return ProbeOutcome(
        s.slo_passed,
        d.reason,
        s,
        halt=_halt_of(s),
        counted_rps=s.counted_rate_rps,
        requests=n,
        evidence=evidence,
    )


def _halt_of(s: ProbeSummary) -> Literal["error", "saturated"] | None:
    """An error probe or a saturated or failed sender stops the search (``load.search``)."""
    if s.slo_detail.load_generator_saturated or s.slo_detail.load_generator_failed:
        return "saturated"
    return "error" if s.slo_detail.error_probe else None


def _halt_warning(out: SearchOutcome[ProbeSummary], spec: BenchSpec) -> str:
    """The one line that says why the search stopped without a boundary."""
    last = out.steps[-1] if out.steps else None
    why = last.outcome.reason if last is not None else None
    rate = f"{last.rate_rps:.3g} rps" if last is not None else "?"
    lower = (
        f"; the highest passing rate, {out.lo_rps:.3g} rps, is a lower bound only"
        if out.lo_rps is not None
        else ""
    )
    if out.stop_reason == "saturated":
        return (
            f"stopped: the load generator could not offer {rate} ({why}); no boundary "
            f"is called{lower}"
        )
    return (
        f"stopped: the probe at {rate} is an error probe ({why}); the endpoint failed more "
        f"than slo.max_error_rate = {spec.slo.max_error_rate:.0%} of requests; no boundary "
        f"is called{lower}"
    )


def _search_summary(out: SearchOutcome[ProbeSummary]) -> SearchSummary:
    history = [
        SearchStep(
            index=s.index,
            rate_rps=s.rate_rps,
            passed=s.passed,
            phase=s.phase,
            lo_rps=s.lo_rps,
            hi_rps=s.hi_rps,
            seed=s.seed,
            reason=s.outcome.reason,
        )
        for s in out.steps
    ]
    return SearchSummary(
        history=history,
        precision_target=out.precision_target,
        precision_reached=out.precision_reached,
        stop_reason=out.stop_reason,
        lo_rps=out.lo_rps,
        hi_rps=out.hi_rps,
        unclosed=out.unclosed,
    )


def _goodput_per_rps(b: ProbeSummary) -> float | None:
    """The boundary probe's goodput per request/s (tokens per good request): what scales
    goodput to the fitted rates."""
    return b.goodput_output_tokens_per_s / b.counted_rate_rps if b.counted_rate_rps else None


def _with_interval(b: ProbeSummary, fit: BoundaryFit | None) -> ProbeSummary:
    """A copy of the boundary probe with the fitted boundary and its interval; goodput scales
    with rate at the probe's own goodput per request/s (tokens per good request)."""
    if fit is None or fit.rate_rps is None:
        return b
    per_rps = _goodput_per_rps(b)
    point = fit.rate_rps if fit.high_rps is not None else None

    def scale(r: float | None) -> float | None:
        return None if r is None or per_rps is None else r * per_rps

    return b.model_copy(
        update={
            "boundary_rate_rps": point,
            "boundary_rate_leans": FITTED_POINT_LEANS if point is not None else None,
            "rate_interval_rps": (fit.low_rps, fit.high_rps),
            "goodput_tokens_per_s_at_boundary": scale(point),
            "goodput_interval_tokens_per_s": (scale(fit.low_rps), scale(fit.high_rps)),
            "confidence": fit.confidence,
            "safe_rate_rps": fit.low_rps,
            "goodput_tokens_per_s_at_safe_rate": scale(fit.low_rps),
        }
    )


def output_tokens_mean(probes: Sequence[ProbeSummary]) -> float | None:
    """The output tokens per counted request over ``probes`` (each probe's mean weighted by its
    counted requests): what places the two-sided low end (``metrics.boundary.
    low_end_min_below``), measured because a trace or dataset sets each request's length;
    None before any probe counted one."""
    pairs = [(p.run.output_tokens_mean, p.requests_counted) for p in probes
             if p.run is not None and p.run.output_tokens_mean is not None
             and p.requests_counted]  # fmt: skip
    n = sum(c for _, c in pairs)
    return sum(m * c for m, c in pairs) / n if n else None


def _checked_safe_rate(
    b: ProbeSummary,
    probes: Sequence[ProbeSummary],
    out: SearchOutcome[ProbeSummary],
    spec: BenchSpec,
    min_below: float = LOW_END_MIN_BELOW,
) -> ProbeSummary:
    """The boundary probe with its safe rate held to the drift checks (``load.safe_rate``): a
    check at or below it that failed lowers or withdraws it, with the flag (the low end
    re-computed at the search's distance ``min_below`` below the point); goodput there
    follows, scaled as the interval is."""
    if b.safe_rate_rps is None or not out.evidence:
        return b
    checks = [(p.index, p.rate_rps, outcome_of(p)) for p in probes
              if p.phase == "check" and p.rate_rps is not None]  # fmt: skip
    allowed = Limits.from_spec(spec.slo).allowed_violation_fraction
    flag = checked_safe_rate(out.evidence, allowed, b.safe_rate_rps, checks, min_below)
    if flag is None:
        return b
    per_rps = _goodput_per_rps(b)
    safe = flag.safe_rate_rps
    good = None if safe is None or per_rps is None else safe * per_rps
    return b.model_copy(
        update={
            "safe_rate_rps": safe,
            "goodput_tokens_per_s_at_safe_rate": good,
            "safe_rate_flag": flag,
        }
    )


def _start_rate(spec: BenchSpec, single: ProbeSummary | None, warnings: list[str]) -> float:
    if spec.search.start_rate_rps is not None:
        return spec.search.start_rate_rps
    if single is not None and single.e2e_s.mean:
        # About one request in flight per replica if latency stayed at its floor.
        return spec.hardware.replicas / single.e2e_s.mean
    warnings.append("no single-stream point to derive the start rate from: starting at 1 rps")
    return 1.0


def _stage_of(
    concurrency: int, ttft: Latency, tpot: Latency, e2e: Latency, decoded: int | None = None
) -> Stage:
    return Stage(concurrency, tpot.p50, ttft.p50, e2e.mean, decoded)


async def _staircase(bench: _Run, single: ProbeSummary) -> float | None:
    """The start rate from closed-loop stages (``load.capacity``); None: none usable."""
    spec = bench.spec
    lim = Limits.from_spec(spec.slo)
    p = spec.search.probe
    stages = [_stage_of(1, single.ttft_s, single.tpot_s, single.e2e_s)]
    while (c := next_concurrency(stages, lim.tpot_s)) is not None:
        bench.emit(BenchEvent("probe_start", index=None, phase=f"capacity · {c} streams"))
        run = await run_probe(
            spec,
            bench.target.client,
            rate_rps=None,
            seed=probe_seed(spec.workload.seed, 10_000 + c),
            settings=ProbeSettings(
                warmup_s=0.0,
                min_duration_s=p.min_duration_s,
                min_requests=c,
                max_duration_s=p.max_duration_s,
                drain_timeout_s=p.drain_timeout_s,
                early_stop=False,
            ),
            concurrency=c,
            max_requests=c,
        )
        if run.interrupted:
            raise _InterruptedError
        m = run.metrics
        decoded = sum(1 for r in run.counted if r.status == "ok")  # load.capacity: Stage.decoded
        stages.append(_stage_of(c, m.ttft_s, m.tpot_s, m.e2e_s, decoded))
    rate = start_rate(stages, lim.tpot_s)
    bench.stages = stages
    steps = ", ".join(
        f"{s.concurrency}{'' if s.held == s.concurrency else f' ({s.held} decoded)'}: "
        f"TPOT {1000 * (s.tpot_s or 0):.0f} ms"
        for s in stages
        if s.e2e_s
    )
    if rate is not None:
        bench.start_note = (
            f"started at {rate:.3g} req/s: Little's law at the concurrency where the median "
            f"TPOT reaches 60 % of its limit (closed-loop streams {steps})"
        )
    return rate


def _new_result(spec: BenchSpec, geometry: ModelGeometry, accelerator: Accelerator) -> BenchResult:
    return BenchResult.begin(
        spec,
        geometry,
        accelerator,
        tool_version=__version__,
        timestamp_source="kernel",
        started_at=datetime.now(UTC),
    )


async def run_bench(
    spec: BenchSpec,
    out_dir: str | Path,
    *,
    on_event: OnEvent | None = None,
    sim_mode: SimMode = "thread",
    truth_log: str | Path | None = None,
) -> BenchResult:
    """Run the whole benchmark and write its directory; returns the result as written.

    Ctrl-C (cancellation of the awaiting task) ends the probe in flight, writes
    ``result.json`` with everything completed and ``interrupted: true``; the returned result
    says so (if the cancellation arrives outside a probe it is re-raised after the write).
    """
    out = Path(out_dir)  # created by the first write, once every check has passed
    m = spec.model
    geometry = await asyncio.to_thread(
        load_geometry,
        m.source,
        weight_dtype=m.weight_dtype,
        kv_dtype=m.kv_dtype,
        overrides=m.overrides or None,
    )
    accelerator = resolve_accelerator(spec.hardware)
    check_fits(spec, geometry, accelerator)
    result = _new_result(spec, geometry, accelerator)
    if (stand_in := preset_stand_in(geometry.source)) is not None:
        result.warnings.append(stand_in)
    async with open_target(spec, sim_mode=sim_mode, truth_log=truth_log) as target:
        monitor = open_probe_power(spec, accelerator, target.metrics_url)
        try:
            result.warnings.extend(power_warnings(monitor))
            result.target = target.record(spec.sim)
            bench = _Run(spec, out, target, geometry, accelerator, monitor, result, on_event)
            bench.witness = EngineWitness(spec.server_metrics, target.base_url, result.warnings)
            bench.emit(BenchEvent("started", message=redact_text(target.base_url)))
            try:
                await _search(bench)
            except _InterruptedError:
                result.interrupted = True
            except asyncio.CancelledError:
                result.interrupted = True
                _finish(bench)
                raise
            _finish(bench)
        finally:
            await asyncio.to_thread(monitor.close)
    return result


def _finish(bench: _Run) -> None:
    bench.result.ended_at = datetime.now(UTC)
    if bench.result.interrupted and bench.result.search is not None:
        bench.result.search.stop_reason = "interrupted"
    bench.write()
    bench.emit(BenchEvent("written", result=bench.result, message=str(bench.out_dir)))


async def _single_stream(bench: _Run) -> ProbeSummary | None:
    """The single-stream point (None when the spec skips it). An error probe there stops the
    run before the search (``result.search.stop_reason`` says why)."""
    spec, result = bench.spec, bench.result
    ss = spec.search
    if ss.single_stream_requests <= 0:
        return None
    p = ss.probe
    single = await bench.measure(
        0,
        rate_rps=None,
        seed=probe_seed(spec.workload.seed, 0) ^ 0x5EED,
        phase="single_stream",
        settings=ProbeSettings(
            warmup_s=0.0,
            min_duration_s=p.min_duration_s,
            min_requests=ss.single_stream_requests,
            max_duration_s=p.max_duration_s,
            drain_timeout_s=p.drain_timeout_s,
            early_stop=False,
        ),
        concurrency=1,
        max_requests=ss.single_stream_requests,
    )
    halt = _halt_of(single)
    if halt is not None:
        result.search = SearchSummary(history=[], precision_target=ss.precision, stop_reason=halt)
        result.warnings.append(
            f"stopped at the single-stream point: {single.slo_detail.reason}; no boundary is called"
        )
    elif _single_stream_fails(single):
        result.search = SearchSummary(
            history=[], precision_target=ss.precision, stop_reason="single_stream_fails"
        )
        result.warnings.append(
            f"even one request at a time misses the SLO ({single.slo_detail.reason}): "
            "no rate can pass; relax the SLO or fix the server"
        )
    elif not single.slo_passed:
        result.warnings.append(
            "the SLO fails even one request at a time (single-stream point): "
            f"{single.slo_detail.reason}"
        )
    return single


def _single_stream_fails(single: ProbeSummary) -> bool:
    """The single-stream point is the latency floor (no queue, no batch to share): when the
    sequential test decides its misses a failure at its confidence (with 10 requests, 3 over
    a limit), more load only adds latency, so no rate can pass and the search would only
    spend probes descending to the floor. One slow request (a cold start) fails the p99 of
    10 but is not decided, so the search still runs then."""
    return not single.slo_passed and single.slo_detail.sequential == "fail"


async def _first_rate(bench: _Run, single: ProbeSummary | None) -> float:
    """The search's start: the spec's, else the closed-loop staircase (sequential mode),
    else one request in flight at the single-stream latency."""
    spec = bench.spec
    if spec.search.start_rate_rps is None and single is not None and bench.sequential:
        rate = await _staircase(bench, single)
        if rate is not None:
            return min(rate, spec.search.max_rate_rps)
    return _start_rate(spec, single, bench.result.warnings)


def _fit_text(fit: BoundaryFit | None) -> str | None:
    """The fitted boundary in one phrase for progress lines."""
    if fit is None or fit.rate_rps is None:
        return None
    lo = "…" if fit.low_rps is None else f"{fit.low_rps:.3g}"
    hi = "…" if fit.high_rps is None else f"{fit.high_rps:.3g}"
    return f"boundary {fit.rate_rps:.3g} req/s ({lo}–{hi}, {fit.confidence:.0%})"


def _summary_of(bench: _Run, out: SearchOutcome[ProbeSummary]) -> SearchSummary:
    summary = _search_summary(out)
    summary.start, summary.drift = bench.start_note, list(bench.drift)
    summary.max_time_s = bench.spec.search.max_time_s
    summary.low_end_min_below = bench.low_end_min_below if out.reported is not None else None
    return summary


async def _search(bench: _Run) -> None:
    spec, result = bench.spec, bench.result
    ss = spec.search
    single = await _single_stream(bench)
    if single is not None and (_halt_of(single) is not None or _single_stream_fails(single)):
        return
    bench.sequential = ss.sequential
    bench.low_end_min_below = low_end_min_below(output_tokens_mean([single] if single else []))
    start = await _first_rate(bench, single)

    async def probe(rate: float, seed: int) -> ProbeOutcome[ProbeSummary]:
        index = len(search.outcome.steps) + 1
        s = await bench.measure(index, rate_rps=rate, seed=seed, phase=search.current_phase,
                                want_judged=search.want_judged)  # fmt: skip
        bench.low_end_min_below = low_end_min_below(output_tokens_mean(result.probes))
        search.low_end_min_below = bench.low_end_min_below
        return outcome_of(s)

    def on_step(step: SearchStepT[ProbeSummary]) -> None:
        result.search = _summary_of(bench, search.outcome)
        bench.write()
        bench.emit(
            BenchEvent(
                "search_step",
                index=step.index,
                rate_rps=step.rate_rps,
                phase=step.phase,
                summary=step.outcome.payload,
                lo_rps=step.lo_rps,
                hi_rps=step.hi_rps,
                message=_fit_text(search.outcome.fit),
            )
        )

    limits = Limits.from_spec(spec.slo)
    search: BoundarySearch[ProbeSummary] = BoundarySearch(
        probe,
        start_rate_rps=start,
        growth=ss.growth,
        precision=ss.precision,
        max_rate_rps=ss.max_rate_rps,
        max_probes=ss.max_probes,
        seed=spec.workload.seed,
        allowed=limits.allowed_violation_fraction if bench.sequential else None,
        on_step=on_step,
        two_sided=bench.sequential,
        low_end_min_below=bench.low_end_min_below,
        max_time_s=ss.max_time_s,
        # A start from the staircase or the spec is an estimate of the boundary: walk away
        # from it in steps that begin at the width the search stops at (a pass and a failure
        # that far apart bracket the boundary to ± precision), not at ×growth. The start from
        # the single-stream point is far below the boundary: ×growth from there.
        first_step=(
            1 + 2 * min(ss.precision, RESOLUTION)
            if bench.start_note is not None or ss.start_rate_rps is not None
            else None
        ),
    )
    try:
        await search.run()
        if bench.sequential and search.outcome.stop_reason == "converged":
            await _drift_checks(bench, search.outcome)
    finally:
        _conclude(bench, search.outcome)


def level_of(s: ProbeSummary) -> Level | None:
    """A probe as the drift checks read it (``metrics.drift``): the load its window held
    (``level_rate``: the counted rate) and the judged requests' median TPOT
    (``slo_detail.medians_s``: over half failed reads as +inf, slower than any); None: a
    closed loop, no rate."""
    if s.rate_rps is None:
        return None
    return Level.of(level_rate(s.rate_rps, s.counted_rate_rps), s.slo_detail.medians_s)


async def _drift_checks(bench: _Run, out: SearchOutcome[ProbeSummary]) -> None:
    """Re-test the highest earlier pass and confirm at the fitted boundary (the confirmation
    only when the re-test's rate is not within the search's precision of the fitted point,
    ``load.search.drift_check_plan``); a check slower than
    its neighbours on the search's curve, or one whose requests the server failed, sets the stop
    reason ``changed`` (``metrics.drift``). The checks do not join the fit: their long windows
    near the boundary, joined, cost the reported interval its coverage (docs/methodology.md,
    "A server that changed")."""
    spec, fit, b = bench.spec, out.fit, out.boundary
    if fit is None or fit.rate_rps is None or b is None or b.outcome.payload is None:
        return
    levels = [lv for st in out.steps if st.outcome.payload is not None
              if (lv := level_of(st.outcome.payload)) is not None]  # fmt: skip
    for rate, kind in drift_check_plan(b.rate_rps, fit.rate_rps, spec.search.precision):
        index = len(bench.result.probes) + 1
        seed = probe_seed(spec.workload.seed, index)
        s = await bench.measure(index, rate_rps=rate, seed=seed, phase="check")
        where = f"in the {kind} at {rate:.3g} req/s (probe {index})"
        line = _changed_line(s, levels, where)
        verdict = "pass" if s.slo_passed else "fail"
        bench.drift.append(
            line or f"{kind} at {rate:.3g} req/s (probe {index}): {verdict}, latency as searched"
        )
        if line is not None:
            out.stop_reason = "changed"
            return


def _changed_line(s: ProbeSummary, levels: list[Level], where: str) -> str | None:
    """Why ``s`` says the server changed, or None: the server failed the check's requests
    (an error probe: it was answering during the search), or its median latency is over the
    factor × its neighbours' on the search's curve."""
    if s.slo_detail.error_probe:
        rate = s.slo_detail.error_rate or 0.0
        return f"the server failed {rate:.0%} of the requests {where}"
    level = level_of(s)
    return None if level is None else slower_than_search(level, levels, where)


def _conclude(bench: _Run, out: SearchOutcome[ProbeSummary]) -> None:
    """The search's record, the boundary with its interval, and why there is none."""
    spec, result = bench.spec, bench.result
    result.search = _summary_of(bench, out)
    for p in result.probes:
        p.fit_role = CHECK_ROLE if p.phase == "check" else step_role(out, p.index)
    if result.single_stream is not None:
        result.single_stream.fit_role = SINGLE_STREAM_ROLE
    b = out.boundary
    payload = b.outcome.payload if b is not None else None
    reported = None
    if out.fit is not None and out.evidence:
        allowed = Limits.from_spec(spec.slo).allowed_violation_fraction
        reported = out.reported or reported_boundary(out.evidence, allowed)
    result.boundary = _with_interval(payload, reported) if payload is not None else None
    if result.boundary is not None and out.stop_reason not in ("error", "saturated", "changed"):
        result.boundary = _checked_safe_rate(
            result.boundary, result.probes, out, spec, bench.low_end_min_below
        )
    if out.stop_reason in ("error", "saturated"):
        result.boundary = None
        result.warnings.append(_halt_warning(out, spec))
    elif out.stop_reason == "changed":
        result.boundary = None
        why = bench.drift[-1] if bench.drift else ""
        result.warnings.append(f"the server changed during the run: {why}; no boundary is called")
    elif out.stop_reason == "failed_at_start":
        result.warnings.append("no probed rate met the SLO: there is no boundary to report")
    elif out.stop_reason == "max_rate":
        result.warnings.append(
            f"the SLO still held at search.max_rate_rps = {spec.search.max_rate_rps:g}: "
            "the boundary is above it"
        )
    # max_probes: no warning here; the self-check (report.checks._search) says it once,
    # from result.search, with its remedy.
    bench.emit(
        BenchEvent(
            "search_done",
            lo_rps=out.lo_rps,
            hi_rps=out.hi_rps,
            message=out.stop_reason,
            summary=result.boundary,
        )
    )
