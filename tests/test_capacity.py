"""The start rate from closed-loop stages: Little's law at the interpolated concurrency."""

from __future__ import annotations

import pytest

from tokenwatt.load.capacity import Stage, next_concurrency, start_rate


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
