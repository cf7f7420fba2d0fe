"""Real public power logs read by ``power.logs`` (tests/fixtures/power_logs/README.md gives
their sources and licences): MLPerf's PTDaemon sample log (``spl.txt``) and an H100's
``nvidia-smi dmon`` log of a vLLM run. The energy over a stated window is checked against a
trapezoid computed here from each file's own text, independently of ``power.logs`` and
``power.integrate``; the PTDaemon mean power against MLPerf's own rule (the mean of the
analyser's samples inside the window, as its compliance checker takes it)."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest

from tokenwatt.cli import main as cli_main
from tokenwatt.power.logs import (
    PowerLogError,
    log_energy,
    logs_beside,
    merge_logs,
    parse_power_log,
    read_power_log,
)

LOGS = Path(__file__).parent / "fixtures" / "power_logs"
SPL = LOGS / "mlperf_ptdaemon_spl.txt"
H100 = LOGS / "memory_gap_h100_llama2_7b"
DMON = H100 / "metrics_gpu_device_nvidia_smi_dom_0_server_0.csv"
# The stated window: 90 s inside the 132 s the analyser logged (10:21:51.496 – 10:24:03.515)
WINDOW = (
    datetime(2020, 12, 23, 10, 22, 0, tzinfo=UTC),
    datetime(2020, 12, 23, 10, 23, 30, tzinfo=UTC),
)


def _samples() -> list[tuple[float, float]]:
    """(unix s, W) from the file's text: ``Time,<MM-DD-YYYY HH:MM:SS.mmm>,Watts,<W>,…``."""
    out = []
    for line in SPL.read_text().splitlines():
        f = line.split(",")
        stamp = datetime.strptime(f[1], "%m-%d-%Y %H:%M:%S.%f").replace(tzinfo=UTC)
        out.append((stamp.timestamp(), float(f[3])))
    return out


def _trapezoid_j(samples: list[tuple[float, float]], a: float, b: float) -> float:
    """∫ P dt over [a, b], P linear between samples: each segment clipped to the window, its
    ends interpolated, then the trapezoid of the clipped piece."""
    total = 0.0
    for (t0, p0), (t1, p1) in pairwise(samples):
        lo, hi = max(t0, a), min(t1, b)
        if hi <= lo:
            continue
        slope = (p1 - p0) / (t1 - t0)
        total += (p0 + slope * (lo - t0) + p0 + slope * (hi - t0)) / 2 * (hi - lo)
    return total


def _ns(t: datetime) -> int:
    return round(t.timestamp() * 1e9)


def test_ptdaemon_log_energy_matches_the_hand_trapezoid() -> None:
    log = read_power_log(SPL)
    assert (log.source, log.kind, log.scope) == ("ptdaemon", "power_sampler", "wall")
    samples = _samples()
    assert len(log.channels["analyser"][0]) == len(samples) == 133
    a, b = (t.timestamp() for t in WINDOW)
    want = _trapezoid_j(samples, a, b)
    report, audit = log_energy(log, _ns(WINDOW[0]), _ns(WINDOW[1]))
    scope = report.scopes["wall"]
    assert report.primary_scope == "wall"
    assert scope.energy_j == pytest.approx(want, rel=0.01)
    assert want == pytest.approx(3400.0, abs=1.0)  # the figure docs/validation.md records
    assert audit.method == "sampled_power" and audit.valid, audit.verdict
    # MLPerf's rule: the mean of the samples strictly inside the window
    inside = [w for t, w in samples if a < t < b]
    assert scope.mean_power_w == pytest.approx(sum(inside) / len(inside), rel=0.01)


def test_ptdaemon_whole_log_and_its_bad_lines() -> None:
    log = read_power_log(SPL)
    first, last = log.span_ns
    report, _ = log_energy(log, first, last)
    samples = _samples()
    want = _trapezoid_j(samples, samples[0][0], samples[-1][0])
    assert report.primary.energy_j == pytest.approx(want, rel=0.01)  # type: ignore[union-attr]
    # an analyser off (-1 W) is skipped, as MLPerf's checker skips it
    lines = SPL.read_text().splitlines()
    cells = lines[5].split(",")
    cells[3] = "-1.000000"
    off = parse_power_log("\n".join([*lines[:5], ",".join(cells), *lines[6:]]))
    assert len(off.channels["analyser"][0]) == 132
    with pytest.raises(PowerLogError, match="line 2"):
        parse_power_log(lines[0] + "\nTime,2020-12-23 10:21:52,Watts,33.5,Volts,228\n")


def test_wall_and_gpu_logs_are_not_summed() -> None:
    wall = read_power_log(SPL)
    gpu = parse_power_log(
        "timestamp, power.draw [W]\n"
        "2020/12/23 10:22:00.000, 300 W\n2020/12/23 10:22:01.000, 310 W\n"
    )
    with pytest.raises(PowerLogError, match="wall"):
        merge_logs([wall, gpu])


def _engine_span() -> tuple[float, float, float]:
    """The engine's generating span on the logger's clock, from the vLLM counters logged beside
    the power (first sample with generated tokens, first at the final count), and the tokens
    generated over it."""
    with (H100 / "metrics_engine_server_0.csv").open() as f:
        rows = [
            (float(r["time [s]"]), float(r["generation_tokens_total"])) for r in csv.DictReader(f)
        ]
    final = rows[-1][1]
    first = next((t, v) for t, v in rows if v > 0)
    last = next(t for t, v in rows if v == final)
    return first[0], last, final - first[1]


def test_h100_dmon_log_energy_matches_the_hand_trapezoid() -> None:
    """Llama-2-7B on vLLM, one H100 64 GB, 2,000 ShareGPT prompts at max-num-seqs 128: the
    dmon log's energy over the engine's generating span."""
    log = read_power_log(DMON)
    assert (log.source, log.kind, log.relative) == ("nvidia-smi dmon", "power_sampler", True)
    lines = DMON.read_text().splitlines()[2:]  # after the header and the units row
    samples = [(float(r.split(",")[0]), float(r.split(",")[2])) for r in lines]
    a, b, tokens = _engine_span()
    want = _trapezoid_j(samples, a, b)
    report, audit = log_energy(log, round(a * 1e9), round(b * 1e9), tdp_w=700.0)
    got = report.primary.energy_j  # type: ignore[union-attr]
    assert got == pytest.approx(want, rel=0.01)
    assert want == pytest.approx(78_354, abs=5)  # the figure docs/validation.md records
    assert audit.valid, audit.verdict
    assert tokens / got == pytest.approx(8.23, abs=0.01)  # tok/J, GPU only
    # the client's own count over its run agrees with the engine's over this span
    client = json.loads(next(H100.glob("openai-*.json")).read_text())
    assert tokens == pytest.approx(client["total_output_tokens"], rel=0.005)


def test_a_log_without_a_wall_clock_is_never_placed_on_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = read_power_log(DMON)
    with pytest.raises(PowerLogError, match="seconds since its logger started"):
        merge_logs([log])
    result = next(H100.glob("openai-*.json"))
    args = ["import", str(result), "--model", "llama-3.1-8b", "--hardware", "h100-sxm-64gb"]
    args += ["--power", str(DMON), "-o", str(tmp_path / "o")]
    monkeypatch.setattr("sys.argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli_main()
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "not wall-clock" in err
    assert len(err.strip().splitlines()) == 1
    for f in H100.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    beside = logs_beside(tmp_path / "openai-infqps-llama-2-7b-20250218-165556.json")
    assert beside == []
