"""An imported run whose peer saw failed requests: each peer format's real file (fixtures/peers,
fixtures/llm-d) with some of its requests turned into failures exactly where and how that
tool writes them (vLLM: ``failed``, ``errors``, zeroed arrays; GuideLLM: ``request_totals``
and the ``errored`` list; AIPerf: ``error_summary`` and per-record ``error``; inference-perf:
``failures.count``; Benchmark Report: ``requests.failures``). Over ``slo.max_error_rate`` the
import is an SLO failure, and the terminal, the HTML report, ``compare`` and the BR0.2 file
all say so; at or under it the verdict is the latency one."""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.importers import read_runs
from tokenwatt.importers.exports import write_imported_br02
from tokenwatt.importers.to_result import imported_result
from tokenwatt.report.br02 import BenchmarkReportV02
from tokenwatt.report.compare import compare_results
from tokenwatt.report.compare_view import comparison_view
from tokenwatt.report.format import fmt_pct
from tokenwatt.report.html import render_html
from tokenwatt.report.terminal import ResultView
from tokenwatt.result import BenchResult
from tokenwatt.spec import BenchSpec

FIX = Path(__file__).parent / "fixtures"
PEERS = FIX / "peers"


def _vllm(doc: dict[str, Any], k: int) -> None:
    for i in range(k):  # vLLM's failed request: error text, output_len 0, ttft 0, no itls
        doc["errors"][i] = "ClientConnectorError: Cannot connect to host"
        doc["output_lens"][i], doc["ttfts"][i], doc["itls"][i] = 0, 0.0, []
        doc["latencies"][i] = 0.0
    doc["completed"] -= k
    doc["failed"] = k


def _guidellm(doc: dict[str, Any], k: int) -> None:
    for b in doc["benchmarks"]:
        reqs = b["requests"]
        moved = reqs["successful"][:k]
        reqs["successful"] = reqs["successful"][k:]
        reqs["errored"] = [{**r, "error": "HTTP 500"} for r in moved]
        totals = b["metrics"]["request_totals"]
        totals["successful"] -= k
        totals["errored"] = k


def _aiperf_records(lines: list[str], k: int) -> list[str]:
    out = []
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if i < k:
            rec["error"] = {"code": 500, "type": "Internal Server Error", "message": "boom"}
            rec["metrics"] = {}
        out.append(json.dumps(rec))
    return out


def _aiperf(doc: dict[str, Any], k: int) -> None:
    doc["error_summary"] = [
        {"error_details": {"code": 500, "type": "Internal Server Error"}, "count": k}
    ]
    doc["request_count"]["avg"] -= k


def _inference_perf(doc: dict[str, Any], k: int) -> None:
    doc["failures"]["count"] = k


def _br02(doc: dict[str, Any], k: int) -> None:
    doc["results"]["request_performance"]["aggregate"]["requests"]["failures"] = k


# format: (file, how to fail k requests, requests ended in the file, has per-request records)
CASES: dict[str, tuple[Path, Callable[[dict[str, Any], int], None], int, bool]] = {
    "vllm": (PEERS / "vllm_sim_detailed.json", _vllm, 40, True),
    "guidellm": (PEERS / "guidellm_sim_benchmarks.json", _guidellm, 40, True),
    "aiperf": (PEERS / "aiperf_sim" / "profile_export_aiperf.json", _aiperf, 40, True),
    "inference-perf": (PEERS / "inference_perf_lifecycle.yaml", _inference_perf, 3, False),
    "br02": (FIX / "llm-d" / "br_v0_2_1_example.yaml", _br02, 500, False),
}


def _failing_copy(fmt: str, k: int, tmp: Path) -> Path:
    """The real file with k of its requests failed, written where the peer writes it."""
    src, fail, _, _ = CASES[fmt]
    text = src.read_text()
    doc = json.loads(text) if src.suffix == ".json" else yaml.safe_load(text)
    fail(doc, k)
    out = tmp / src.name
    if src.suffix == ".json":
        out.write_text(json.dumps(doc))
    else:
        out.write_text(yaml.safe_dump(doc))
    if fmt == "aiperf":
        lines = (src.parent / "profile_export.jsonl").read_text().splitlines()
        (tmp / "profile_export.jsonl").write_text("\n".join(_aiperf_records(lines, k)) + "\n")
    return out


