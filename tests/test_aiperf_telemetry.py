"""An AIPerf run with GPU telemetry imported with its energy: AIPerf 0.13.0's own
``profile_export_aiperf.json`` and ``gpu_telemetry_export.jsonl`` (fixtures/peers/
aiperf_telemetry/README.md says how they were made), the telemetry found beside the summary
by ``tokenwatt import``. Three independent truths: the closed-form energy of the exporter
stand-in AIPerf scraped (``dcgm_stub.py``), a trapezoid of the power samples in the JSONL
computed here, and AIPerf's own energy and tokens-per-joule figures in its summary."""

from __future__ import annotations

import importlib.util
import json
import shutil
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from types import ModuleType

import pytest

from tokenwatt.cli import main as cli_main
from tokenwatt.power.logs import PowerLogError, log_energy, parse_power_log
from tokenwatt.result import load_result

RUN = Path(__file__).parent / "fixtures" / "peers" / "aiperf_telemetry"
SUMMARY = RUN / "profile_export_aiperf.json"
TELEMETRY = RUN / "gpu_telemetry_export.jsonl"


def _stub() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dcgm_stub", RUN / "dcgm_stub.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _span_s() -> tuple[float, float]:
    """AIPerf's profiling span (its naive ISO times, written on a UTC machine)."""
    doc = json.loads(SUMMARY.read_text())
    a, b = (datetime.fromisoformat(doc[k]).replace(tzinfo=UTC) for k in ("start_time", "end_time"))
    return a.timestamp(), b.timestamp()


def _power_trapezoid_j(a: float, b: float) -> float:
    """Σ over GPUs of ∫ P dt over [a, b] from the JSONL's power samples, linear between
    samples, segments clipped to the window."""
    series: dict[str, list[tuple[float, float]]] = {}
    for line in TELEMETRY.read_text().splitlines():
        rec = json.loads(line)
        w = rec["telemetry_data"]["nvidia_power_usage"]
        series.setdefault(rec["gpu_uuid"], []).append((rec["timestamp_ns"] / 1e9, w))
    total = 0.0
    for samples in series.values():
        for (t0, p0), (t1, p1) in pairwise(samples):
            lo, hi = max(t0, a), min(t1, b)
            if hi > lo:
                slope = (p1 - p0) / (t1 - t0)
                total += (2 * p0 + slope * (lo - t0 + hi - t0)) / 2 * (hi - lo)
    return total


def test_aiperf_run_imports_with_tokens_per_joule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for f in (SUMMARY, TELEMETRY):
        shutil.copy(f, tmp_path / f.name)
    out = tmp_path / "imp"
    args = ["import", str(tmp_path / SUMMARY.name), "--model", "llama-3.1-8b"]
    args += ["--hardware", "h100-sxm", "-o", str(out)]
    monkeypatch.setattr("sys.argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli_main()
    err = capsys.readouterr().err
    assert ended.value.code == 0, err
    assert "gpu_telemetry_export.jsonl" in err  # found beside, said on stderr
    energy = load_result(out).probes[0].energy
    assert energy is not None and energy.source == "aiperf" and energy.kind == "energy_counter"
    a, b = _span_s()
    stub = _stub()
    truth_j = sum(stub.energy_j(i, b) - stub.energy_j(i, a) for i in (0, 1))
    assert energy.energy_j == pytest.approx(truth_j, rel=0.01)
    assert energy.energy_j == pytest.approx(_power_trapezoid_j(a, b), rel=0.01)
    doc = json.loads(SUMMARY.read_text())
    tokens = doc["total_osl"]["avg"]  # 2,560 output tokens over the span
    assert energy.output_tokens == tokens
    assert energy.tokens_per_joule == pytest.approx(tokens / truth_j, rel=0.01)
    # AIPerf's own figures (its counter delta from the scrape before the span to the last)
    assert energy.energy_j == pytest.approx(doc["nvidia_total_gpu_energy"]["avg"], rel=0.01)
    own_tpj = doc["nvidia_output_tokens_per_joule"]["avg"]
    assert energy.tokens_per_joule == pytest.approx(own_tpj, rel=0.01)
    assert energy.audit[0].valid and len(energy.audit[0].devices) == 2


def test_without_the_telemetry_file_aiperf_own_figure_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--no-power (or a summary alone): AIPerf's own mean GPU power over its phase gives
    tokens/J = T ÷ P, which is AIPerf's own tokens per joule."""
    shutil.copy(SUMMARY, tmp_path / SUMMARY.name)
    shutil.copy(TELEMETRY, tmp_path / TELEMETRY.name)
    out = tmp_path / "imp"
    args = ["import", str(tmp_path / SUMMARY.name), "--model", "llama-3.1-8b"]
    args += ["--hardware", "h100-sxm", "--no-power", "-o", str(out)]
    monkeypatch.setattr("sys.argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli_main()
    assert ended.value.code == 0, capsys.readouterr().err
    energy = load_result(out).probes[0].energy
    doc = json.loads(SUMMARY.read_text())
    assert energy is not None and energy.source == "AIPerf" and not energy.audit
    assert energy.mean_power_w == pytest.approx(doc["nvidia_average_gpu_power"]["avg"])
    own_tpj = doc["nvidia_output_tokens_per_joule"]["avg"]
    assert energy.tokens_per_joule == pytest.approx(own_tpj, rel=1e-6)
    assert any("own energy figure" in w for w in energy.warnings)


def test_early_aiperf_field_names_and_power_only_records() -> None:
    """AIPerf before its vendor-prefixed names wrote ``dcgm_url``, ``gpu_power_usage`` and
    ``energy_consumption`` (MJ): read the same; without counters, the power is integrated."""
    old, power_only = [], []
    for line in TELEMETRY.read_text().splitlines():
        rec = json.loads(line)
        rec["dcgm_url"] = rec.pop("telemetry_source_url")
        data = rec["telemetry_data"]
        data["gpu_power_usage"] = data.pop("nvidia_power_usage")
        data["energy_consumption"] = data.pop("nvidia_energy_consumption")
        old.append(json.dumps(rec))
        del data["energy_consumption"]
        power_only.append(json.dumps(rec))
    a, b = (round(t * 1e9) for t in _span_s())
    new_j = log_energy(parse_power_log(TELEMETRY.read_text()), a, b)[0].primary.energy_j  # type: ignore[union-attr]
    old_log = parse_power_log("\n".join(old))
    assert old_log.kind == "energy_counter"
    assert log_energy(old_log, a, b)[0].primary.energy_j == pytest.approx(new_j, rel=1e-9)  # type: ignore[union-attr]
    sampled = parse_power_log("\n".join(power_only))
    assert sampled.kind == "power_sampler"
    got = log_energy(sampled, a, b)[0].primary.energy_j  # type: ignore[union-attr]
    assert got == pytest.approx(_power_trapezoid_j(a / 1e9, b / 1e9), rel=0.01)


def test_a_bad_telemetry_line_is_named() -> None:
    lines = TELEMETRY.read_text().splitlines()
    with pytest.raises(PowerLogError, match="line 3 is not JSON"):
        parse_power_log("\n".join([*lines[:2], '{"timestamp_ns": 1, oops', *lines[3:]]), "t.jsonl")
    with pytest.raises(PowerLogError, match="line 2 lacks timestamp_ns"):
        parse_power_log("\n".join([lines[0], '{"timestamp_ns": "x", "telemetry_data": {}}']))
