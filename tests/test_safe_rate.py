"""The safe rate: the low end of the boundary's interval, with goodput there, in result.json
and on the terminal; or, where the search could not establish it, the reason."""

from __future__ import annotations

from typing import Any

from report_views import fixture_result as _result
from report_views import plain_text
from tokenwatt.load.bench import _with_interval
from tokenwatt.metrics.boundary import BoundaryFit
from tokenwatt.report.terminal import headline


def _text(renderable: object) -> str:
    return plain_text(renderable, 240)


def test_the_safe_rate_is_the_low_end_with_goodput_scaled_there() -> None:
    b = _result().boundary
    assert b is not None and b.counted_rate_rps
    per_rps = b.goodput_output_tokens_per_s / b.counted_rate_rps  # tokens per good request
    fitted = _with_interval(b, BoundaryFit(9.3, 8.6, 9.6, 0.95, "tpot_p99"))
    assert fitted.safe_rate_rps == 8.6
    assert fitted.goodput_tokens_per_s_at_safe_rate is not None
    assert abs(fitted.goodput_tokens_per_s_at_safe_rate - 8.6 * per_rps) < 1e-9
    assert fitted.goodput_interval_tokens_per_s is not None
    assert fitted.goodput_interval_tokens_per_s[0] == fitted.goodput_tokens_per_s_at_safe_rate
    open_below = _with_interval(b, BoundaryFit(9.3, None, 9.6, 0.95, "tpot_p99"))
    assert open_below.safe_rate_rps is None and open_below.goodput_tokens_per_s_at_safe_rate is None


def _fitted(low: float | None, unclosed: str | None) -> Any:
    def edit(data: dict[str, Any]) -> None:
        b = data["boundary"]
        per = b["goodput_output_tokens_per_s"] / b["achieved_rate_rps"]
        b.update(
            boundary_rate_rps=9.3,
            rate_interval_rps=[low, 9.6],
            goodput_tokens_per_s_at_boundary=9.3 * per,
            goodput_interval_tokens_per_s=[None if low is None else low * per, 9.6 * per],
            confidence=0.95,
            safe_rate_rps=low,
            goodput_tokens_per_s_at_safe_rate=None if low is None else low * per,
        )
        data["search"]["unclosed"] = unclosed

    return edit


def test_the_terminal_prints_the_safe_rate_and_goodput_there() -> None:
    r = _result(_fitted(8.6, None))
    assert r.boundary is not None and r.boundary.goodput_tokens_per_s_at_safe_rate is not None
    good = f"{r.boundary.goodput_tokens_per_s_at_safe_rate:,.0f}"
    line = next(x for x in _text(headline(r)).splitlines() if x.startswith("Safe rate"))
    assert f"8.60 req/s, {good} tok/s goodput there" in line
    assert "low end of the boundary's 95% interval" in line


def test_an_unestablished_low_end_says_why() -> None:
    why = "the low end is open (asked ±10%): the time limit (--max-time) ran out"
    text = _text(headline(_result(_fitted(None, why))))
    line = next(x for x in text.splitlines() if x.startswith("Safe rate"))
    assert "not established" in line and "time limit (--max-time) ran out" in line


def test_an_old_file_without_a_fit_prints_no_safe_rate() -> None:
    assert "Safe rate" not in _text(headline(_result()))


def test_a_time_limit_is_a_self_check_with_its_remedy_and_the_open_end() -> None:
    from tokenwatt.report.checks import self_checks

    why = "the low end is open (asked ±10%): the time limit (--max-time) ran out"

    def timed_out(data: dict[str, Any]) -> None:
        _fitted(None, why)(data)
        data["search"]["stop_reason"] = "max_time"

    msgs = [c.message for c in self_checks(_result(timed_out))]
    line = next(m for m in msgs if "max_time" in m)
    assert why in line and "raise --max-time (search.max_time_s)" in line
