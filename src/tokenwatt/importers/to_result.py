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
from typing import Any

from tokenwatt import __version__
from tokenwatt.errors import HardwareError
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator, get_accelerator
from tokenwatt.importers.base import ImportedRun, ImportFileError
from tokenwatt.metrics.published import MbuEstimate, PublishedFigures, mbu_from_figures
from tokenwatt.metrics.slo import Limits
from tokenwatt.result import BenchResult, EnergySummary, ProbeSummary, RunTarget, SloDetail
from tokenwatt.spec import BenchSpec

__all__ = ["imported_result"]


def _figures(run: ImportedRun) -> PublishedFigures:
    """What the file gives MBU: τ from the best figure it has (per-request records, then the
    pooled mean ITL, then mean TPOT), lengths per request or as means (with the maxima)."""
    return PublishedFigures(
        output_tokens_per_s=run.output_tokens_per_s,
        itl_s=run.itl_token_weighted_s,
        pooled_itl_s=run.itl_s.mean if run.itl_s.mean else None,
        median_itl_s=run.median_itl_s,
        tpot_s=run.tpot_s.mean,
        concurrency=run.concurrency,
        request_rate_rps=run.request_rate_rps,
        input_tokens=run.mean_input_tokens,
        output_tokens=run.mean_output_tokens,
        requests=run.pairs,
        lengths_are_means=not run.pairs,
        max_input_tokens=run.max_input_tokens,
        max_output_tokens=run.max_output_tokens,
    )


def _estimate(
    run: ImportedRun, spec: BenchSpec, geometry: ModelGeometry, accelerator: Accelerator
) -> MbuEstimate | None:
    figures = _figures(run)
    if run.output_tokens_per_s <= 0 or not (
        figures.itl_s or figures.pooled_itl_s or figures.tpot_s or figures.median_itl_s
    ):
        return None
    return mbu_from_figures(
        geometry,
        figures,
        bandwidth_bytes_per_s=accelerator.bandwidth_bytes_per_s,
        gpus=spec.hardware.gpus,
        replicas=spec.hardware.replicas,
    )


def _errors(run: ImportedRun, max_error_rate: float) -> tuple[float | None, str | None]:
    """The peer's failed share of the requests it ended and, over ``slo.max_error_rate``, the
    error-probe reason (the peer names no error kind, so every failure counts against the
    budget, as an endpoint error does in a measured probe)."""
    ended = run.requests_ok + run.requests_failed
    if ended == 0:
        return None, None
    rate = run.requests_failed / ended
    if rate <= max_error_rate:
        return rate, None
    return rate, (
        f"error probe: {run.requests_failed} of {ended} requests failed ({run.tool}'s count), "
        f"over slo.max_error_rate {max_error_rate:.0%}"
    )


def _verdict(run: ImportedRun, spec: BenchSpec, attainment: float | None) -> SloDetail:
    """The peer's failures against the error budget, then the spec's p99 limits against the
    peer's own p99s (a p99 the file lacks is not judged, said in the reason, never taken as a
    pass or a failure) and, for an attainment SLO, the attainment over every ended request."""
    limits = Limits.from_spec(spec.slo)
    checks = (
        ("ttft_p99", run.ttft_s.p99, limits.ttft_s),
        ("tpot_p99", run.tpot_s.p99, limits.tpot_s),
    )
    judged = [(n, v, lim) for n, v, lim in checks if lim is not None and v is not None]
    failed = [n for n, v, lim in judged if v is not None and lim is not None and v > lim]
    missing = [n for n, v, lim in checks if lim is not None and v is None]
    reasons = [f"{', '.join(failed)} over the limit ({run.tool}'s own p99s)"] if failed else []
    rate, error_reason = _errors(run, spec.slo.max_error_rate)
    if error_reason is not None:
        failed.insert(0, "error_probe")
        reasons.insert(0, error_reason)
    if (
        spec.slo.kind == "attainment"
        and attainment is not None
        and attainment < spec.slo.attainment
    ):
        failed.append("attainment")
        reasons.append(f"attainment {attainment:.1%} < {spec.slo.attainment:.0%}")
    reason = "; ".join(reasons) or f"judged on {run.tool}'s own p99s"
    if missing:
        reason += f"; not in the file, not judged: {', '.join(missing)}"
    return SloDetail(
        kind=spec.slo.kind,
        failed=failed,
        reason=reason,
        quantiles_s={name: value for name, value, _ in checks},
        error_probe=error_reason is not None,
        error_rate=rate,
        judged=run.requests_ok + run.requests_failed,
    )


def _attainment(run: ImportedRun, limits: Limits) -> tuple[float, float] | None:
    """(attainment, goodput share) from per-request timings: the share of every request the
    peer ended (its failures count as missing every limit, as in a measured probe) that met
    the TTFT and TPOT limits, and the attaining requests' share of the output tokens (a failed
    request's tokens are unknown, taken as 0). None without per-request timings."""
    if not run.timings or not run.pairs or len(run.timings) != len(run.pairs):
        return None
    good = good_tokens = all_tokens = 0
    for (ttft, e2e), (_, n) in zip(run.timings, run.pairs, strict=True):
        tpot = (e2e - ttft) / (n - 1) if n > 1 else 0.0
        ok_ttft = limits.ttft_s is None or ttft <= limits.ttft_s
        ok_tpot = limits.tpot_s is None or tpot <= limits.tpot_s
        good += ok_ttft and ok_tpot
        good_tokens += n if ok_ttft and ok_tpot else 0
        all_tokens += n
    share = good_tokens / all_tokens if all_tokens else 0.0
    return good / (len(run.timings) + run.requests_failed), share


