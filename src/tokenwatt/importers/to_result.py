"""An imported run as a TokenWatt ``result.json`` (target kind ``imported``), so that
``tokenwatt report`` and ``compare`` read it like a measured run.

MBU goes through ``metrics.published.mbu_from_figures`` (every assumption it makes is kept in
the probe's MBU notes); the SLO verdict is judged on the peer's own p99s against the spec's
limits (its definitions, said in the verdict's reason); attainment and goodput only where the
file has per-request timings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from tokenwatt import __version__
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.importers.base import ImportedRun
from tokenwatt.metrics.published import MbuEstimate, PublishedFigures, mbu_from_figures
from tokenwatt.metrics.slo import Limits
from tokenwatt.result import BenchResult, ProbeSummary, RunTarget, SloDetail
from tokenwatt.spec import BenchSpec

__all__ = ["imported_result"]


def _estimate(
    run: ImportedRun, spec: BenchSpec, geometry: ModelGeometry, accelerator: Accelerator
) -> MbuEstimate | None:
    figures = PublishedFigures(
        output_tokens_per_s=run.output_tokens_per_s,
        itl_s=run.itl_token_weighted_s,
        tpot_s=run.tpot_s.mean,
        concurrency=run.concurrency,
        request_rate_rps=run.request_rate_rps,
        input_tokens=run.mean_input_tokens,
        output_tokens=run.mean_output_tokens,
        requests=run.pairs,
    )
    if run.output_tokens_per_s <= 0 or (figures.itl_s is None and not figures.tpot_s):
        return None
    return mbu_from_figures(
        geometry,
        figures,
        bandwidth_bytes_per_s=accelerator.bandwidth_bytes_per_s,
        gpus=spec.hardware.gpus,
        replicas=spec.hardware.replicas,
    )


def _verdict(run: ImportedRun, limits: Limits) -> tuple[bool, SloDetail]:
    """The spec's p99 limits against the peer's own p99s; a p99 the file lacks is not judged
    (said in the reason), never taken as a pass or a failure."""
    checks = (
        ("ttft_p99", run.ttft_s.p99, limits.ttft_s),
        ("tpot_p99", run.tpot_s.p99, limits.tpot_s),
    )
    judged = [(n, v, lim) for n, v, lim in checks if lim is not None and v is not None]
    failed = [n for n, v, lim in judged if v is not None and lim is not None and v > lim]
    missing = [n for n, v, lim in checks if lim is not None and v is None]
    reason = f"judged on {run.tool}'s own p99s"
    if failed:
        reason = f"{', '.join(failed)} over the limit ({run.tool}'s own p99s)"
    if missing:
        reason += f"; not in the file, not judged: {', '.join(missing)}"
    quantiles = {name: value for name, value, _ in checks}
    return not failed, SloDetail(failed=failed, reason=reason, quantiles_s=quantiles)


def _attainment(run: ImportedRun, limits: Limits) -> float | None:
    """Share of requests within the TTFT and TPOT limits, from per-request timings."""
    if not run.timings or not run.pairs or len(run.timings) != len(run.pairs):
        return None
    good = 0
    for (ttft, e2e), (_, n) in zip(run.timings, run.pairs, strict=True):
        tpot = (e2e - ttft) / (n - 1) if n > 1 else 0.0
        ok_ttft = limits.ttft_s is None or ttft <= limits.ttft_s
        ok_tpot = limits.tpot_s is None or tpot <= limits.tpot_s
        good += ok_ttft and ok_tpot
    return good / len(run.timings)


def _probe(
    index: int, run: ImportedRun, spec: BenchSpec, est: MbuEstimate | None, gpus: int
) -> ProbeSummary:
    limits = Limits.from_spec(spec.slo)
    passed, detail = _verdict(run, limits)
    attainment = _attainment(run, limits)
    goodput = run.output_tokens_per_s * attainment if attainment is not None else 0.0
    mbu = None
    if est is not None:
        mbu = est.headline if est.headline is not None else est.decode_only
        notes = [*est.mbu.notes, *(f"assumed: {a}" for a in est.assumptions)]
        est_mbu = est.mbu.model_copy(update={"notes": notes})
    rate = run.request_rate_rps
    if rate is not None:
        achieved = rate
    else:
        achieved = run.requests_ok / run.duration_s if run.duration_s > 0 else 0.0
    return ProbeSummary(
        index=index,
        rate_rps=run.rate_rps,
        # the peer counts no schedule: counted is every request it ended (ok or failed)
        counted_rate_rps=achieved + run.requests_failed / run.duration_s
        if run.duration_s > 0
        else achieved,
        achieved_rate_rps=achieved,
        output_tokens_per_s=run.output_tokens_per_s,
        itl_token_weighted_s=None if est is None else est.itl_s,
        batch_per_replica=None if est is None else est.mbu.inputs.batch_per_replica,
        mean_context_per_token=None if est is None else est.mbu.inputs.mean_context_per_token,
        mbu=mbu,
        mbu_detail=None if est is None else est_mbu,
        goodput_output_tokens_per_s=goodput,
        goodput_output_tokens_per_s_per_gpu=goodput / gpus,
        tokens_per_joule=None,
        slo_passed=passed,
        slo_detail=detail,
        attainment=attainment,
        ttft_s=run.ttft_s,
        tpot_s=run.tpot_s,
        itl_s=run.itl_s,
        e2e_s=run.e2e_s,
        requests_ok=run.requests_ok,
        requests_failed=run.requests_failed,
        requests_cancelled=0,
        requests_counted=run.requests_ok + run.requests_failed,
        window_s=run.duration_s,
        concurrency=run.concurrency,
        phase="imported",
        flags=[] if est is None else [k for k, v in est.mbu.flags.model_dump().items() if v],
    )


def imported_result(
    runs: Sequence[ImportedRun],
    spec: BenchSpec,
    geometry: ModelGeometry,
    accelerator: Accelerator,
    source: Path,
) -> BenchResult:
    """The result of the imported runs, one probe each, in the file's order."""
    first = runs[0]
    now = datetime.now(UTC)
    result = BenchResult.begin(
        spec,
        geometry,
        accelerator,
        tool_version=__version__,
        timestamp_source="imported",
        started_at=now,
    )
    result.ended_at = now
    result.target = RunTarget(
        kind="imported",
        base_url=spec.endpoint.url,
        model=first.model,
        source_tool=first.tool,
        source_tool_version=first.tool_version,
        source_format=first.source_format,
        source_file=source.name,
    )
    probes = []
    for i, run in enumerate(runs, 1):
        est = _estimate(run, spec, geometry, accelerator)
        probes.append(_probe(i, run, spec, est, spec.hardware.gpus))
    result.probes = probes
    seen: list[str] = []
    for run in runs:
        seen += [n for n in run.notes if n not in seen]
    result.warnings = [f"imported from {first.tool}: {n}" for n in seen]
    if not any(math.isfinite(p.output_tokens_per_s) for p in probes):
        result.warnings.append("no throughput in the file: no MBU")
    return result
