"""The start rate from closed-loop stages: Little's law at the interpolated concurrency."""

from __future__ import annotations

import pytest

from tokenwatt.load.bench import warmup_lifetime_s
from tokenwatt.load.capacity import Stage, lifetime_at, next_concurrency, start_point, start_rate


def test_the_staircase_climbs_by_four_until_tpot_passes_sixty_percent() -> None:
    stages = [Stage(1, 0.009, 0.05, 2.4)]
    assert next_concurrency(stages, 0.05) == 4
    stages.append(Stage(64, 0.018, 0.9, 5.0))  # TTFT of a burst is not read
    assert next_concurrency(stages, 0.05) == 256
    stages.append(Stage(256, 0.045, 2.0, 12.0))  # 45 ms > 0.6 × 50 ms: stop
    assert next_concurrency(stages, 0.05) is None


def test_start_rate_by_hand() -> None:
    stages = [Stage(1, 0.009, 0.05, 2.4), Stage(64, 0.018, 0.3, 5.0), Stage(256, 0.045, 2, 12.0)]
    # target 30 ms between 18 ms (C = 64) and 45 ms (C = 256): C* = 64 + 12/27 · 192 = 149.33
    # E2E(C*) = 5 + (149.33 − 64)/192 · 7 = 8.111 s; λ₀ = 149.33 / 8.111 = 18.41 req/s
    assert start_rate(stages, 0.05) == pytest.approx(149.333 / 8.1111, rel=1e-3)


def test_a_slow_floor_starts_at_one_stream() -> None:
    assert start_rate([Stage(1, 0.04, 0.05, 2.0)], 0.05) == pytest.approx(0.5)


def test_a_stage_that_queues_for_slots_stops_the_climb() -> None:
    """llama-server with 4 slots: TPOT stays flat while the extra streams wait a whole
    lifetime for a slot (median TTFT 9 s > the 4-stream stage's 3.0 s E2E). The climb stops
    at 16 streams and λ₀ is the 4-stream stage's own: 4 / 3.0 s = 1.33 req/s, not the 16-stream
    stage's 16 / 5.0 s (whose E2E is read from the requests that got a slot first)."""
    stages = [Stage(1, 0.024, 0.3, 1.1), Stage(4, 0.080, 0.5, 3.0), Stage(16, 0.076, 9.0, 5.0)]
    assert next_concurrency(stages[:2], 0.4) == 16
    assert next_concurrency(stages, 0.4) is None
    assert start_rate(stages, 0.4) == pytest.approx(4 / 3.0)
    # a burst of prefills (TTFT 0.9 s, under the 2.4 s lifetime below) is no queue
    burst = [Stage(1, 0.009, 0.05, 2.4), Stage(4, 0.009, 0.9, 2.5)]
    assert next_concurrency(burst, 0.05) == 16


def test_a_stage_is_read_at_the_streams_that_decoded_by_hand() -> None:
    """README's flag form (Llama-3.1-8B on a simulated H100, TTFT limit 500 ms): the 256-stream
    stage's burst of prefills kept 98 of its requests waiting past the client's first-token
    limit (10 × 500 ms), so only 158 decoded, at a median TPOT of 35.2 ms and a mean E2E of
    11.62 s (the real stage's figures). Read at 256 streams they start the search at ~20 req/s
    against a boundary of ~13; read at the 158 that decoded, at 13.1."""
    below = [Stage(1, 0.009, 0.043, 2.35), Stage(64, 0.0182, 1.27, 5.92, decoded=64)]
    cut = Stage(256, 0.0352, 2.77, 11.62, decoded=158)
    assert cut.held == 158 and below[1].held == 64 and below[0].held == 1
    # C* = 64 + (30 − 18.2)/(35.2 − 18.2) · (158 − 64) = 129.25 streams;
    # E2E(C*) = 5.92 + (129.25 − 64)/94 · (11.62 − 5.92) = 9.876 s; λ₀ = 13.09 req/s
    c_star = 64 + (0.030 - 0.0182) / (0.0352 - 0.0182) * 94
    e2e = 5.92 + (c_star - 64) / 94 * (11.62 - 5.92)
    assert start_rate([*below, cut], 0.05) == pytest.approx(c_star / e2e, rel=1e-9)
    assert start_rate([*below, cut], 0.05) == pytest.approx(13.09, abs=0.01)
    # the same figures read at the nominal 256 streams: C* = 197.3, λ₀ = 19.97 req/s
    nominal = Stage(256, 0.0352, 2.77, 11.62)
    assert start_rate([*below, nominal], 0.05) == pytest.approx(19.97, abs=0.01)
    # a stage none of whose requests decoded more than the one below is not interpolated to
    assert start_rate([*below, Stage(256, 0.0352, 2.77, 11.62, decoded=64)], 0.05) == (
        pytest.approx(64 / 5.92)
    )


