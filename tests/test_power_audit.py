"""The energy audit (``power.audit``): method record, validity verdict and the busy/idle and
prefill/decode split, on scripted sources with exact answers and on the shaped-like-real
fakes of NVML (a counter that resets on a driver reload) and Redfish (a sensor that stalls)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from test_power_monitor import MS, Clock, S, Scripted, opened, run
from test_power_nvml import H100 as H100_NAME
from test_power_nvml import FakeGpu, fake_pynvml
from tokenwatt.clock import now_ns
from tokenwatt.power import PowerMonitor
from tokenwatt.power.audit import clip_union, subtract

TDP_W = 700.0


def piecewise_counter(levels: list[tuple[int, float]]) -> tuple[object, object]:
    """An energy counter whose power is ``levels[i][1]`` W from ``levels[i][0]`` ns on."""

    def power(t: int) -> float:
        w = levels[0][1]
        for t0, watts in levels:
            if t >= t0:
                w = watts
        return w

    def energy(_i: int, t: int) -> float:
        total, prev_t, prev_w = 0.0, 0, levels[0][1]
        for t0, watts in levels:
            if t0 >= t:
                break
            total += prev_w * (t0 - prev_t) / S
            prev_t, prev_w = t0, watts
        return total + prev_w * (t - prev_t) / S

    return power, energy


def flicker(t_ns: int) -> float:
    return float((t_ns // (10 * MS)) % 2)


def test_interval_algebra() -> None:
    assert clip_union([(5, 9), (1, 3), (2, 4), (20, 30)], 0, 25) == [(1, 4), (5, 9), (20, 25)]
    assert subtract([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]
    assert subtract([(0, 4), (6, 10)], [(3, 7)]) == [(0, 3), (7, 10)]
    assert subtract([(0, 4)], []) == [(0, 4)]


def test_steady_counter_is_valid_and_says_how_it_measured() -> None:
    clock = Clock()
    src = Scripted(lambda i, t: 300.0 * t / S, kind="energy_counter", clock=clock, devices=2)
    mon = opened(src)
    run(mon, clock, 14 * S, 20 * MS)
    a, b = 11 * S, 13 * S
    mon.energy(a, b, wait=False)
    (x,) = mon.audit(a, b, tdp_w=TDP_W)
    assert x.method == "energy_counter" and x.gpus_only and x.devices == ["0", "1"]
    assert x.achieved_period_s == pytest.approx(0.02)
    assert x.samples_in_window == 2 * 101  # every 20 ms from 11 s to 13 s, both ends, 2 GPUs
    assert x.min_power_w == pytest.approx(300.0) and x.max_power_w == pytest.approx(300.0)
    assert x.valid and x.verdict == "valid"
    assert {c.name: c.passed for c in x.checks} == {
        "enough_samples": True,
        "monotone_counter": True,
        "no_gaps": True,
        "idle_floor": True,
        "ceiling": True,
    }
    assert x.idle_s == pytest.approx(2.0) and x.idle_energy_j == pytest.approx(1200.0)
    assert x.busy_s == 0.0 and x.busy_energy_j == 0.0


def test_busy_idle_and_prefill_decode_split_match_the_power_levels() -> None:
    # idle 100 W until 11.2 s; prefill 600 W to 11.5 s; decode 400 W to 12.4 s; idle after
    edges = [(0, 100.0), (11_200 * MS, 600.0), (11_500 * MS, 400.0), (12_400 * MS, 100.0)]
    _, energy = piecewise_counter(edges)
    clock = Clock()
    mon = opened(Scripted(energy, kind="energy_counter", clock=clock))  # type: ignore[arg-type]
    run(mon, clock, 14 * S, 10 * MS)
    a, b = 11 * S, 13 * S
    report = mon.energy(a, b, wait=False)
    busy = [(11_200 * MS, 12_000 * MS), (11_300 * MS, 12_400 * MS)]  # two requests
    prefill = [(11_200 * MS, 11_400 * MS), (11_300 * MS, 11_500 * MS)]
    (x,) = mon.audit(a, b, busy=busy, prefill=prefill, tdp_w=TDP_W)
    assert report.scopes["gpu"].energy_j == pytest.approx(
        0.2 * 100 + 0.3 * 600 + 0.9 * 400 + 0.6 * 100
    )
    assert x.busy_s == pytest.approx(1.2) and x.idle_s == pytest.approx(0.8)
    assert x.busy_energy_j == pytest.approx(0.3 * 600 + 0.9 * 400)
    assert x.idle_energy_j == pytest.approx(0.8 * 100)
    assert x.prefill_s == pytest.approx(0.3) and x.decode_s == pytest.approx(0.9)
    assert x.prefill_energy_j == pytest.approx(180.0)
    assert x.decode_energy_j == pytest.approx(360.0)
    assert x.split_note is None


def test_a_coarse_source_gives_no_split_and_says_why() -> None:
    clock = Clock()
    src = Scripted(lambda i, t: 200.0 * (t // (S // 2)) / 2, kind="energy_counter", clock=clock,
                   update_s=0.5)  # fmt: skip
    mon = opened(src)
    run(mon, clock, 30 * S, 10 * MS)
    a, b = 11 * S, 29 * S
    mon.energy(a, b, wait=False)
    busy = [(a + k * S, a + k * S + 100 * MS) for k in range(10)]  # 100 ms bursts
    (x,) = mon.audit(a, b, busy=busy, prefill=busy, tdp_w=TDP_W)
    assert x.achieved_period_s == pytest.approx(0.5)
    assert x.busy_energy_j is None and x.idle_energy_j is None
    assert x.split_note is not None and "too coarse" in x.split_note
    assert x.valid  # the window's total is still fine: 18 s is 36 periods


def test_implausible_floor_and_ceiling_fail_the_verdict() -> None:
    clock = Clock()
    # a sampler's reading flickers by a watt (a steady value is not a fresh reading); ~1 W on
    # an H100 until 12 s is a zeroed sensor, not an idle GPU
    zero = Scripted(lambda i, t: (1.0 if t < 12 * S else 150.0) + flicker(t),
                    kind="power_sampler", clock=clock)  # fmt: skip
    mon = opened(zero)
    run(mon, clock, 14 * S, 10 * MS)
    mon.energy(11 * S, 13 * S, wait=False)
    (x,) = mon.audit(11 * S, 13 * S, tdp_w=TDP_W)
    assert x.method == "sampled_power" and not x.valid
    assert {c.name for c in x.checks if c.passed is False} == {"idle_floor"}
    assert "idle_floor" in x.verdict
    monotone = next(c for c in x.checks if c.name == "monotone_counter")
    assert monotone.passed is None  # a sampler has no counter to check

    clock2 = Clock()
    hot = Scripted(
        lambda i, t: 2000.0 + flicker(t), kind="power_sampler", clock=clock2
    )  # wrong unit/scope
    mon2 = opened(hot)
    run(mon2, clock2, 14 * S, 10 * MS)
    (y,) = mon2.audit(11 * S, 13 * S, tdp_w=TDP_W)
    assert not y.valid and "ceiling" in y.verdict


def test_node_scope_is_not_checked_against_gpu_tdp_and_a_model_is_not_valid() -> None:
    clock = Clock()
    node = Scripted(lambda i, t: 2500.0 + flicker(t), kind="power_sampler", clock=clock,
                    scope="node")  # fmt: skip
    model = Scripted(lambda i, t: 700.0, kind="power_sampler", clock=clock, measured=False,
                     name="constant")  # fmt: skip
    mon = opened(node, model)
    run(mon, clock, 14 * S, 10 * MS)
    mon.energy(11 * S, 13 * S, wait=False)
    x, m = mon.audit(11 * S, 13 * S, tdp_w=TDP_W)
    assert not x.gpus_only and x.valid
    assert {c.name: c.passed for c in x.checks}["ceiling"] is None
    assert m.method == "modelled" and not m.valid and "modelled" in m.verdict


def test_a_short_window_has_too_few_samples() -> None:
    clock = Clock()
    mon = opened(Scripted(lambda i, t: 300.0 * t / S, kind="energy_counter", clock=clock,
                          update_s=0.1, poll_s=0.1))  # fmt: skip
    run(mon, clock, 14 * S, 100 * MS)
    (x,) = mon.audit(11 * S, 11 * S + 500 * MS, tdp_w=TDP_W)
    check = next(c for c in x.checks if c.name == "enough_samples")
    assert check.passed is False and not x.valid


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeGpu]]:
    devs = [FakeGpu(H100_NAME, "GPU-00000000-aaaa-bbbb-cccc-000000000000", 400.0)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(devs))
    yield devs


def test_nvml_counter_that_resets_is_invalid(nvml: list[FakeGpu]) -> None:
    from tokenwatt.power.nvml import NvmlPower

    src = NvmlPower(poll_interval_s=0.005)
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.35)
        nvml[0].reset_at_ns = now_ns()  # driver reload: the counter restarts from 0
        time.sleep(0.35)
        b = now_ns()
        mon.energy(a, b)
        (x,) = mon.audit(a, b, tdp_w=TDP_W)
    assert x.source == "nvml" and x.method == "energy_counter"
    monotone = next(c for c in x.checks if c.name == "monotone_counter")
    assert monotone.passed is False and not x.valid
    assert "monotone_counter" in x.verdict
    assert x.max_power_w == pytest.approx(400.0, rel=0.2)  # the reset segment is left out


def test_redfish_sensor_that_stalls_is_a_gap() -> None:
    from test_power_redfish import CHASSIS, PASSWORD, USER, Bmc, serve_bmc
    from tokenwatt.power.redfish import RedfishPower

    state = Bmc(auth=False)
    httpd, url = serve_bmc(state)
    try:
        src = RedfishPower(url=url, paths=[CHASSIS], interval_s=0.01)
        src.open()
        with PowerMonitor([src]) as mon:
            assert mon.wait_ready(5.0)
            a = now_ns()
            time.sleep(0.1)
            state.null_power = True  # the sensor stalls (reads null) for a while
            time.sleep(0.15)
            state.null_power = False
            time.sleep(0.1)
            b = now_ns()
            mon.energy(a, b)
            (x,) = mon.audit(a, b, tdp_w=TDP_W)
    finally:
        httpd.shutdown()
    del USER, PASSWORD
    assert x.method == "sampled_power" and x.scope == "node" and not x.gpus_only
    gaps = next(c for c in x.checks if c.name == "no_gaps")
    assert gaps.passed is False and "gap" in gaps.detail and not x.valid
