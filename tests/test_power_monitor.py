"""PowerMonitor: windows, flags, scope choice and the power series, from scripted sources.

Most tests drive the monitor with ``poll_once`` and a virtual clock, so every figure has an
exact hand-computed answer; the threaded tests use the real clock with values that are
exact functions of each reading's own stamp (so the answer does not depend on timing).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.power import NOT_MEASURED, PowerMonitor
from tokenwatt.power.base import Channel, PowerSource, Sample, Scope, SourceKind

S = 1_000_000_000
MS = 1_000_000


class Scripted(PowerSource):
    """Values are fn(channel, t_ns); stamps come from ``clock`` (virtual or real)."""

    def __init__(
        self,
        fn: Callable[[int, int], float | None],
        *,
        kind: SourceKind,
        devices: int = 1,
        scope: Scope = "gpu",
        clock: Callable[[], int] = now_ns,
        poll_s: float = 0.01,
        update_s: float = 0.01,
        measured: bool = True,
        name: str = "scripted",
        fail: Callable[[int], bool] = lambda t: False,
    ) -> None:
        super().__init__()
        self.fn, self.kind, self.clock, self.fail = fn, kind, clock, fail
        self.devices, self.scope_, self.measured, self.name = devices, scope, measured, name
        self.poll_interval_s, self.update_period_s = poll_s, update_s
        self.closed = False

    def open(self) -> None:
        self.channels = tuple(Channel(str(i), self.scope_) for i in range(self.devices))

    def read(self) -> list[Sample]:
        t = self.clock()
        if self.fail(t):
            raise OSError("device busy")
        out = []
        for i in range(self.devices):
            v = self.fn(i, t)
            if v is not None:
                out.append(Sample(i, t, v))
        return out

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.t = 10 * S

    def __call__(self) -> int:
        return self.t


def run(mon: PowerMonitor, clock: Clock, until_ns: int, step_ns: int) -> None:
    while clock.t <= until_ns:
        mon.poll_once()
        clock.t += step_ns


def opened(*sources: PowerSource) -> PowerMonitor:
    for s in sources:
        s.open()
    return PowerMonitor(list(sources))


def test_counter_window_sums_devices_exactly() -> None:
    clock = Clock()
    watts = [100.0, 250.0]
    src = Scripted(lambda i, t: watts[i] * t / S, kind="energy_counter", devices=2, clock=clock)
    mon = opened(src)
    run(mon, clock, 13 * S, 37 * MS)  # reads every 37 ms from 10 s to 13 s
    a, b = int(10.5 * S) + 3, int(12.25 * S) + 11  # edges between reads
    rep = mon.energy(a, b, wait=False)
    g = rep.scopes["gpu"]
    window = (b - a) / S
    assert g.energy_j == pytest.approx(350.0 * window, rel=1e-9)
    assert g.mean_power_w == pytest.approx(350.0, rel=1e-9)
    assert g.per_device_j["0"] == pytest.approx(100.0 * window, rel=1e-9)
    assert g.devices == 2 and g.kind == "energy_counter" and g.source == "scripted"
    assert g.coverage == 1.0 and g.flags == () and g.valid
    assert rep.primary_scope == "gpu" and rep.measured
    assert rep.window_s == pytest.approx(window)


def test_power_ramp_window_through_the_monitor() -> None:
    clock = Clock()
    src = Scripted(lambda i, t: 200.0 + 40.0 * (t - 10 * S) / S, kind="power_sampler", clock=clock)
    mon = opened(src)
    run(mon, clock, 14 * S, 50 * MS)
    rep = mon.energy(11 * S + 7 * MS, 13 * S + 7 * MS, wait=False)
    # P = 200 + 40 (t − 10): ∫ from 1.007 to 3.007 = 200·2 + 20·(3.007² − 1.007²) = 560.56 J
    assert rep.scopes["gpu"].energy_j == pytest.approx(560.56, rel=1e-9)


def test_window_short_flag_uses_the_update_period() -> None:
    clock = Clock()
    src = Scripted(lambda i, t: 100.0 * t / S, kind="energy_counter", clock=clock, update_s=0.1)
    mon = opened(src)
    run(mon, clock, 15 * S, 10 * MS)
    assert "window_short" in mon.energy(11 * S, 11 * S + S // 2, wait=False).scopes["gpu"].flags
    long = mon.energy(11 * S, 13 * S, wait=False).scopes["gpu"]
    assert "window_short" not in long.flags and long.valid


def test_stale_counter_is_noticed_and_flags_short_windows() -> None:
    # declared to refresh every 10 ms, but the value only moves every 500 ms
    clock = Clock()
    src = Scripted(
        lambda i, t: 100.0 * (t // (S // 2)) / 2, kind="energy_counter", clock=clock, update_s=0.01
    )
    mon = opened(src)
    run(mon, clock, 20 * S, 10 * MS)
    g = mon.energy(11 * S, 15 * S, wait=False).scopes["gpu"]
    assert g.update_period_s == pytest.approx(0.5, rel=0.05)
    assert "window_short" in g.flags  # 4 s < 10 × 0.5 s
    assert any("changed only every" in n for n in g.notes)
    assert g.energy_j == pytest.approx(400.0, rel=0.01)


def test_partial_window_is_filled_at_mean_power_and_flagged() -> None:
    clock = Clock()
    src = Scripted(lambda i, t: 100.0 * t / S, kind="energy_counter", clock=clock)
    mon = opened(src)
    run(mon, clock, 12 * S, 10 * MS)
    g = mon.energy(9 * S, 12 * S, wait=False).scopes["gpu"]  # first reading at 10 s
    assert g.coverage == pytest.approx(2 / 3, rel=1e-6)
    assert "partial" in g.flags and not g.valid
    assert g.energy_j == pytest.approx(300.0, rel=1e-9)  # 100 W over all 3 s


def test_counter_reset_is_dropped_filled_and_flagged() -> None:
    clock = Clock()
    reset_at = 12 * S + 5 * MS

    def energy(i: int, t: int) -> float:
        return 100.0 * (t - (reset_at if t >= reset_at else 0)) / S

    mon = opened(Scripted(energy, kind="energy_counter", clock=clock))
    run(mon, clock, 14 * S, 10 * MS)
    g = mon.energy(11 * S, 13 * S, wait=False).scopes["gpu"]
    assert "counter_reset" in g.flags and "partial" in g.flags
    assert g.coverage == pytest.approx(0.995, abs=1e-6)  # one 10 ms segment dropped
    assert g.energy_j == pytest.approx(200.0, rel=1e-9)


def test_read_errors_gaps_and_missing_devices() -> None:
    clock = Clock()
    src = Scripted(
        lambda i, t: 50.0 if i == 0 or t < 11 * S else None,  # device 1 vanishes at 11 s
        kind="power_sampler",
        devices=2,
        clock=clock,
        fail=lambda t: 12 * S <= t < 12 * S + 200 * MS,  # 200 ms of failed reads
    )
    mon = opened(src)
    run(mon, clock, 14 * S, 10 * MS)
    g = mon.energy(11 * S + S // 2, 13 * S, wait=False).scopes["gpu"]
    assert {"read_errors", "gap", "missing_device"} <= set(g.flags)
    assert g.energy_j is None and g.per_device_j["0"] == pytest.approx(75.0)
    assert g.per_device_j["1"] is None
    assert mon.describe()["sources"][0]["read_errors"] == 20


def test_zero_energy_and_no_samples() -> None:
    clock = Clock()
    mon = opened(Scripted(lambda i, t: 42.0, kind="energy_counter", clock=clock))
    run(mon, clock, 12 * S, 10 * MS)
    assert "zero_energy" in mon.energy(10 * S, 12 * S, wait=False).scopes["gpu"].flags
    late = mon.energy(20 * S, 21 * S, wait=False).scopes["gpu"]
    assert late.energy_j is None and "no_samples" in late.flags
    assert mon.energy(11 * S, 11 * S, wait=False).scopes["gpu"].energy_j is None
    with pytest.raises(ValueError, match="ends before it starts"):
        mon.energy(2, 1)


def test_no_source_means_not_measured() -> None:
    mon = PowerMonitor([])
    with mon:
        rep = mon.energy(0, S)
    assert rep.scopes == {} and rep.primary is None and not rep.measured
    assert NOT_MEASURED in rep.warnings
    assert rep.to_dict()["measured"] is False
    assert mon.samples(0, S).power_w == {}


def test_measured_source_wins_its_scope_over_a_modelled_one() -> None:
    clock = Clock()
    modelled = Scripted(
        lambda i, t: 700.0, kind="power_sampler", clock=clock, measured=False, name="constant"
    )
    nvml = Scripted(lambda i, t: 300.0 * t / S, kind="energy_counter", clock=clock, name="nvml")
    cpu = Scripted(lambda i, t: 80.0 * t / S, kind="energy_counter", clock=clock, scope="cpu")
    mon = opened(modelled, nvml, cpu)
    run(mon, clock, 12 * S, 10 * MS)
    rep = mon.energy(10 * S, 12 * S, wait=False)
    assert rep.scopes["gpu"].source == "nvml" and rep.scopes["gpu"].energy_j == pytest.approx(600)
    assert rep.scopes["cpu"].energy_j == pytest.approx(160)
    assert [s.source for s in rep.sources] == ["constant", "nvml", "scripted"]
    assert "modelled" in rep.sources[0].flags and rep.sources[0].energy_j == pytest.approx(1400)
    assert rep.primary_scope == "gpu"
    only_modelled = opened(
        Scripted(lambda i, t: 700.0, kind="power_sampler", clock=clock, measured=False)
    )
    run(only_modelled, clock, 15 * S, 10 * MS)
    rep2 = only_modelled.energy(13 * S, 14 * S, wait=False)
    assert rep2.primary is not None and not rep2.measured and not rep2.primary.valid


def test_power_series_bins_are_mean_power_summed_over_devices() -> None:
    clock = Clock()
    src = Scripted(
        lambda i, t: (i + 1) * (100.0 + 10.0 * (t - 10 * S) / S),  # device 1 draws twice device 0
        kind="power_sampler",
        devices=2,
        clock=clock,
    )
    mon = opened(src)
    run(mon, clock, 16 * S, 20 * MS)
    series = mon.samples(11 * S, 15 * S, max_points=8)
    assert len(series.t_s) == 8 and series.t_s[0] == pytest.approx(0.25)
    gpu = series.power_w["gpu"]
    for t_mid, p in zip(series.t_s, gpu, strict=True):
        # bin mean of a linear ramp = its value at the bin centre; ×3 for both devices
        assert p == pytest.approx(3 * (100.0 + 10.0 * (1 + t_mid)), rel=1e-9)
    assert series.sources == {"gpu": "scripted"} and series.primary_scope == "gpu"
    assert len(series.primary_points()) == 8
    empty = mon.samples(30 * S, 31 * S, max_points=4).power_w["gpu"]
    assert empty == (None, None, None, None)


def test_threaded_sampling_measures_the_window() -> None:
    # Real clock, real threads: E(t) = 120 W × t exactly at every reading's own stamp.
    src = Scripted(lambda i, t: 120.0 * t / S, kind="energy_counter", devices=3, poll_s=0.005)
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.2)
        b = now_ns()
        rep = mon.energy(a, b)  # waits for readings past b
    assert src.closed
    g = rep.scopes["gpu"]
    assert g.coverage == 1.0 and "partial" not in g.flags
    assert g.energy_j == pytest.approx(3 * 120.0 * (b - a) / S, rel=1e-6)
    assert g.samples_used >= 3 * 3  # a few readings per device, at least
    assert len(mon.readings(0, 2)) >= 3


def test_energy_async_off_the_loop() -> None:
    src = Scripted(lambda i, t: 10.0, kind="power_sampler", poll_s=0.005)
    src.open()
    with PowerMonitor([src]) as mon:
        mon.wait_ready(5.0)

        async def probe() -> float | None:
            a = now_ns()
            await asyncio.sleep(0.05)
            rep = await mon.energy_async(a, now_ns())
            return rep.scopes["gpu"].mean_power_w

        assert asyncio.run(probe()) == pytest.approx(10.0)


def test_report_round_trips_to_plain_data() -> None:
    clock = Clock()
    mon = opened(Scripted(lambda i, t: 5.0 * t / S, kind="energy_counter", clock=clock))
    run(mon, clock, 11 * S, 10 * MS)
    d = mon.energy(10 * S, 11 * S, wait=False).to_dict()
    assert d["scopes"]["gpu"]["energy_j"] == pytest.approx(5.0)
    assert d["scopes"]["gpu"]["valid"] is True and d["primary_scope"] == "gpu"
    import json

    json.dumps(d)
