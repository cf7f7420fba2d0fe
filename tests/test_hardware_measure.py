"""`tokenwatt hardware --measure`: the measured streaming-read bandwidth, printed with the
spec lines that use it, and those lines giving an accelerator labelled measured."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest
import yaml

from tokenwatt.hardware.measure import ReadBandwidth, measure_read_bandwidth
from tokenwatt.load.target import resolve_accelerator
from tokenwatt.spec.hardware import HardwareSection


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", "hardware", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_measure_is_bytes_over_the_best_time() -> None:
    m = measure_read_bandwidth(16 * 2**20, repeats=3)
    assert m.nbytes == 16 * 2**20 and m.repeats == 3
    assert m.bandwidth_bytes_per_s == pytest.approx(m.nbytes / m.best_s)
    # a sum over 16 MiB takes more than a microsecond and less than a minute on any machine
    assert 1e-6 < m.best_s < 60
    with pytest.raises(ValueError, match="nbytes"):
        measure_read_bandwidth(4)


def test_cli_prints_the_figure_and_spec_lines_that_label_it_measured() -> None:
    res = _cli("--measure")
    assert res.returncode == 0, res.stderr
    first, _, rest = res.stdout.partition("\n")
    assert first.startswith("measured streaming-read bandwidth: ") and "GB/s" in first
    snippet = rest.split("in the spec:\n", 1)[1]
    hw = HardwareSection.model_validate(yaml.safe_load(snippet)["hardware"])
    assert hw.custom is not None and hw.custom.measured
    acc = resolve_accelerator(hw)
    assert acc.confidence == "measured" and acc.source.startswith("measured")
    gbs = float(first.split(": ")[1].split(" GB/s")[0])
    assert acc.bandwidth_bytes_per_s / 1e9 == pytest.approx(gbs, abs=0.01)
    # when, how and how much the runs varied: printed, and carried into the accelerator
    c = hw.custom
    assert c.measured_at is not None and c.measured_method is not None
    assert c.measured_spread is not None and 0 <= c.measured_spread < 1
    assert f"at {c.measured_at}" in first and c.measured_method in first
    # printed to 0.1 % from the measured spread, carried to 4 decimals: the two roundings of
    # one figure (0.23953 prints 24.0 % and carries 0.2395, whose own 0.1 % reads 23.9 %)
    printed = float(first.split("the slowest run ")[1].split("% below the best")[0]) / 100
    assert printed == pytest.approx(c.measured_spread, abs=0.0005 + 0.00005)
    assert acc.source == (
        f"measured (tokenwatt hardware --measure at {c.measured_at}; {c.measured_method}; "
        f"the slowest run {c.measured_spread:.1%} below the best)"
    )
    at = dt.datetime.fromisoformat(c.measured_at)
    assert at.tzinfo is not None and abs(dt.datetime.now(dt.UTC) - at) < dt.timedelta(minutes=5)


def test_cli_json() -> None:
    res = _cli("--measure", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["nbytes"] == 256 * 2**20 and data["repeats"] == 5
    assert data["bandwidth_bytes_per_s"] == pytest.approx(data["nbytes"] / data["best_s"])
    assert len(data["times_s"]) == 5 and min(data["times_s"]) == pytest.approx(data["best_s"])
    assert data["spread"] == pytest.approx(1 - data["best_s"] / max(data["times_s"]))
    assert data["measured_at"] and "best of 5, one thread" in data["method"]


def test_spread_is_the_slowest_runs_shortfall_by_hand() -> None:
    # runs of 0.10, 0.125 and 0.20 s over 1 GB: 10 GB/s at best, the slowest 5 GB/s: 50 % below
    m = ReadBandwidth(1e10, 10**9, 3, 0.10, (0.125, 0.10, 0.20), "2026-01-01T00:00:00+00:00")
    assert m.spread == pytest.approx(0.5)
    assert m.method == "numpy sum over 954 MiB of float64, best of 3, one thread"


def test_views_say_a_measured_bandwidth_is_measured() -> None:
    """The MBU inputs' N·BW row names where a measured denominator came from, not "rated"."""
    import html
    import io
    from pathlib import Path

    from rich.console import Console

    from tokenwatt.report.html import render_html
    from tokenwatt.report.terminal import mbu_block
    from tokenwatt.result import BenchResult

    fixture = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"
    data = json.loads(fixture.read_text("utf-8"))
    source = "measured (tokenwatt hardware --measure at 2026-01-01T00:00:00+00:00; x)"
    data["accelerator"].update(confidence="measured", source=source)
    result = BenchResult.model_validate(data)
    buf = io.StringIO()
    Console(file=buf, width=250, color_system=None).print(mbu_block(result))
    row = next(x for x in buf.getvalue().splitlines() if x.startswith("N·BW"))
    assert source in row and "rated" not in row
    page = render_html(result).split('<script type="application/json"', 1)[0]
    assert "measured bandwidth / GPU" in page and "rated bandwidth / GPU" not in page
    assert f"2 GPU(s), {html.escape(source)}" in page


def test_rated_custom_is_not_labelled_measured() -> None:
    custom = {"bandwidth_bytes_per_s": 1e12, "memory_bytes": 8e10}
    hw = HardwareSection.model_validate({"accelerator": None, "custom": custom})
    assert resolve_accelerator(hw).confidence != "measured"
