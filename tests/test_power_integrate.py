"""Window integration against hand calculations: trapezoids, counter deltas, edges, wraps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwatt.power.integrate import integrate, observed_period_ns
from tokenwatt.power.monitor import _Series

S = 1_000_000_000  # ns per second


def test_power_ramp_integrates_exactly_with_interpolated_edges() -> None:
    # P(t) = 100 + 50 t W, read at irregular times; the window's edges fall between readings.
    ts = [0, int(0.3 * S), int(1.1 * S), int(1.2 * S), int(2.9 * S), 4 * S]
    ps = [100 + 50 * t / S for t in ts]
    a, b = int(0.5 * S), int(3.5 * S)
    got = integrate(ts, ps, a, b, counter=False)
    # ∫ (100 + 50 t) dt from 0.5 to 3.5 = 100·3 + 25·(3.5² − 0.5²) = 300 + 300 = 600 J
    assert got.energy_j == pytest.approx(600.0, rel=1e-12)
    assert got.covered_ns == 3 * S
    assert got.points == 5  # 0.3 (brackets a), 1.1, 1.2, 2.9, 4.0 (brackets b)


def test_trapezoid_of_a_step_is_the_trapezoid_not_the_step() -> None:
    # 100 W at t=0 and 1 s, 300 W at 2 s: the segment 1→2 s is a ramp by definition.
    got = integrate([0, S, 2 * S], [100.0, 100.0, 300.0], 0, 2 * S, counter=False)
    assert got.energy_j == pytest.approx(100.0 + 200.0)


def test_counter_delta_with_linear_edges() -> None:
    # E = t² J read at 0, 1, 2 s. Window [0.5, 1.25] s: E interpolated linearly inside each
    # segment: E(0.5) = 0.5, E(1.25) = 1 + 3 × 0.25 = 1.75, so 1.25 J (truth 1.3125 J: the
    # error of linear edges, bounded by the curvature within one reading step).
    got = integrate([0, S, 2 * S], [0.0, 1.0, 4.0], S // 2, int(1.25 * S), counter=True)
    assert got.energy_j == pytest.approx(1.25)
    assert got.covered_ns == int(0.75 * S)


def test_counter_over_whole_readings_is_exact_difference() -> None:
    ts = [0, 7 * S // 10, 2 * S, 3 * S]
    es = [1000.0, 1070.0, 1200.0, 1330.5]
    got = integrate(ts, es, 0, 3 * S, counter=True)
    assert got.energy_j == pytest.approx(330.5)


def test_counter_wrap_is_added_back() -> None:
    # RAPL-like counter wrapping at 100 J: 90 → 98 → (wrap) 5 → 20
    ts, es = [0, S, 2 * S, 3 * S], [90.0, 98.0, 5.0, 20.0]
    got = integrate(ts, es, 0, 3 * S, counter=True, wrap=100.0)
    assert got.energy_j == pytest.approx(8 + 7 + 15)
    assert got.wraps == 1 and got.resets == 0


def test_counter_reset_drops_the_segment() -> None:
    # driver reload: 50 → 60 → 2 → 12, no modulus: the middle segment is unknowable.
    got = integrate([0, S, 2 * S, 3 * S], [50.0, 60.0, 2.0, 12.0], 0, 3 * S, counter=True)
    assert got.energy_j == pytest.approx(20.0)
    assert got.resets == 1 and got.wraps == 0
    assert got.dropped_ns == S and got.covered_ns == 2 * S


def test_small_drop_is_a_reset_even_when_a_modulus_is_known() -> None:
    got = integrate([0, S, 2 * S], [60.0, 55.0, 65.0], 0, 2 * S, counter=True, wrap=100.0)
    assert got.resets == 1 and got.wraps == 0
    assert got.energy_j == pytest.approx(10.0)


def test_window_outside_or_partly_outside_the_readings() -> None:
    ts, ps = [S, 2 * S], [10.0, 10.0]
    assert integrate(ts, ps, 3 * S, 4 * S, counter=False).covered_ns == 0
    assert integrate(ts, ps, 0, S // 2, counter=False).energy_j == 0.0
    half = integrate(ts, ps, S // 2, int(1.5 * S), counter=False)
    assert half.covered_ns == S // 2
    assert half.energy_j == pytest.approx(5.0)
    assert integrate([S], [10.0], 0, 2 * S, counter=False).covered_ns == 0


def test_observed_period_is_the_median_step() -> None:
    assert observed_period_ns([0, 100, 200]) is None
    assert observed_period_ns([0, 100, 200, 300, 1300]) == 100
    assert observed_period_ns([0, 30 * S, 60 * S, 90 * S]) == 30 * S


def test_series_keeps_first_reading_of_each_value_and_the_latest_repeat() -> None:
    s = _Series()
    for t, v in [(1, 10.0), (2, 10.0), (3, 10.0), (4, 11.0), (5, 11.0)]:
        s.add(t, v, gap_ns=100)
    snap = s.snapshot()
    assert snap.t == [1, 4, 5] and snap.v == [10.0, 11.0, 11.0]
    assert snap.change_t == [1, 4]
    s.add(6, 12.0, gap_ns=100)
    assert s.snapshot().t == [1, 4, 6]  # the tail is replaced by the new value


def test_series_ignores_bad_values_and_records_gaps() -> None:
    s = _Series()
    s.add(10, 5.0, gap_ns=100)
    s.add(20, math.nan, gap_ns=100)
    s.add(30, -1.0, gap_ns=100)
    s.add(5, 7.0, gap_ns=100)  # older than the last reading
    s.add(500, 6.0, gap_ns=100)
    snap = s.snapshot()
    assert snap.t == [10, 500] and snap.v == [5.0, 6.0]
    assert snap.gaps == [(10, 500)]


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(1, 10**9), min_size=2, max_size=30),
    p0=st.floats(0, 1000),
    k=st.floats(-50, 50),
    fractions=st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)),
)
def test_linear_power_integrates_exactly_and_additively(
    steps: list[int], p0: float, k: float, fractions: tuple[float, float, float]
) -> None:
    fa, fb, fm = fractions
    ts = [0]
    for d in steps:
        ts.append(ts[-1] + d)
    power = [p0 + k * t / S for t in ts]
    lo, hi = sorted((int(fa * ts[-1]), int(fb * ts[-1])))
    mid = lo + int(fm * (hi - lo))
    got = integrate(ts, power, lo, hi, counter=False)
    a, b = lo / S, hi / S
    truth = p0 * (b - a) + k * (b * b - a * a) / 2
    assert got.energy_j == pytest.approx(truth, rel=1e-9, abs=1e-6)
    left = integrate(ts, power, lo, mid, counter=False).energy_j
    right = integrate(ts, power, mid, hi, counter=False).energy_j
    assert left + right == pytest.approx(got.energy_j, rel=1e-9, abs=1e-6)
