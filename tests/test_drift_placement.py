"""Where the drift checks place a probe on the search's curve: at the load its window held
(``metrics.drift.level_rate``, the counted rate), not the rate it was offered.

The figures are README's spec form with first-look windows against README's simulator
(Llama-3.1-70B on 2 × TP4 H100, 5 s windows): each row is a probe of that run as result.json
recorded it (offered, counted, median TPOT of the judged requests). The re-test was offered
11.33 req/s, the rate the search had passed at, but its window held 14.4 req/s; read at the
offered rate its 443 ms stood beside the search's 50 ms (a window that held 8.2) and an
unchanged simulator was called changed."""

from __future__ import annotations

import math

import pytest

from tokenwatt.metrics.drift import DRIFT_LATENCY_FACTOR, Level, level_rate, slower_than_search

# (offered req/s, counted req/s, median TPOT s or None: nothing judged)
SEARCH = [
    (4.11, 3.23, 0.02578),
    (4.52, 3.47, 0.02568),
    (5.47, 6.20, 0.03521),
    (8.01, 7.40, 0.03606),
    (16.03, 15.37, None),
    (11.33, 8.20, 0.05000),
    (13.48, 14.69, None),
    (13.48, 12.20, 0.53085),
    (7.37, 7.00, 0.04483),
    (9.97, 11.40, 0.09880),
    (9.97, 9.80, 0.06463),
]
RETEST = (11.33, 14.40, 0.44320)


def _levels(placed: bool) -> list[Level]:
    return [Level(level_rate(o, c) if placed else o, m) for o, c, m in SEARCH]


def test_the_counted_rate_places_a_probe() -> None:
    assert level_rate(11.33, 14.4) == 14.4
    assert level_rate(11.33, None) == 11.33
    assert level_rate(11.33, 0.0) == 11.33  # nothing counted: the offered rate
    assert level_rate(11.33, math.nan) == 11.33


def test_a_retest_whose_window_held_more_load_is_not_a_change() -> None:
    o, c, m = RETEST
    # At the offered rate: its neighbour is the search's probe offered 11.33 (50 ms): 8.86×.
    old = slower_than_search(Level(o, m), _levels(placed=False), "in the re-test")
    assert old is not None and "8.86×" in old
    # At the load it held (14.4): the neighbours are the windows that held 12.2 (531 ms) and
    # 14.69 (nothing judged, skipped) → 531 ms; 443 ms is under 2.5 × 531 ms.
    assert slower_than_search(Level(level_rate(o, c), m), _levels(placed=True), "x") is None


@pytest.mark.parametrize("factor", [3.0, 10.0])
def test_a_slower_server_at_the_same_load_is_still_caught(factor: float) -> None:
    """The re-test held the load the search's passing probe held (8.2 req/s) and decoded
    ``factor`` × slower: called, as at the offered rate."""
    levels = _levels(placed=True)
    neighbour = max(m for o, c, m in SEARCH if m is not None and level_rate(o, c) == 8.20)
    check = Level(level_rate(11.33, 8.20), neighbour * factor)
    line = slower_than_search(check, levels, "in the re-test")
    assert factor > DRIFT_LATENCY_FACTOR and line is not None
    assert f"{factor:.3g}×" in line and "beside the 8.2 req/s its window held" in line
