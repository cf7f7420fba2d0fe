"""`tokenwatt hardware --measure`: the measured streaming-read bandwidth, printed with the
spec lines that use it, and those lines giving an accelerator labelled measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tokenwatt.hardware.measure import measure_read_bandwidth
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


def test_cli_json() -> None:
    res = _cli("--measure", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["nbytes"] == 256 * 2**20 and data["repeats"] == 5
    assert data["bandwidth_bytes_per_s"] == pytest.approx(data["nbytes"] / data["best_s"])


def test_rated_custom_is_not_labelled_measured() -> None:
    custom = {"bandwidth_bytes_per_s": 1e12, "memory_bytes": 8e10}
    hw = HardwareSection.model_validate({"accelerator": None, "custom": custom})
    assert resolve_accelerator(hw).confidence != "measured"
