"""The sequential p99 verdict (Wald's SPRT) against hand-worked binomial cases."""

from __future__ import annotations

import math

import pytest

from builders import ttft_record
from tokenwatt.metrics.sequential import (
    SequentialStop,
    Sprt,
    decide_probe,
    decides_fail_with_in_flight,
    miss_counts,
)
from tokenwatt.metrics.slo import Limits, RequestLatency

# p99 (α = 0.01), indifference ratio 2: H0 p = 0.005, H1 p = 0.02; errors 5 % each way.
# By hand: a miss adds ln(0.02/0.005) = ln 4 = 1.386294; a request within the limit adds
# ln(0.98/0.995) = −0.0151901; Wald's bounds are ±ln(0.95/0.05) = ±ln 19 = ±2.944439.
PER_MISS = math.log(4)
PER_HIT = math.log(0.98 / 0.995)
A = math.log(19)


def test_the_hand_worked_constants() -> None:
    t = Sprt(0.01)
    assert (t.p0, t.p1) == pytest.approx((0.005, 0.02))
    assert t.bounds == pytest.approx((-A, A))
    assert t.llr(1, 1) == pytest.approx(PER_MISS)
    assert t.llr(0, 1) == pytest.approx(PER_HIT)
    assert abs(PER_MISS - 1.386294) < 1e-6
    assert abs(PER_HIT + 0.0151902) < 1e-6


@pytest.mark.parametrize(
    ("misses", "n", "expected"),
    [
        # no miss: pass once n·0.0151904 ≥ 2.944439, n ≥ 193.8 → 194
        (0, 193, None),
        (0, 194, "pass"),
        # one miss: 1.386294 − 0.0151904·(n − 1) ≤ −2.944439 → n − 1 ≥ 285.1 → n ≥ 287
        (1, 286, None),
        (1, 287, "pass"),
        # two misses never prove a failure (2·1.386 = 2.77 < 2.94) and need n ≥ 379 to pass
        (2, 2, None),
        (2, 378, None),
        (2, 379, "pass"),
        # three: 4.158883 − 0.0151904·(n − 3) ≥ 2.944439 → n − 3 ≤ 79.9 → n ≤ 82 fails
        (3, 3, "fail"),
        (3, 82, "fail"),
        (3, 83, None),
        # four: 5.545177 − 0.0151904·(n − 4) ≥ 2.944439 → n ≤ 175
        (4, 175, "fail"),
        (4, 176, None),
    ],
)
def test_decisions_match_the_hand_worked_boundaries(
    misses: int, n: int, expected: str | None
) -> None:
    assert Sprt(0.01).decide(misses, n) == expected
    # and the same from the log-likelihood written out by hand
    llr = misses * PER_MISS + (n - misses) * PER_HIT
    by_hand = "fail" if llr >= A else ("pass" if llr <= -A else None)
    assert by_hand == expected


def test_the_error_rates_hold_under_each_hypothesis() -> None:
    """Exact probabilities of a wrong decision, by dynamic programming over the count of
    misses (no simulation): under H0 (p = α/2) the test fails the probe rarely, and under
    H1 (p = 2α) it passes rarely; Wald's bounds keep each below about 5 %."""
    t = Sprt(0.01)
    for p, wrong in ((t.p0, "fail"), (t.p1, "pass")):
        alive = {0: 1.0}  # misses → probability of being undecided with that many
        wrong_p = 0.0
        for n in range(1, 3000):
            nxt: dict[int, float] = {}
            for v, w in alive.items():
                for dv, q in ((1, p), (0, 1 - p)):
                    d = t.decide(v + dv, n)
                    if d is None:
                        nxt[v + dv] = nxt.get(v + dv, 0.0) + w * q
                    elif d == wrong:
                        wrong_p += w * q
            alive = nxt
        assert sum(alive.values()) < 1e-6  # decided by 3000 requests
        assert wrong_p < 0.06


