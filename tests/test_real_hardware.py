"""The real-hardware table's invariants (tests/public_rows.py, docs/validation.md "Real
hardware: public data"): public measurements TokenWatt did not make, put through the same
``metrics.published`` path as ``tokenwatt mbu``. Nothing here tunes a figure: each check is a
physical or bookkeeping invariant the source's own numbers must satisfy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from public_rows import all_rows, shown

ROWS = all_rows()
ROOT = Path(__file__).resolve().parents[1]


def test_the_h100_64gb_rows_use_the_engine_and_power_the_source_logged() -> None:
    """The Memory Gap rows: B against the engine's running count over its generating span,
    tokens/J from the run's own nvidia-smi dmon log over the same span."""
    from public_rows import MEMORY_GAP, engine_span

    rows = [r for r in ROWS if r.source.startswith("Memory Gap")]
    assert len(rows) == 2
    for r in rows:
        folder = MEMORY_GAP / f"opt-1.3b_{r.slot_limit}"
        _, _, running = engine_span(folder)
        assert r.b_engine == pytest.approx(running)
        assert r.b_client is not None and r.b_engine is not None
        assert r.tokens_per_joule is not None and r.tokens_per_joule > 0


def test_three_sources_and_two_gpu_kinds() -> None:
    assert len({r.source for r in ROWS}) >= 3
    assert len({r.gpu for r in ROWS}) >= 2


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.source}:{r.gpu}:{r.model}:{r.point}")
def test_each_row_holds_its_invariants(row: object) -> None:
    from public_rows import Row

    assert isinstance(row, Row)
    # MBU is never above the rated bandwidth (a refusal would mean an input is wrong)
    assert row.mbu is not None and 0 < row.mbu <= 1.0, row.est.mbu.notes
    assert "above_rated_bandwidth" not in row.flags
    # lengths known only as means: the figure says it is a lower bound
    assert "kv_lengths_from_means" in row.flags
    if row.source.startswith("MLPerf"):  # τ is the mean TPOT there: flagged, reads high
        assert "tau_from_tpot" in row.flags
    elif row.source.startswith("ML.ENERGY"):  # the median ITL only: flagged, reads low
        assert "tau_from_median_itl" in row.flags
    else:  # vLLM's benchmark_serving: the pooled mean ITL, flagged, reads high
        assert "tau_from_pooled_itl" in row.flags
    # tokens per joule from the source's power and throughput against its own energy/token
    if row.source_tokens_per_joule is not None:
        assert row.tokens_per_joule == pytest.approx(row.source_tokens_per_joule, rel=0.01)
    # the client's B can never exceed the engine's slot limit
    if row.slot_limit is not None and row.b_client is not None:
        assert row.b_client <= row.slot_limit * 1.05
    # client MBU never above a counter's DRAM throughput, where a counter was logged
    if row.counter_dram_bytes_per_s is not None:
        used = row.est.mbu.inputs.bytes_per_s
        assert used is not None and used <= row.counter_dram_bytes_per_s


def test_the_script_prints_every_shown_row() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "real_hardware_table.py")],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    body = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(body) == 1 + len(shown(ROWS))
    assert all(r.model in out for r in shown(ROWS))