def _mbu_fields(est: MbuEstimate | None) -> dict[str, Any]:
    """The probe's MBU fields under the names every command uses (``mbu`` the headline)."""
    if est is None:
        return {"mbu": None, "mbu_detail": None, "flags": []}
    notes = [*est.mbu.notes, *(f"assumed: {a}" for a in est.assumptions)]
    detail = est.mbu.model_copy(update={"notes": notes})
    return {
        "mbu": detail.mbu,
        "mbu_detail": detail,
        "itl_token_weighted_s": est.itl_s,
        "batch_per_replica": detail.inputs.batch_per_replica,
        "mean_context_per_token": detail.inputs.mean_context_per_token,
        "flags": [k for k, v in detail.flags.model_dump().items() if v],
    }


def _probe(
    index: int,
    run: ImportedRun,
    spec: BenchSpec,
    est: MbuEstimate | None,
    energy: EnergySummary | None,
) -> ProbeSummary:
    gpus = spec.hardware.gpus
    shares = _attainment(run, Limits.from_spec(spec.slo))
    attainment = None if shares is None else shares[0]
    detail = _verdict(run, spec, attainment)
    goodput = 0.0 if shares is None else run.output_tokens_per_s * shares[1]
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
        goodput_output_tokens_per_s=goodput,
        goodput_output_tokens_per_s_per_gpu=goodput / gpus,
        tokens_per_joule=None if energy is None else energy.tokens_per_joule,
        energy=energy,
        slo_passed=not detail.failed,
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
        **_mbu_fields(est),
    )


def on_node(
    runs: Sequence[ImportedRun],
    spec: BenchSpec,
    accelerator: Accelerator,
    energy: Sequence[EnergySummary | None] | None = None,
) -> tuple[list[ImportedRun], Sequence[EnergySummary | None] | None]:
    """The runs on the stated node (accelerator and GPU count) where the file names a node per
    run; a file whose runs are all elsewhere is refused, naming the nodes it has."""
    keep = [
        i
        for i, r in enumerate(runs)
        if r.node is None
        or (_same_accelerator(r.node[0], accelerator) and r.node[1] == spec.hardware.gpus)
    ]
    if not keep:
        nodes = sorted(
            {f"--hardware {r.node[0].lower()} --gpus {r.node[1]}" for r in runs if r.node}
        )
        raise ImportFileError(f"no run on {spec.hardware.gpus} × {accelerator.display_name} in "
                              f"the file; its nodes: {'; '.join(nodes)}")  # fmt: skip
    picked = [runs[i] for i in keep]
    return picked, None if energy is None else [energy[i] for i in keep]


def _same_accelerator(name: str, accelerator: Accelerator) -> bool:
    try:
        return get_accelerator(name).name == accelerator.name
    except HardwareError:
        return False


def _own_energy(run: ImportedRun) -> EnergySummary | None:
    """The source's own energy figure (ML.ENERGY's mean power over its window), where it
    publishes one: tokens/J = T ÷ that power. None where the file has none."""
    power = run.mean_power_w
    t = run.output_tokens_per_s
    if power is None or not power > 0 or not t > 0:
        return None
    return EnergySummary(
        mean_power_w=power,
        tokens_per_joule=t / power,
        joules_per_output_token=power / t,
        source=run.tool,
        scope="gpu",
        kind="energy_counter",
        measured=True,
        primary_scope="gpu",
        warnings=[f"{run.tool}'s own energy figure (its method, its window)"],
    )


def imported_result(
    runs: Sequence[ImportedRun],
    spec: BenchSpec,
    geometry: ModelGeometry,
    accelerator: Accelerator,
    source: Path,
    *,
    energy: Sequence[EnergySummary | None] | None = None,
) -> BenchResult:
    """The result of the imported runs, one probe each, in the file's order; ``energy`` per
    run, where a power log beside the file covered it (``power.logs``). Runs the file places
    on another node than the stated one are left out (``on_node``)."""
    runs, energy = on_node(runs, spec, accelerator, energy)
    first = runs[0]
    now = datetime.now(UTC)
    starts = [r.started_at for r in runs if r.started_at is not None]
    ends = [r.ended_at for r in runs if r.ended_at is not None]
    result = BenchResult.begin(
        spec,
        geometry,
        accelerator,
        tool_version=__version__,
        timestamp_source="imported",
        started_at=min(starts) if starts else now,
    )
    result.ended_at = max(ends) if ends else (result.started_at if starts else now)
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
        measured = energy[i - 1] if energy else None
        probes.append(_probe(i, run, spec, est, measured or _own_energy(run)))
    result.probes = probes
    seen: list[str] = []
    for run in runs:
        seen += [n for n in run.notes if n not in seen]
    result.warnings = [f"imported from {first.tool}: {n}" for n in seen]
    if not starts:
        result.warnings.append(
            f"{source.name} gives no run date: the result's date is the import's ({now:%Y-%m-%d})"
        )
    if not any(math.isfinite(p.output_tokens_per_s) for p in probes):
        result.warnings.append("no throughput in the file: no MBU")
    return result