def test_the_staircase_lifetime_at_a_rate_by_hand() -> None:
    """Little's law on the stages' curve: E2E(C) linear between (64 streams, 5.92 s) and (158
    decoded, 11.62 s), k = 5.70 / 94 s per stream. At 11.75 req/s C = 11.75 · E2E(C):
    C = 11.75 · (5.92 − 64 k) / (1 − 11.75 k) = 83.3 streams, E2E 7.09 s."""
    stages = [Stage(1, 0.009, 0.043, 2.35), Stage(64, 0.0182, 1.27, 5.92, decoded=64),
              Stage(256, 0.0352, 2.77, 11.62, decoded=158)]  # fmt: skip
    k = 5.70 / 94
    c = 11.75 * (5.92 - 64 * k) / (1 - 11.75 * k)
    assert lifetime_at(stages, 11.75) == pytest.approx(5.92 + (c - 64) * k, rel=1e-9)
    assert lifetime_at(stages, 11.75) == pytest.approx(7.09, abs=0.01)
    # at the start rate it is E2E(C*), the lifetime behind λ₀
    point = start_point(stages, 0.05)
    assert point is not None
    assert lifetime_at(stages, point[0] / point[1]) == pytest.approx(point[1], rel=1e-9)
    # below the lowest stage's rate (1 / 2.35 s) its E2E; above the highest (158 / 11.62) its E2E
    assert lifetime_at(stages, 0.2) == 2.35 and lifetime_at(stages, 30.0) == 11.62
    assert lifetime_at([], 5.0) is None


def test_the_warm_up_lifetime_by_hand() -> None:
    """README's flag form started near the boundary: a pass at 13.25 req/s, a failure at 14.58,
    then the low end's probe at 11.75 with nothing measured below it. The single-stream
    lifetime (2.35 s) warmed that probe for the 10 s minimum where its requests lived 8 s; the
    staircase's lifetime at 11.75 req/s is 7.09 s (21 s of warm-up)."""
    stages = [Stage(1, 0.009, 0.043, 2.35), Stage(64, 0.0182, 1.27, 5.92, decoded=64),
              Stage(256, 0.0352, 2.77, 11.62, decoded=158)]  # fmt: skip
    measured = [(13.25, 11.24), (14.58, 14.57)]
    assert warmup_lifetime_s(14.0, measured, stages, 2.35) == 11.24  # 13.25 is below it
    assert warmup_lifetime_s(20.0, measured, stages, 2.35) == 14.57
    assert warmup_lifetime_s(11.75, measured, stages, 2.35) == lifetime_at(stages, 11.75)
    # before any probe: the staircase's lifetime at the start rate, E2E(C*)
    point = start_point(stages, 0.05)
    assert point is not None
    start = point[0] / point[1]
    assert warmup_lifetime_s(start, [], stages, 2.35) == pytest.approx(point[1])
    # no staircase (a start rate given in the spec): the single stream, else nothing
    assert warmup_lifetime_s(11.75, [], [], 2.35) == 2.35
    assert warmup_lifetime_s(11.75, [], [], None) is None


def test_start_point_is_the_lifetime_behind_the_start_rate() -> None:
    stages = [Stage(1, 0.009, 0.05, 2.4), Stage(64, 0.018, 0.3, 5.0), Stage(256, 0.045, 2, 12.0)]
    point = start_point(stages, 0.05)
    assert point is not None
    c, e2e = point
    assert c == pytest.approx(149.333, rel=1e-4) and e2e == pytest.approx(8.1111, rel=1e-4)
    assert start_rate(stages, 0.05) == pytest.approx(c / e2e)