def _lat(ttft: float, tpot: float, ok: bool = True) -> RequestLatency:
    return RequestLatency(ok, 0.0, ttft, tpot, None)


def test_a_probe_fails_on_any_limit_and_passes_on_all() -> None:
    limits = Limits("percentile", 0.5, 0.05, None, 0.99, 0.9)
    lats = [_lat(0.1, 0.01)] * 300 + [_lat(0.9, 0.01)] * 3
    misses = miss_counts(limits, lats)
    assert misses == {"ttft_p99": 3, "tpot_p99": 0}
    assert decide_probe(Sprt(0.01), misses, 82) == "fail"
    assert decide_probe(Sprt(0.01), {"ttft_p99": 0, "tpot_p99": 0}, 194) == "pass"
    assert decide_probe(Sprt(0.01), {"ttft_p99": 0, "tpot_p99": 1}, 194) is None
    # a failed request misses every limit
    assert miss_counts(limits, [_lat(0.1, 0.01, ok=False)]) == {"ttft_p99": 1, "tpot_p99": 1}


def test_the_stop_hooks_read_finished_records() -> None:
    stop = SequentialStop(Limits("percentile", 0.5, None, None, 0.99, 0.9))
    fast = [ttft_record(i, 0.1) for i in range(193)]
    assert not stop.should_close(fast) and not stop.should_stop(fast)
    assert stop.should_close([*fast, ttft_record(193, 0.1)])  # the 194th request decides
    slow = [ttft_record(i, 0.9) for i in range(3)]
    assert stop.should_stop(slow) and stop.reason is not None and "3 of 3" in stop.reason


def test_a_check_calls_a_failure_only_on_as_many_requests_as_a_pass_needs() -> None:
    """The drift checks compare a miss *fraction*: a failure decided on its first 3 finished
    requests (one burst) is not called until 194 are judged, the clean-pass count by hand:
    ⌈ln 19 / −ln(0.98/0.995)⌉ = ⌈193.84⌉ = 194."""
    assert Sprt(0.01).clean_pass_n == 194 == math.ceil(A / -PER_HIT)
    limits = Limits("percentile", 0.5, None, None, 0.99, 0.9)
    stop = SequentialStop(limits, min_fail_judged=Sprt(0.01).clean_pass_n)
    burst = [ttft_record(i, 0.9) for i in range(12)]
    assert not stop.should_stop(burst)  # 12 of 12: decided, but on too few
    after = [*burst, *(ttft_record(i, 0.1) for i in range(12, 194))]
    assert stop.should_stop(after) and stop.reason is not None and "12 of 194" in stop.reason
    assert SequentialStop(limits).should_stop(burst)  # a search probe stops at once


# --- the fail side with known misses still in flight ---------------------------------------


@pytest.mark.parametrize(
    ("settled", "n", "known", "fails"),
    [
        # 2 misses of 10 settled: 2·1.386294 − 8·0.0151901 = 2.651 < 2.944, undecided; one
        # request in flight past the TTFT limit makes 3 of 11: 4.158883 − 8·0.0151901 = 4.037
        (2, 10, 1, True),
        (2, 10, 0, False),
        # 1 of 50 settled and 2 in flight: 3 of 52, 4.158883 − 49·0.0151901 = 3.415 ≥ 2.944
        (1, 50, 2, True),
        # 1 of 82 settled and 2 in flight: 3 of 84, 4.158883 − 81·0.0151901 = 2.928 < 2.944
        (1, 82, 2, False),
        # 1 of 80 and 2 in flight: 3 of 82, 4.158883 − 79·0.0151901 = 2.959, as 3 of 82 settled
        (1, 80, 2, True),
    ],
)
def test_in_flight_misses_decide_a_failure_by_hand(
    settled: int, n: int, known: int, fails: bool
) -> None:
    t = Sprt(0.01)
    llr = (settled + known) * PER_MISS + (n - settled) * PER_HIT
    assert (llr >= A) == fails
    misses = {"ttft_p99": settled, "tpot_p99": 0}
    assert decides_fail_with_in_flight(t, misses, n, {"ttft_p99": known}) == fails


