"""An imported run as llm-d Benchmark Report v0.2 files, beside its ``result.json``.

A measured run's BR0.2 comes from its ``requests-NN.jsonl`` (``report.exports``); an imported
run has no such file, so its report is built here from the peer's own per-request records
(lengths, TTFT, E2E) with the peer's failure count, its run date, and the peer named as the
tool that measured. A run without per-request records (a summary-only file) gets none: the
report's statistics are per-request distributions, which a summary cannot give.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenwatt.importers.base import ImportedRun
from tokenwatt.report.br02 import BenchmarkReportV02, ProbeFigures, to_br02, write_br02
from tokenwatt.report.br02_sections import br02_sections
from tokenwatt.report.exports import br02_name
from tokenwatt.result import BenchResult, ProbeSummary

__all__ = ["imported_figures", "write_imported_br02"]


def imported_figures(run: ImportedRun, probe: ProbeSummary, result: BenchResult) -> ProbeFigures:
    """The peer's per-request records as a probe's figures (its failures counted)."""
    pairs, timings = run.pairs or (), run.timings or ()
    tpot = [
        (e2e - ttft) / (n - 1) for (_, n), (ttft, e2e) in zip(pairs, timings, strict=False) if n > 1
    ]
    return ProbeFigures(
        start=run.started_at or result.started_at,
        duration_s=run.duration_s,
        input_tokens=[p for p, _ in pairs],
        output_tokens=[n for _, n in pairs],
        ttft_s=[t for t, _ in timings],
        latency_s=[e for _, e in timings],
        tpot_s=tpot,
        failures=run.requests_failed,
        rate_rps=run.rate_rps,
        concurrency=run.concurrency,
        stage=probe.index,
        output_tokens_per_s=run.output_tokens_per_s,
        achieved_rate_rps=probe.achieved_rate_rps,
    )


def _as_peer(report: BenchmarkReportV02, run: ImportedRun) -> BenchmarkReportV02:
    """The report with the peer, not TokenWatt, named as the tool that measured."""
    doc = report.model_dump(mode="json", exclude_none=True)
    std = doc["scenario"]["load"]["standardized"]
    std["tool"], std["tool_version"] = run.tool, run.tool_version or "unknown"
    doc["scenario"]["load"]["metadata"]["description"] = f"imported from {run.tool}"
    return BenchmarkReportV02.model_validate(doc)


def write_imported_br02(
    runs: Sequence[ImportedRun], result: BenchResult, out_dir: Path
) -> list[Path]:
    """One ``benchmark_report_v0.2,_probe-NN.yaml`` per run with per-request records."""
    written = []
    eid = f"{result.name}-{result.started_at.strftime('%Y%m%dT%H%M%S')}"
    for run, probe in zip(runs, result.probes, strict=True):
        if not run.pairs or not run.timings or len(run.pairs) != len(run.timings):
            continue
        if not run.duration_s > 0:
            continue
        report = to_br02(
            imported_figures(run, probe, result),
            eid=eid,
            uid=f"{eid}-{probe.index:02d}",
            config=result.spec.model_dump(mode="json"),
            sections=br02_sections(result, probe),
        )
        path = out_dir / br02_name(probe.index)
        write_br02(path, _as_peer(report, run))
        written.append(path)
    return written
