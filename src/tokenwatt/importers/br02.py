"""llm-d Benchmark Report v0.2 / v0.2.1 (any harness's, TokenWatt's own included).

Read through ``report.br02.BenchmarkReportV02`` (the same model TokenWatt writes with). The
figures are whatever the harness that wrote the report put there: its ``time_per_output_token``
and ``inter_token_latency`` (the schema itself warns that tools differ on them; TokenWatt's
own reports use TPOT per request and chunk ITL), its throughput over its own span. A report
has no per-request records, so τ is taken as mean TPOT.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tokenwatt.importers.base import ImportedRun, ImportFileError
from tokenwatt.report.br02 import BenchmarkReportV02, Statistics
from tokenwatt.result import Latency

__all__ = ["looks_like", "read"]

_SCALE = {"s": 1.0, "ms": 1e-3, "s/token": 1.0, "ms/token": 1e-3}


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("version")) in ("0.2", "0.2.1") and "run" in doc


def _lat(stats: Statistics | None, count: int) -> Latency:
    if stats is None:
        return Latency()
    k = _SCALE.get(stats.units, 1.0)

    def f(v: float | None) -> float | None:
        return None if v is None else v * k

    return Latency(
        count=count,
        mean=f(stats.mean),
        p50=f(stats.p50),
        p90=f(stats.p90),
        p95=f(stats.p95),
        p99=f(stats.p99),
        max=f(stats.max),
    )


def read(doc: Any) -> list[ImportedRun]:
    try:
        rep = BenchmarkReportV02.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ImportFileError(f"Benchmark Report: {where}: {first['msg']}") from None
    perf = rep.results.request_performance
    agg = perf.aggregate if perf is not None else None
    tput = agg.throughput if agg is not None else None
    if agg is None or tput is None or tput.output_token_rate is None:
        raise ImportFileError(
            "Benchmark Report: needs results.request_performance.aggregate.throughput."
            "output_token_rate"
        )
    load = rep.scenario.load if rep.scenario is not None else None
    std = load.standardized if load is not None else None
    req, lat = agg.requests, agg.latency
    ok = req.total - (req.failures or 0) - (req.incomplete or 0) if req is not None else 0
    t = rep.run.time
    duration = None
    if t is not None and t.start is not None and t.end is not None:
        duration = (t.end - t.start).total_seconds()
    conc = std.concurrency if std is not None else None
    return [
        ImportedRun(
            tool=f"{std.tool} (Benchmark Report {rep.version})" if std else "Benchmark Report",
            tool_version=std.tool_version if std is not None else None,
            source_format=f"llm-d-benchmark-report-v{rep.version}",
            output_tokens_per_s=tput.output_token_rate.mean,
            duration_s=duration or 0.0,
            ttft_s=_lat(lat.time_to_first_token if lat else None, ok),
            tpot_s=_lat(lat.time_per_output_token if lat else None, ok),
            itl_s=_lat(lat.inter_token_latency if lat else None, 0),
            e2e_s=_lat(lat.request_latency if lat else None, ok),
            requests_ok=ok,
            requests_failed=(req.failures or 0) if req is not None else 0,
            rate_rps=std.rate_qps if std is not None else None,
            concurrency=int(conc) if isinstance(conc, int) else None,
            request_rate_rps=tput.request_rate.mean if tput.request_rate else None,
            mean_input_tokens=req.input_length.mean if req and req.input_length else None,
            mean_output_tokens=req.output_length.mean if req and req.output_length else None,
            max_input_tokens=req.input_length.max if req and req.input_length else None,
            max_output_tokens=req.output_length.max if req and req.output_length else None,
            started_at=t.start if t is not None else None,
            ended_at=t.end if t is not None else None,
            notes=[
                "a Benchmark Report's TPOT and ITL are its harness's own definitions (the "
                "schema warns they differ between tools); no per-request records: τ and "
                "lengths from the summary (MBU notes)"
            ],
        )
    ]