def test_in_flight_misses_count_for_their_own_limit_only() -> None:
    """A request past the TTFT limit is not a TPOT hit: TPOT's count does not grow, so TPOT
    can never pass on it (and the pass side never reads in-flight requests at all)."""
    t = Sprt(0.01)
    # 2 TPOT misses of 10 settled; 5 in flight past the TTFT limit: TTFT 5 of 15 fails
    assert decides_fail_with_in_flight(t, {"ttft_p99": 0, "tpot_p99": 2}, 10, {"ttft_p99": 5})
    # nothing known in flight for TPOT: its 2 of 10 stay undecided
    assert not decides_fail_with_in_flight(t, {"ttft_p99": 0, "tpot_p99": 2}, 10, {})
    # 194 clean settled requests pass (decide_probe); known misses never make a pass
    assert decide_probe(t, {"ttft_p99": 0}, 194) == "pass"
    assert not decides_fail_with_in_flight(t, {"ttft_p99": 0}, 194, {"ttft_p99": 0})


def test_the_stop_hook_says_how_many_misses_are_in_flight() -> None:
    stop = SequentialStop(Limits("percentile", 0.5, None, None, 0.99, 0.9))
    done = [
        ttft_record(0, 0.9),
        ttft_record(1, 0.9),
        *(ttft_record(i, 0.1) for i in range(2, 10)),
    ]
    assert not stop.should_stop(done)  # 2 of 10: undecided
    assert not stop.should_stop_with_in_flight(done, {})
    assert stop.should_stop_with_in_flight(done, {"ttft_p99": 1})
    assert stop.decision == "fail" and stop.reason is not None
    assert "3 of 11 requests miss ttft_p99 (1 of them still in flight" in stop.reason
    # settled misses alone decide as before, with the plain reason
    stop = SequentialStop(Limits("percentile", 0.5, None, None, 0.99, 0.9))
    slow = [ttft_record(i, 0.9) for i in range(3)]
    assert stop.should_stop_with_in_flight(slow, {"ttft_p99": 4})
    assert stop.reason is not None and "3 of 3" in stop.reason and "in flight" not in stop.reason
    assert stop.in_flight_misses == {}  # the finished requests decided: none counted in flight


def test_late_first_tokens_count_for_the_ttft_limit_and_never_in_a_check() -> None:
    """``should_stop_late`` counts k requests in flight past the TTFT limit as TTFT misses
    (the attainment form: attainment misses); a check probe (``min_fail_judged``, the drift
    checks compare miss fractions) never stops on them, only on its finished requests."""
    done = [
        ttft_record(0, 0.9),
        ttft_record(1, 0.9),
        *(ttft_record(i, 0.1) for i in range(2, 10)),
    ]
    stop = SequentialStop(Limits("percentile", 0.5, 0.05, None, 0.99, 0.9))
    assert stop.late_first_token_limit == "ttft_p99"
    assert not stop.should_stop_late(done, 0) and stop.in_flight_misses == {}
    assert stop.should_stop_late(done, 1) and stop.in_flight_misses == {"ttft_p99": 1}
    attain = SequentialStop(Limits("attainment", 0.5, 0.05, None, 0.99, 0.99))
    assert attain.late_first_token_limit == "attainment"
    assert attain.should_stop_late(done, 1) and attain.in_flight_misses == {"attainment": 1}
    assert (
        SequentialStop(Limits("percentile", None, 0.05, None, 0.99, 0.9)).late_first_token_limit
        is None
    )
    check = SequentialStop(Limits("percentile", 0.5, None, None, 0.99, 0.9), min_fail_judged=194)
    assert not check.should_stop_late(done, 50) and check.in_flight_misses == {}
