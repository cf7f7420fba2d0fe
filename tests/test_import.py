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
    assert p.mbu_detail is not None
    # open loop without per-request times: no headline (idle share unknown), the decode-only
    # figure under the name `tokenwatt mbu` and `probe` give it, its assumptions in notes
    assert p.mbu is None and p.mbu_detail.mbu is None
    assert p.mbu_detail.mbu_decode_only is not None and p.mbu_detail.mbu_decode_only > 0
    assert any("only the decode-only" in n for n in p.mbu_detail.notes)
    # its file has a pooled mean ITL (per chunk): τ from it, flagged, not from TPOT
    assert any("τ taken as the pooled mean ITL" in n for n in p.mbu_detail.notes)
    assert p.itl_token_weighted_s == r.probes[0].itl_s.mean
    assert {"tau_from_pooled_itl", "kv_lengths_from_means"} <= set(p.flags)
    assert any("whole benchmark time" in w for w in r.warnings)
    assert _cli("report", str(out)).returncode == 0
    assert (out / "report.html").exists()
    assert _cli("compare", str(out), str(out)).returncode == 0


# --- files the peers wrote against `tokenwatt sim` here (fixtures/peers/README.md) -------------


def _guidellm_printed(section: str) -> list[str]:
    """The cells of the first 'concurrent@4' row under a table header of GuideLLM's console."""
    lines = (PEERS / "guidellm_sim_console.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if section in line)
    row = next(line for line in lines[start:] if line.startswith("| concurrent@4"))
    return [c.strip() for c in row.strip("|").split("|")]


def _num(cell: str) -> float:
    return float(cell.split("±", maxsplit=1)[0].strip().rstrip("*"))


def test_guidellm_run_equals_what_guidellm_printed() -> None:
    _, [run] = read_runs(PEERS / "guidellm_sim_benchmarks.json")
    lat = _guidellm_printed("Request Latency Statistics")
    # columns: latency s (mean, mdn, p95), TTFT ms (…), TTFOT ms (…), ITL ms (…), TPOT ms (…)
    assert round(run.ttft_s.mean * 1e3, 1) == _num(lat[4])  # type: ignore[operator]
    assert round(run.ttft_s.p50 * 1e3, 1) == _num(lat[5])  # type: ignore[operator]
    assert round(run.ttft_s.p95 * 1e3, 1) == _num(lat[6])  # type: ignore[operator]
    # GuideLLM's "ITL" column is (E2E − TTFT)/(n − 1): TokenWatt's TPOT
    assert round(run.tpot_s.mean * 1e3, 1) == _num(lat[10])  # type: ignore[operator]
    assert round(run.tpot_s.p50 * 1e3, 1) == _num(lat[11])  # type: ignore[operator]
    assert round(run.tpot_s.p95 * 1e3, 1) == _num(lat[12])  # type: ignore[operator]
    tput = _guidellm_printed("Server Throughput Statistics")
    # columns: concurrency mdn, mean; requests/s; input, output, total tokens/s
    assert round(run.output_tokens_per_s, 1) == _num(tput[5])
    assert run.concurrency == 4 and run.tool_version == "0.8.1"


def test_guidellm_per_request_records_agree_with_its_summary() -> None:
    """τ and the lengths come from GuideLLM's per-request records; its means are theirs exactly
    and its percentiles are order statistics of them (not interpolated, unlike TokenWatt's)."""
    doc = _doc(PEERS / "guidellm_sim_benchmarks.json")
    _, [run] = read_runs(PEERS / "guidellm_sim_benchmarks.json")
    reqs = doc["benchmarks"][0]["requests"]["successful"]
    assert run.pairs == [(r["prompt_tokens"], r["output_tokens"]) for r in reqs]
    ttfts = [r["time_to_first_token_ms"] for r in reqs]
    assert run.ttft_s.mean == pytest.approx(sum(ttfts) / len(ttfts) / 1e3, rel=1e-12)
    for q in (run.ttft_s.p50, run.ttft_s.p90, run.ttft_s.p99):
        assert q is not None and round(q * 1e3, 9) in {round(t, 9) for t in ttfts}
    decode_s = sum(r["request_latency"] - r["time_to_first_token_ms"] / 1e3 for r in reqs)
    tau = decode_s / sum(r["output_tokens"] - 1 for r in reqs)
    assert run.itl_token_weighted_s == pytest.approx(tau, rel=1e-12)


def _aiperf_printed(metric: str) -> list[float]:
    """avg, min, max, p99, p90, p50 of one row of AIPerf's console table."""
    for line in (PEERS / "aiperf_sim" / "console.txt").read_text().splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells and cells[0] == metric:
            return [float(c.replace(",", "")) for c in cells[1:7] if c != "N/A"]
    raise AssertionError(f"{metric} not in AIPerf's console")


def test_aiperf_run_equals_what_aiperf_printed() -> None:
    name, [run] = read_runs(PEERS / "aiperf_sim" / "profile_export_aiperf.json")
    assert name == "aiperf" and run.tool_version == "0.13.0" and run.concurrency == 4
    assert (
        round(run.output_tokens_per_s, 2)
        == _aiperf_printed("Output Token Throughput (tokens/sec)")[0]
    )
    for ours, row in (
        ("ttft_s", "Time to First Token (ms)"),
        ("tpot_s", "Inter Token Latency (ms)"),
    ):
        lat = getattr(run, ours)
        avg, _, mx, p99, p90, p50 = _aiperf_printed(row)
        got = [lat.mean, lat.max, lat.p99, lat.p90, lat.p50]
        assert [round(v * 1e3, 2) for v in got] == [avg, mx, p99, p90, p50]


def test_aiperf_per_request_records_reproduce_its_percentiles() -> None:
    """From profile_export.jsonl alone, TokenWatt's interpolated percentiles give AIPerf's own
    summary figures (both interpolate linearly), and τ is Σ(E2E − TTFT) ÷ Σ(n − 1)."""
    from tokenwatt.importers.aiperf import records_beside
    from tokenwatt.metrics.stats import summarize

    _, [run] = read_runs(PEERS / "aiperf_sim" / "profile_export_aiperf.json")
    recs = records_beside(PEERS / "aiperf_sim" / "profile_export_aiperf.json")
    assert recs is not None and len(recs) == run.requests_ok == 40
    ttft = summarize([r["metrics"]["time_to_first_token"]["value"] / 1e3 for r in recs])
    for field in ("mean", "p50", "p90", "p95", "p99", "max"):
        assert getattr(ttft, field) == pytest.approx(getattr(run.ttft_s, field), rel=1e-9)
    m = [r["metrics"] for r in recs]
    decode = sum(x["request_latency"]["value"] - x["time_to_first_token"]["value"] for x in m)
    tau = decode / 1e3 / sum(x["usage_completion_tokens"]["value"] - 1 for x in m)
    assert run.itl_token_weighted_s == pytest.approx(tau, rel=1e-12)
    assert run.pairs is not None and set(run.pairs) == {(128, 64)}


@pytest.mark.parametrize(
    "path",
    [
        "guidellm_sim_benchmarks.json",
        "aiperf_sim/profile_export_aiperf.json",
        "vllm_sim_detailed.json",
    ],
)
def test_imported_mbu_agrees_with_tokenwatt_s_own_probe(path: str) -> None:
    """The same sim served TokenWatt's probe (concurrency 4, 40 requests, 128 → 64 tokens) and
    the peer's run; the imported MBU is within one point of the probe's (the clients' τ differ
    by their own timing, fixtures/peers/README.md)."""
    from tokenwatt.geometry import load_geometry
    from tokenwatt.hardware import get_accelerator
    from tokenwatt.importers.to_result import imported_result
    from tokenwatt.spec import parse_spec

    _, runs = read_runs(PEERS / path)
    spec = parse_spec(
        {
            "name": "imported",
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
            "endpoint": {"url": "http://127.0.0.1:18626"},
        },
        source="test",
    )
    result = imported_result(
        runs, spec, load_geometry("llama-3.1-8b"), get_accelerator("h100-sxm"), PEERS / path
    )
    p = result.probes[0]
    own = load_result(PEERS / "tokenwatt_sim_probe").probes[0]  # TokenWatt's probe, same sim
    assert own.mbu is not None and own.concurrency == 4
    assert p.mbu is not None and abs(p.mbu - own.mbu) < 0.01
    assert p.attainment == 1.0 and p.slo_passed


def _vllm_printed() -> dict[str, float]:
    """'Name (unit): value' lines of vllm bench serve's printed result."""
    out = {}
    for line in (PEERS / "vllm_sim_console.txt").read_text().splitlines():
        name, sep, value = line.partition(":")
        if sep and value.strip().replace(".", "", 1).isdigit():
            out[name.strip()] = float(value)
    return out


def test_vllm_run_equals_what_vllm_printed() -> None:
    name, [run] = read_runs(PEERS / "vllm_sim_detailed.json")
    printed = _vllm_printed()
    assert name == "vllm" and run.concurrency == 4 and run.rate_rps is None
    assert round(run.output_tokens_per_s, 2) == printed["Output token throughput (tok/s)"]
    for ours, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL")):
        lat = getattr(run, ours)
        assert round(lat.mean * 1e3, 2) == printed[f"Mean {label} (ms)"]
        for q in (50, 90, 95, 99):
            assert round(getattr(lat, f"p{q}") * 1e3, 2) == printed[f"P{q} {label} (ms)"]


def test_vllm_detailed_arrays_reproduce_its_percentiles() -> None:
    """From the per-request arrays alone, TokenWatt's TPOT definition and interpolated
    percentiles give vLLM's own TPOT summary (the same definition and method)."""
    from tokenwatt.metrics.stats import summarize

    doc = _doc(PEERS / "vllm_sim_detailed.json")
    _, [run] = read_runs(PEERS / "vllm_sim_detailed.json")
    tpots = [
        (e2e - ttft) / (n - 1)
        for ttft, e2e, n in zip(doc["ttfts"], doc["latencies"], doc["output_lens"], strict=True)
    ]
    mine = summarize(tpots)
    for q in ("mean", "p50", "p90", "p95", "p99"):
        assert getattr(mine, q) == pytest.approx(getattr(run.tpot_s, q), rel=1e-9)
    assert run.pairs is not None and len(run.pairs) == doc["completed"] == 40


def test_vllm_without_details_uses_the_summary_and_says_so(tmp_path: Path) -> None:
    doc = _doc(PEERS / "vllm_sim_detailed.json")
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "generated_texts"):
        doc.pop(key)
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    _, [run] = read_runs(path)
    assert run.pairs is None and run.itl_token_weighted_s is None
    assert run.mean_output_tokens == 64 and run.mean_input_tokens == 128
    assert any("--save-detailed" in n for n in run.notes)
