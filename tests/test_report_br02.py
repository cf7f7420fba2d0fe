"""BR0.2 partials and the probe CSV: figures against hand calculations, the output validated
by the BR0.2 model, and the model rejecting what the published schema rejects."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tokenwatt.records import RequestRecord
from tokenwatt.report.br02 import BenchmarkReportV02, ProbeFigures, to_br02, write_br02
from tokenwatt.report.csv_table import PROBE_COLUMNS, probe_row, probe_table_csv, write_probe_csv

START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def figures() -> ProbeFigures:
    return ProbeFigures(
        start=START,
        duration_s=10.0,
        input_tokens=[100, 200, 300, 400, 500],
        output_tokens=[10, 20, 30, 40, 1],
        ttft_s=[0.1, 0.2, 0.3, 0.4, 0.5],
        latency_s=[1.0, 2.1, 3.2, 4.3, 0.5],
        tpot_s=[0.1, 0.1, 0.1, 0.1],
        itl_s=[0.05, 0.15] * 10,
        failures=1,
        rate_rps=0.5,
        stage=2,
    )


def test_br02_figures_by_hand() -> None:
    rep = to_br02(figures(), eid="run-1", uid="u-1")
    assert rep.version == "0.2" and (rep.run.uid, rep.run.eid) == ("u-1", "run-1")
    assert rep.run.time.start == START and rep.run.time.duration == "PT10.000000S"
    assert rep.run.time.end == datetime(2026, 1, 2, 3, 4, 15, tzinfo=UTC)
    agg = rep.results.request_performance.aggregate
    assert agg.requests is not None and agg.latency is not None and agg.throughput is not None
    assert (agg.requests.total, agg.requests.failures) == (6, 1)  # 5 done + 1 failed
    il = agg.requests.input_length
    assert il is not None and il.units == "count"
    assert (il.mean, il.min, il.p50, il.max) == (300, 100, 300, 500)
    assert il.p25 == 200 and il.p75 == 400  # linear interpolation on 5 points
    assert il.p99 == pytest.approx(496)  # 400 + 0.96 × 100
    ttft = agg.latency.time_to_first_token
    assert ttft is not None and ttft.units == "s" and ttft.mean == pytest.approx(0.3)
    tpot = agg.latency.time_per_output_token
    assert tpot is not None and tpot.units == "s/token" and tpot.p50 == pytest.approx(0.1)
    itl = agg.latency.inter_token_latency
    assert itl is not None and itl.mean == pytest.approx(0.1) and itl.max == pytest.approx(0.15)
    nt = agg.latency.normalized_time_per_output_token
    # latency / output tokens: 0.1, 0.105, 0.10667, 0.1075, 0.5
    assert nt is not None and nt.p50 == pytest.approx(3.2 / 30)
    th = agg.throughput
    assert th.output_token_rate is not None and th.output_token_rate.mean == pytest.approx(10.1)
    assert th.input_token_rate is not None and th.input_token_rate.mean == pytest.approx(150)
    assert th.total_token_rate is not None and th.total_token_rate.mean == pytest.approx(160.1)
    assert th.request_rate is not None and th.request_rate.units == "queries/s"
    assert th.request_rate.mean == pytest.approx(0.5)
    assert rep.scenario is not None and rep.scenario.load is not None
    std = rep.scenario.load.standardized
    assert (std.tool, std.rate_qps, std.stage, std.input_seq_len.distribution) == (
        "tokenwatt",
        0.5,
        2,
        "other",
    )


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_br02_file_round_trips_through_the_model(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"br{suffix}"
    write_br02(path, to_br02(figures(), eid="e"))
    text = path.read_text()
    data = yaml.safe_load(text) if suffix == ".yaml" else json.loads(text)
    assert data["version"] == "0.2"
    agg = data["results"]["request_performance"]["aggregate"]
    assert set(agg["latency"]["time_to_first_token"]) == {
        "units", "mean", "stddev", "min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75",
        "p90", "p95", "p99", "p99p9", "max",
    }  # fmt: skip
    assert BenchmarkReportV02.model_validate(data).run.eid == "e"


def _minimal() -> dict:
    """A hand-written BR0.2 document in the published layout (own numbers)."""
    return {
        "version": "0.2",
        "run": {"uid": "a1", "eid": "b2", "time": {"start": "2025-11-05T18:00:42Z"}},
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": {"total": 3, "failures": 0},
                    "latency": {"time_to_first_token": {"units": "ms", "mean": 36.8}},
                    "throughput": {"output_token_rate": {"units": "tokens/s", "mean": 204.0}},
                }
            }
        },
    }


def test_br02_model_accepts_the_published_layout_and_rejects_deviations() -> None:
    BenchmarkReportV02.model_validate(_minimal())
    bad_units = _minimal()
    agg = bad_units["results"]["request_performance"]["aggregate"]
    agg["throughput"]["output_token_rate"]["units"] = "ms"
    with pytest.raises(ValidationError, match="tokens/s"):
        BenchmarkReportV02.model_validate(bad_units)
    typo = _minimal()
    typo["results"]["request_performance"]["aggregate"]["latency"]["ttft"] = {
        "units": "s",
        "mean": 1.0,
    }
    with pytest.raises(ValidationError, match="ttft"):
        BenchmarkReportV02.model_validate(typo)
    wrong_version = {**_minimal(), "version": "0.1"}
    with pytest.raises(ValidationError, match="version"):
        BenchmarkReportV02.model_validate(wrong_version)
    no_uid = _minimal()
    del no_uid["run"]["uid"]  # the official models require uid; eid is optional there
    with pytest.raises(ValidationError, match="uid"):
        BenchmarkReportV02.model_validate(no_uid)
    with pytest.raises(ValueError, match="duration_s"):
        to_br02(ProbeFigures(START, 0.0, [], [], [], []), eid="e")


def _record(i: int, sent: int, chunks: list[int], n_in: int, ok: bool = True) -> RequestRecord:
    r = RequestRecord(i, scheduled_ns=sent, prompt_tokens_client=n_in, max_tokens=len(chunks))
    r.sent_ns = sent
    if ok:
        r.chunk_ns, r.chunk_tokens = chunks, [1] * len(chunks)
        r.first_token_ns, r.end_ns = chunks[0], chunks[-1]
        r.completion_tokens = len(chunks)
    else:
        r.status, r.error_kind = "error", "http_status"
    return r


def test_figures_from_records_use_the_metrics_definitions() -> None:
    ms = 10**6
    recs = [
        _record(0, 0, [100 * ms, 120 * ms, 140 * ms], 50),  # TTFT 0.1, TPOT 0.02
        _record(1, 500 * ms, [800 * ms, 900 * ms], 70),  # TTFT 0.3, TPOT 0.1
        _record(2, 600 * ms, [], 9, ok=False),
        _record(3, 5000 * ms, [5100 * ms], 9),  # scheduled after the window: not counted
    ]
    f = ProbeFigures.from_records(
        recs, window_start_ns=0, window_end_ns=2000 * ms, start=START, rate_rps=1.0
    )
    assert f.duration_s == 2.0 and f.failures == 1 and f.rate_rps == 1.0
    assert f.input_tokens == [50, 70] and f.output_tokens == [3, 2]
    assert f.ttft_s == pytest.approx([0.1, 0.3]) and f.latency_s == pytest.approx([0.14, 0.4])
    assert f.tpot_s == pytest.approx([0.02, 0.1]) and f.itl_s == pytest.approx([0.02, 0.02, 0.1])


def test_probe_csv_columns_units_and_empty_cells(tmp_path: Path) -> None:
    row = probe_row(figures(), gpus=2, mbu=0.25)
    assert row.output_tok_s == pytest.approx(10.1) and row.output_tok_s_per_gpu == 5.05
    assert row.interactivity_tok_s_per_user == pytest.approx(10.0)  # 1 / 0.1 s per token
    assert row.ttft_p50_s == pytest.approx(0.3) and row.completed == 5
    closed = probe_row(ProbeFigures(START, 4.0, [1], [1], [0.2], [0.2], concurrency=3))
    assert closed.tpot_p50_s is None and closed.interactivity_tok_s_per_user is None
    path = tmp_path / "probes.csv"
    write_probe_csv(path, [row, closed])
    lines = list(csv.DictReader(io.StringIO(path.read_text())))
    assert tuple(lines[0]) == PROBE_COLUMNS
    assert float(lines[0]["output_tok_s"]) == row.output_tok_s  # every digit survives
    assert lines[0]["mbu"] == "0.25" and lines[0]["goodput_rps"] == ""
    assert lines[1]["rate_rps"] == "" and lines[1]["concurrency"] == "3"
    assert lines[1]["tpot_p50_s"] == "" and lines[1]["output_tok_s_per_gpu"] == ""
    assert probe_table_csv([]) == ",".join(PROBE_COLUMNS) + "\n"


def test_a_probe_with_no_completed_request() -> None:
    """Every request failed: counts stay, distributions are absent (never zeros)."""
    f = ProbeFigures(START, 5.0, [], [], [], [], failures=4, rate_rps=2.0)
    data = to_br02(f, eid="e").model_dump(mode="json", exclude_none=True)
    agg = data["results"]["request_performance"]["aggregate"]
    assert agg["requests"] == {"total": 4, "failures": 4, "incomplete": 0}
    assert agg["latency"] == {}
    assert agg["throughput"]["output_token_rate"]["mean"] == 0.0
    row = probe_row(f)
    assert (row.completed, row.failures, row.ttft_p50_s, row.output_tok_s) == (0, 4, None, 0.0)
    with pytest.raises(ValueError, match="duration_s"):
        probe_row(ProbeFigures(START, 0.0, [], [], [], []))
