"""The probe table as CSV: one row per probe, for spreadsheets and plotting scripts.

Column names carry their units (``_s``, ``_rps``, ``_tok_s`` tokens/s, ``_j``), values are
plain numbers in those units (seconds, never milliseconds; fractions, never percent), and an
unknown figure is an empty cell, never 0. Rows come from ``ProbeFigures`` (what was measured
per request) plus the figures only a full result has (goodput, energy, MBU), passed in by the
caller; the latency definitions are those of ``tokenwatt.metrics.latency``.

``interactivity_tok_s_per_user`` is 1 ÷ median TPOT: the decode speed one user sees, the
x-axis of the throughput-per-GPU against interactivity view buyers use to compare systems.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenwatt.metrics.stats import interpolated_quantile
from tokenwatt.report.br02 import ProbeFigures

__all__ = ["PROBE_COLUMNS", "ProbeRow", "probe_row", "probe_table_csv", "write_probe_csv"]


@dataclass(frozen=True, slots=True)
class ProbeRow:
    """One probe's line of the table."""

    stage: int
    rate_rps: float | None
    concurrency: int | None
    completed: int
    failures: int
    duration_s: float
    requests_rps: float
    input_tok_s: float
    output_tok_s: float
    output_tok_s_per_gpu: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    itl_p50_s: float | None
    latency_p50_s: float | None
    latency_p99_s: float | None
    interactivity_tok_s_per_user: float | None
    goodput_rps: float | None = None
    slo_attainment: float | None = None
    output_tok_per_j: float | None = None
    mbu: float | None = None


PROBE_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ProbeRow))


def _pct(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The q-th percentile by the result's one rule (``metrics.stats.interpolated_quantile``)."""
    return interpolated_quantile(np.asarray(values, dtype=float).tolist(), q / 100)


def probe_row(
    f: ProbeFigures,
    *,
    gpus: int | None = None,
    goodput_rps: float | None = None,
    slo_attainment: float | None = None,
    output_tok_per_j: float | None = None,
    mbu: float | None = None,
) -> ProbeRow:
    """A probe's row from its per-request figures and the result-level figures given."""
    if not (f.duration_s > 0):
        raise ValueError(f"duration_s must be > 0, got {f.duration_s}")
    n_out = np.asarray(f.output_tokens, dtype=float)
    lat = np.asarray(f.latency_s, dtype=float)
    ttft = np.asarray(f.ttft_s, dtype=float)
    tpot = np.asarray(f.tpot_s, dtype=float)
    out_tok_s = float(n_out.sum()) / f.duration_s
    tpot_p50 = _pct(tpot, 50)
    return ProbeRow(
        stage=f.stage,
        rate_rps=f.rate_rps,
        concurrency=f.concurrency,
        completed=len(n_out),
        failures=f.failures,
        duration_s=f.duration_s,
        requests_rps=len(n_out) / f.duration_s,
        input_tok_s=float(np.sum(f.input_tokens)) / f.duration_s,
        output_tok_s=out_tok_s,
        output_tok_s_per_gpu=out_tok_s / gpus if gpus else None,
        ttft_p50_s=_pct(ttft, 50),
        ttft_p99_s=_pct(ttft, 99),
        tpot_p50_s=tpot_p50,
        tpot_p99_s=_pct(tpot, 99),
        itl_p50_s=_pct(f.itl_s, 50),
        latency_p50_s=_pct(lat, 50),
        latency_p99_s=_pct(lat, 99),
        interactivity_tok_s_per_user=1 / tpot_p50 if tpot_p50 else None,
        goodput_rps=goodput_rps,
        slo_attainment=slo_attainment,
        output_tok_per_j=output_tok_per_j,
        mbu=mbu,
    )


def _cell(v: object) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)  # repr: every digit survives


def probe_table_csv(rows: Sequence[ProbeRow]) -> str:
    """The table as CSV text: a header of ``PROBE_COLUMNS``, then one line per row."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(PROBE_COLUMNS)
    for r in rows:
        w.writerow([_cell(getattr(r, c)) for c in PROBE_COLUMNS])
    return buf.getvalue()


def write_probe_csv(path: Path, rows: Sequence[ProbeRow]) -> None:
    path.write_text(probe_table_csv(rows), "utf-8")
