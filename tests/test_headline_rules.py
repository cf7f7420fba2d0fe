"""Honest headlines: a lower bound says so, an interrupted probe is not a failure, a failed
probe is never "SLO goodput", and a fitted boundary shows its interval."""

from __future__ import annotations

from typing import Any

from report_views import attach_fit, plain_text
from report_views import fixture_result as _result
from tokenwatt.report.format import fmt_tokens_per_s
from tokenwatt.report.html import render_html
from tokenwatt.report.terminal import headline, probe_table


def _text(renderable: object) -> str:
    return plain_text(renderable, 200)


def _no_failure_above(data: dict[str, Any]) -> None:
    """Keep only the probes up to the boundary (9.25 req/s) and the ones below it."""
    data["probes"] = [p for p in data["probes"] if p["rate_rps"] <= 9.25]
    data["search"]["history"] = [h for h in data["search"]["history"] if h["rate_rps"] <= 9.25]
    data["search"]["stop_reason"] = "interrupted"
    data["interrupted"] = True


def test_no_failing_rate_is_a_lower_bound() -> None:
    r = _result(_no_failure_above)
    assert r.boundary is not None
    good = f"{r.boundary.goodput_output_tokens_per_s:,.0f}"
    text = _text(headline(r))
    assert f"≥ {good} tok/s (no failing rate found)" in text
    assert "≥" in render_html(r) and "no failing rate found" in render_html(r)


def test_with_a_failure_above_the_headline_is_the_measured_goodput() -> None:
    text = _text(headline(_result()))
    assert "no failing rate found" not in text and "≥" not in text


def test_an_interrupted_probe_is_listed_as_interrupted_not_failed() -> None:
    def interrupt_last(data: dict[str, Any]) -> None:
        last = data["probes"][-1]
        last["interrupted"] = True
        last["slo_passed"] = False
        last["slo_detail"]["failed"] = ["interrupted"]

    rows = _text(probe_table(_result(interrupt_last))).splitlines()
    last = [line for line in rows if line.strip().startswith("10")]
    assert last and "interrupted" in last[0] and "FAIL" not in last[0]


def test_a_failed_single_probe_never_headlines_slo_goodput() -> None:
    def one_failed_probe(data: dict[str, Any]) -> None:
        failed = next(p for p in data["probes"] if not p["slo_passed"])
        data["probes"], data["boundary"], data["search"] = [failed], None, None

    text = _text(headline(_result(one_failed_probe)))
    assert "SLO goodput" not in text
    assert "Goodput" in text and "SLO NOT met" in text


def test_a_fitted_boundary_shows_its_interval() -> None:
    def fitted(data: dict[str, Any]) -> None:
        attach_fit(data, 9.3, 9.0, 9.5)

    text = _text(headline(_result(fitted)))
    # the headline is the goodput the boundary probe measured; the fit is its detail
    line = next(x for x in text.splitlines() if x.startswith("SLO goodput"))
    measured = _result(fitted).boundary.goodput_output_tokens_per_s  # type: ignore[union-attr]
    assert line.split()[2] == fmt_tokens_per_s(measured)
    assert "fitted boundary 9.30 req/s (9.00–9.50, 95 %)" in text