def _import(path: Path, tmp: Path) -> tuple[BenchResult, list[Path]]:
    spec = BenchSpec.model_validate(
        {
            "endpoint": {"url": f"http://imported.invalid/{path.name}"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
        }
    )
    geometry = load_geometry("llama-3.1-8b")
    _, runs = read_runs(path)
    result = imported_result(runs, spec, geometry, get_accelerator("h100-sxm"), path)
    return result, write_imported_br02(runs, result, tmp)


def _terminal(result: BenchResult) -> str:
    console = Console(width=400, record=True)  # wide: a verdict is never split by a wrap
    with console.capture() as cap:
        console.print(ResultView(result))
    return cap.get()


def _html_headline(result: BenchResult) -> str:
    html = render_html(result)
    start = html.index('<section id="headline">')
    head = html[start : html.index("</section>", start)]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", head))


def _compare(result: BenchResult) -> tuple[str, Any]:
    comparison = compare_results([("imp", result), ("again", result)])
    console = Console(width=200, record=True)
    with console.capture() as cap:
        console.print(comparison_view(comparison))
    return cap.get(), comparison


def _k_over(ended: int, rate: float) -> int:
    """The fewest failures whose share of every ended request is over ``rate``."""
    k = 1
    while k / ended <= rate:
        k += 1
    return k


@pytest.mark.parametrize("fmt", list(CASES))
def test_failures_over_the_error_limit_fail_in_every_view(fmt: str, tmp_path: Path) -> None:
    k = _k_over(CASES[fmt][2], 0.05)  # vLLM, GuideLLM, AIPerf: 3 of 40 (7.5 %)
    # inference-perf reports failures beside its successes; the others within their total
    ended = CASES[fmt][2] + (k if fmt == "inference-perf" else 0)
    path = _failing_copy(fmt, k, tmp_path)
    result, br02_files = _import(path, tmp_path)
    [p] = result.probes[:1]
    assert p.requests_failed == k and p.requests_ok + p.requests_failed == ended
    assert not p.slo_passed and p.slo_detail is not None
    assert p.slo_detail.failed[0] == "error_probe" and p.slo_detail.error_probe
    assert p.slo_detail.error_rate == pytest.approx(k / ended)
    assert f"{k} of {ended} requests failed" in (p.slo_detail.reason or "")
    if CASES[fmt][3]:  # per-request records: the failures count against attainment
        assert p.attainment is not None and p.attainment <= (ended - k) / ended
    # the terminal: a failed probe never headlines "SLO goodput"
    text = _terminal(result)
    assert "SLO NOT met" in text and f"{k} of {ended} requests failed" in text
    assert not re.search(r"^SLO goodput", text, re.M)
    # the HTML report says the same, never "not met at any probed rate"
    head = _html_headline(result)
    assert "SLO NOT met" in head and f"{k} of {ended} requests failed" in head
    assert "at any probed rate" not in head and "SLO goodput" not in head
    if p.mbu is not None:  # the probe's MBU on its card, as the terminal shows it, never "—"
        assert fmt_pct(p.mbu) in head and fmt_pct(p.mbu) in text
    # compare: no SLO goodput for a failed probe; its warning gives the verdict
    shown, comparison = _compare(result)
    goodput_row = next(r for r in comparison.rows if r.name == "SLO goodput")
    assert goodput_row.values == (None, None)
    assert any("one probe, SLO NOT met" in w for w in comparison.warnings)
    assert "single stream" not in shown
    # BR0.2, written where the file has per-request records: the same failure count
    assert bool(br02_files) == CASES[fmt][3]
    for f in br02_files:
        report = BenchmarkReportV02.model_validate(yaml.safe_load(f.read_text()))
        req = report.results.request_performance.aggregate.requests  # type: ignore[union-attr]
        assert req is not None and req.failures == k and req.total == ended


@pytest.mark.parametrize("fmt", ["vllm", "guidellm", "aiperf"])
def test_failures_within_the_limit_leave_the_latency_verdict(fmt: str, tmp_path: Path) -> None:
    path = _failing_copy(fmt, 2, tmp_path)  # 2 of 40: 5 %, at the limit, not over it
    result, _ = _import(path, tmp_path)
    p = result.probes[0]
    assert p.slo_passed and p.slo_detail is not None and not p.slo_detail.error_probe
    assert p.attainment == pytest.approx(38 / 40)  # the failures still miss every limit
    assert "SLO met" in _terminal(result)


def test_vllm_run_keeps_the_peers_date_and_tool(tmp_path: Path) -> None:
    src = PEERS / "vllm_sim_detailed.json"
    shutil.copy(src, tmp_path / src.name)
    result, _ = _import(tmp_path / src.name, tmp_path)
    doc = json.loads(src.read_text())  # vLLM stamps `date` (YYYYmmdd-HHMMSS) as it saves
    assert result.ended_at is not None
    assert result.ended_at.strftime("%Y%m%d-%H%M%S") == doc["date"]
    span = (result.ended_at - result.started_at).total_seconds()
    assert span == pytest.approx(doc["duration"], abs=1e-6)
    assert result.target is not None and result.target.source_tool == "vllm bench serve"
    assert not any("gives no run date" in w for w in result.warnings)
    shown, _ = _compare(result)
    assert "concurrency 4" in shown and "single stream" not in shown


def test_inference_perf_without_a_date_or_timings_says_so(tmp_path: Path) -> None:
    result, _ = _import(PEERS / "inference_perf_lifecycle.yaml", tmp_path)
    assert any("gives no run date" in w for w in result.warnings)
    # no per-request timings: goodput is not measured, and no view calls it 0 tok/s
    assert result.probes[0].attainment is None
    assert "not measured (no per-request timings" in _terminal(result)
    assert "not measured (no per-request timings" in _html_headline(result)
    _, comparison = _compare(result)
    assert next(r for r in comparison.rows if r.name == "SLO goodput").values == (None, None)


def test_guidellm_and_aiperf_keep_their_run_start(tmp_path: Path) -> None:
    g = json.loads((PEERS / "guidellm_sim_benchmarks.json").read_text())
    result, _ = _import(PEERS / "guidellm_sim_benchmarks.json", tmp_path)
    assert result.started_at.timestamp() == pytest.approx(g["benchmarks"][0]["start_time"])
    a = json.loads((PEERS / "aiperf_sim" / "profile_export_aiperf.json").read_text())
    result, _ = _import(PEERS / "aiperf_sim" / "profile_export_aiperf.json", tmp_path)
    assert result.started_at.isoformat().startswith(a["start_time"][:19])
    assert copy.deepcopy(result).target is not None
