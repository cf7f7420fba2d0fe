"""TokenWatt's Benchmark Reports as llm-d reads them: named as its readers glob, valid against
the official v0.2 and v0.2.1 schemas (tests/fixtures/llm-d, generated from llm-d-benchmark's
pydantic models), with rate_qps in requests/s, output_token_rate = T and the sections TokenWatt
measures; the official examples load in TokenWatt's model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tokenwatt.report.br02 import BenchmarkReportV02
from tokenwatt.result import load_result

pytestmark = pytest.mark.timeout(120)

OFFICIAL = Path(__file__).parent / "fixtures" / "llm-d"
SPEC = """
name: br-official
model: {source: qwen3-30b-a3b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim, api: API}
sim: {efficiency: 0.5}
workload: {input_tokens: 64, output_tokens: 16, seed: 4SESSIONS}
slo: {ttft_ms: 2000, tpot_ms: 200}
search: {probe: {warmup_s: 0.5, min_duration_s: 2.0, min_requests: 5}}
"""
SESSIONS = ", sessions: {turns: 3, think_time_s: {kind: fixed, value_s: 0.1}}"


def _json(doc: Any) -> Any:
    return json.loads(json.dumps(doc, default=str))  # dates as the ISO strings YAML held


def official_errors(doc: dict[str, Any], version: str) -> list[str]:
    """The official model's schema errors for ``doc`` read as that version."""
    name = "br_v0_2_1_model_schema.json" if version == "0.2.1" else "br_v0_2_model_schema.json"
    schema = json.loads((OFFICIAL / name).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [e.message for e in validator.iter_errors(_json({**doc, "version": version}))]


@pytest.mark.parametrize("example", ["br_v0_2_example.yaml", "br_v0_2_1_example.yaml"])
def test_official_examples_load_in_tokenwatt_s_model(example: str) -> None:
    doc = yaml.safe_load((OFFICIAL / example).read_text())
    rep = BenchmarkReportV02.model_validate(doc)
    assert rep.results.request_performance is not None
    agg = rep.results.request_performance.aggregate
    assert agg is not None and agg.throughput is not None
    assert agg.throughput.request_rate is not None  # the official key, not requests_rate
    assert official_errors(doc, str(doc["version"])) == []  # the fixtures agree with each other


def test_the_old_misspelt_key_is_refused_by_both() -> None:
    doc = yaml.safe_load((OFFICIAL / "br_v0_2_example.yaml").read_text())
    tp = doc["results"]["request_performance"]["aggregate"]["throughput"]
    tp["requests_rate"] = tp.pop("request_rate")
    assert official_errors(doc, "0.2")
    with pytest.raises(ValueError, match="requests_rate"):
        BenchmarkReportV02.model_validate(doc)


def _probe(tmp_path: Path, *, sessions: bool) -> Path:
    spec = SPEC.replace("API", "chat" if sessions else "completions")
    spec = spec.replace("SESSIONS", SESSIONS if sessions else "")
    path = tmp_path / "spec.yaml"
    path.write_text(spec)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "probe", str(path), "--rate", "2", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return out


@pytest.mark.parametrize("sessions", [False, True])
def test_probe_writes_a_report_llm_d_reads(tmp_path: Path, sessions: bool) -> None:
    out = _probe(tmp_path, sessions=sessions)
    files = sorted(out.glob("benchmark_report_v0.2,_*.yaml"))  # llm-d-benchmark's glob
    assert [f.name for f in files] == ["benchmark_report_v0.2,_probe-01.yaml"]
    doc = yaml.safe_load(files[0].read_text())
    assert official_errors(doc, "0.2") == [] and official_errors(doc, "0.2.1") == []
    rep = BenchmarkReportV02.model_validate(doc)
    probe = load_result(out).probes[0]
    agg = rep.results.request_performance.aggregate  # type: ignore[union-attr]
    assert agg is not None and agg.throughput is not None and agg.requests is not None
    out_rate = agg.throughput.output_token_rate
    assert out_rate is not None and out_rate.mean == pytest.approx(probe.output_tokens_per_s)
    load = rep.scenario.load  # type: ignore[union-attr]
    assert load is not None
    # rate_qps is requests/s: the offered rate, or in a session run the window's requests/s
    assert probe.requests_counted is not None
    want = probe.requests_counted / probe.window_s if sessions else 2.0
    assert load.standardized.rate_qps == pytest.approx(want)
    if sessions:
        assert probe.rate_unit == "sessions" and load.standardized.rate_qps > 2.0
        s = doc["results"]["session_performance"]["sessions"]
        assert probe.sessions is not None and s["total"] == probe.sessions.sessions_started
    stack = doc["scenario"]["stack"][0]
    assert stack["standardized"]["kind"] == "inference_engine"
    assert stack["standardized"]["tool"] == "tokenwatt-sim"
    comp = doc["results"]["observability"]["components"][0]
    assert comp["component_label"] == stack["metadata"]["label"]
    assert probe.engine is not None
    assert comp["aggregate"]["kv_cache_usage"]["mean"] == pytest.approx(probe.engine.kv_usage_mean)
    assert comp["aggregate"]["kv_cache_usage"]["units"] == "fraction"
