"""The probe's window rules with plain integers (ns): which requests count, when it closes."""

from __future__ import annotations

from tokenwatt.load.window import WindowRules


def rules(**kw: int | bool | None) -> WindowRules:
    base: dict[str, object] = {
        "min_duration_ns": 100,
        "max_duration_ns": 1000,
        "min_requests": 3,
        "w0": 50,
    }
    base.update(kw)
    return WindowRules(**base)


def test_requests_before_w0_do_not_count() -> None:
    w = rules()
    assert not w.admit(49)
    assert w.admit(50) and w.count == 1 and w.w1 is None


def test_duration_binds_window_closes_at_min_duration() -> None:
    # 3 requests by t=80, the next arrival at 200 is past w0 + 100 = 150: close at 150.
    w = rules()
    assert [w.admit(t) for t in (60, 70, 80)] == [True, True, True]
    assert not w.admit(200)
    assert w.w1 == 150 and w.count == 3


def test_count_binds_window_closes_at_the_arrival_that_would_exceed_it() -> None:
    # Only 2 requests by 150; the third at 170 counts; the fourth (180) closes at its own time.
    w = rules()
    assert [w.admit(t) for t in (60, 140, 170)] == [True, True, True]
    assert not w.admit(180)
    assert w.w1 == 180 and w.count == 3


def test_max_duration_closes_even_without_enough_requests() -> None:
    w = rules(min_requests=100)
    assert w.admit(60)
    assert not w.admit(1050 + 1)
    assert w.w1 == 1050
    assert not w.admit(60)  # closed: nothing more counts


def test_max_requests_holds_exactly_n() -> None:
    w = rules(max_requests=2)
    assert [w.admit(t) for t in (55, 56, 57)] == [True, True, False]
    assert w.w1 == 57 and w.count == 2


def test_on_time_closes_the_longest_window_and_a_closed_loop_by_count() -> None:
    open_loop = rules()
    for t in (60, 70, 80):
        open_loop.admit(t)
    open_loop.on_time(500)
    assert open_loop.w1 is None  # open loop: the next arrival closes it, not the clock
    open_loop.on_time(1050)
    assert open_loop.w1 == 1050
    closed = rules(closed_loop=True)
    for t in (60, 70, 80):
        closed.admit(t)
    closed.on_time(120)
    assert closed.w1 is None  # not min_duration yet
    closed.on_time(400)
    assert closed.w1 == 150  # the last counted start was before w0 + min: close at w0 + min


def test_closed_loop_count_binds_after_min_duration() -> None:
    closed = rules(closed_loop=True)
    for t in (60, 160, 170):
        closed.admit(t)
    closed.on_time(300)
    assert closed.w1 == 300  # the last counted start (170) was past w0 + min: close now
