"""A real public power log read by ``power.logs``: MLPerf's PTDaemon sample log (``spl.txt``,
tests/fixtures/power_logs/README.md gives its source and licence). The energy over a stated
window is checked against a trapezoid computed here from the file's own text, independently
of ``power.logs`` and ``power.integrate``, and the mean power against MLPerf's own rule (the
mean of the analyser's samples inside the window, as its compliance checker takes it)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest

from tokenwatt.power.logs import (
    PowerLogError,
    log_energy,
    merge_logs,
    parse_power_log,
    read_power_log,
)

SPL = Path(__file__).parent / "fixtures" / "power_logs" / "mlperf_ptdaemon_spl.txt"
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
