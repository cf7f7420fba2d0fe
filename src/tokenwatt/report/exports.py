"""Files for other tools, written next to ``result.json`` from the run's own files.

* ``benchmark_report_v0.2,_probe-NN.yaml``: one llm-d Benchmark Report v0.2 partial per probe
  (``report.br02``), the format inference-perf emits and llm-d-benchmark merges, so a tokenwatt
  run can sit in the same dashboards. The name is the one llm-d-benchmark's readers glob
  (``benchmark_report_v0.2,_*.yaml``); ``NN`` is the probe's index (00: single stream).
* ``probes.csv``: the probe table (``report.csv_table``), one row per probe, for spreadsheets.

Both are rendered from ``result.json`` and each probe's ``requests-NN.jsonl`` (never from
in-memory state), like every other view, so they can be regenerated from a result folder.
A probe whose requests file is missing is skipped, not guessed.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from tokenwatt.records import read_requests
from tokenwatt.report.br02 import ProbeFigures, to_br02, write_br02
from tokenwatt.report.br02_sections import br02_sections, request_rate_qps
from tokenwatt.report.csv_table import ProbeRow, probe_row, write_probe_csv
from tokenwatt.result import BenchResult, ProbeSummary

__all__ = ["CSV_FILE", "br02_name", "probe_figures", "write_exports"]

CSV_FILE = "probes.csv"


def br02_name(index: int) -> str:
    """The file name llm-d-benchmark's readers look for (``benchmark_report_v0.2,_*.yaml``)."""
    return f"benchmark_report_v0.2,_probe-{index:02d}.yaml"


def probe_figures(result: BenchResult, probe: ProbeSummary, out_dir: Path) -> ProbeFigures | None:
    """A probe's per-request figures from its requests file; None when it cannot be read."""
    if (
        probe.requests_file is None
        or probe.window_start_ns is None
        or probe.window_end_ns is None
        or probe.window_end_ns <= probe.window_start_ns
    ):
        return None
    path = out_dir / probe.requests_file
    if not path.exists():
        return None
    records = [rec for _, rec in read_requests(path)]
    wall_s = probe.window_start_ns / 1e9 + result.machine.realtime_minus_monotonic_s
    workload = result.spec.workload
    sampled = workload.trace is not None or workload.dataset is not None
    return ProbeFigures.from_records(
        records,
        window_start_ns=probe.window_start_ns,
        window_end_ns=probe.window_end_ns,
        start=datetime.fromtimestamp(wall_s, UTC),
        rate_rps=request_rate_qps(probe),
        concurrency=probe.concurrency,
        output_tokens_per_s=probe.output_tokens_per_s,
        achieved_rate_rps=probe.achieved_rate_rps,
        stage=probe.index,
        source="sampled" if sampled else "random",
    )


def write_exports(result: BenchResult, out_dir: Path) -> list[Path]:
    """Write ``br02-NN.yaml`` per probe and ``probes.csv``; returns the paths written."""
    probes = ([result.single_stream] if result.single_stream is not None else []) + list(
        result.probes
    )
    eid = f"{result.name}-{result.started_at.strftime('%Y%m%dT%H%M%S')}"
    written: list[Path] = []
    rows: list[ProbeRow] = []
    for p in probes:
        f = probe_figures(result, p, out_dir)
        if f is None:
            continue
        report = to_br02(
            f,
            eid=eid,
            uid=f"{eid}-{p.index:02d}",
            config=result.spec.model_dump(mode="json"),
            sections=br02_sections(result, p),
        )
        path = out_dir / br02_name(p.index)
        write_br02(path, report)
        written.append(path)
        row = probe_row(
            f,
            gpus=result.gpus,
            slo_attainment=p.attainment,
            output_tok_per_j=p.tokens_per_joule,
            mbu=p.mbu,
        )
        rows.append(_with_result_figures(row, p, result.gpus))
    if rows:
        csv_path = out_dir / CSV_FILE
        write_probe_csv(csv_path, rows)
        written.append(csv_path)
    return written


def _with_result_figures(row: ProbeRow, p: ProbeSummary, gpus: int) -> ProbeRow:
    """Where result.json has the figure, the CSV shows that one (one definition each): T for
    output tokens/s (tokens received inside the window), and 1 ÷ the result's median TPOT for
    interactivity, so the CSV, the terminal and the Pareto view agree."""
    tpot = p.tpot_s.p50
    return dataclasses.replace(
        row,
        output_tok_s=p.output_tokens_per_s,
        output_tok_s_per_gpu=p.output_tokens_per_s / gpus,
        tpot_p50_s=tpot,
        interactivity_tok_s_per_user=1 / tpot if tpot else None,
    )
