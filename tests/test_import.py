"""``tokenwatt import``: real result files of other tools read into TokenWatt's result, with
T and the percentiles equal to what the tool itself reported (tests/fixtures/peers/README.md
says where each file comes from), MBU with its flags, and ``report``/``compare`` on the
result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenwatt.importers import detect, read_runs
from tokenwatt.importers.base import ImportFileError
from tokenwatt.result import load_result

PEERS = Path(__file__).parent / "fixtures" / "peers"
LLMD = Path(__file__).parent / "fixtures" / "llm-d"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _doc(path: Path) -> Any:
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def test_inference_perf_lifecycle_report() -> None:
    path = PEERS / "inference_perf_lifecycle.yaml"
    doc = _doc(path)
    name, [run] = read_runs(path)
    s = doc["successes"]
    assert name == "inference-perf" and run.tool == "inference-perf"
    assert run.output_tokens_per_s == s["throughput"]["output_tokens_per_sec"]
    # 160 output tokens of 3 requests over the 2.48 s benchmark time: its own definition
    assert run.output_tokens_per_s == pytest.approx(3 * s["output_len"]["mean"] / 2.48)
    for ours, theirs in (("ttft_s", "time_to_first_token"), ("tpot_s", "time_per_output_token")):
        lat = getattr(run, ours)
        want = s["latency"][theirs]
        assert (lat.p50, lat.p90, lat.p99, lat.mean) == (
            want["median"],
            want["p90"],
            want["p99"],
            want["mean"],
        )
    assert run.rate_rps == 1.0 and run.requests_ok == 3
    assert any("whole benchmark time" in n for n in run.notes)


def test_guidellm_benchmarks_json_maps_its_itl_to_tpot() -> None:
    path = PEERS / "guidellm_report_v2.json"
    doc = _doc(path)
    name, runs = read_runs(path)
    assert name == "guidellm" and len(runs) == len(doc["benchmarks"]) == 2
    for run, b in zip(runs, doc["benchmarks"], strict=True):
        m = b["metrics"]
        assert run.tool_version == doc["metadata"]["guidellm_version"]
        assert run.output_tokens_per_s == m["output_tokens_per_second"]["successful"]["mean"]
        itl = m["inter_token_latency_ms"]["successful"]  # GuideLLM's ITL is our TPOT
        assert run.tpot_s.p99 == pytest.approx(itl["percentiles"]["p99"] / 1e3, rel=1e-12)
        assert run.tpot_s.p50 == pytest.approx(itl["median"] / 1e3, rel=1e-12)
        ttft = m["time_to_first_token_ms"]["successful"]
        assert run.ttft_s.p99 == pytest.approx(ttft["percentiles"]["p99"] / 1e3, rel=1e-12)
        assert run.itl_s.count == 0 and run.itl_s.p50 is None  # no per-chunk ITL there
        assert run.rate_rps == b["config"]["strategy"]["rate"]


def test_official_benchmark_report_example() -> None:
    path = LLMD / "br_v0_2_example.yaml"
    doc = _doc(path)
    name, [run] = read_runs(path)
    agg = doc["results"]["request_performance"]["aggregate"]
    assert name == "br02" and run.tool.startswith(doc["scenario"]["load"]["standardized"]["tool"])
    assert run.output_tokens_per_s == agg["throughput"]["output_token_rate"]["mean"]
    ttft = agg["latency"]["time_to_first_token"]
    scale = 1e-3 if ttft["units"] == "ms" else 1.0
    assert run.ttft_s.p99 == pytest.approx(ttft["p99"] * scale, rel=1e-12)


def test_unknown_and_broken_files_are_one_line(tmp_path: Path) -> None:
    other = tmp_path / "x.json"
    other.write_text('{"hello": 1}')
    assert detect({"hello": 1}) is None
    with pytest.raises(ImportFileError, match="not a format tokenwatt import knows"):
        read_runs(other)
    res = _cli("import", str(other), "--model", "llama-3.1-8b", "--hardware", "h100-sxm")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    broken = tmp_path / "v.json"
    broken.write_text('{"output_throughput": 1.0, "completed": 3}')
    with pytest.raises(ImportFileError, match="duration"):
        read_runs(broken)


def test_import_writes_a_result_report_and_compare_read(tmp_path: Path) -> None:
    out = tmp_path / "imp"
    res = _cli(
        "import",
        str(PEERS / "inference_perf_lifecycle.yaml"),
        "--model",
        "llama-3.1-8b",
        "--hardware",
        "h100-sxm",
        "-o",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    r = load_result(out)
    assert r.target is not None and r.target.kind == "imported"
    assert r.target.source_tool == "inference-perf"
    assert r.target.source_file == "inference_perf_lifecycle.yaml"
    p = r.probes[0]
    assert p.mbu is not None and p.mbu_detail is not None
    # open loop without per-request times: the decode-only figure, its assumptions in notes
    assert p.mbu == p.mbu_detail.mbu
    assert any("only the decode-only" in n for n in p.mbu_detail.notes)
    assert any("τ taken as TPOT" in n for n in p.mbu_detail.notes)
    assert "low_load_busy_bias" in p.flags
    assert any("whole benchmark time" in w for w in r.warnings)
    assert _cli("report", str(out)).returncode == 0
    assert (out / "report.html").exists()
    assert _cli("compare", str(out), str(out)).returncode == 0
