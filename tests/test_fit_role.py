"""The figures reconcile: every probe says whether it joined the boundary fit and why not, the
star is captioned with what it marks, and a pass above the headline's rate is printed beside
the headline with its reason."""

from __future__ import annotations

import json
from typing import Any

from report_views import fixture_result as _result
from report_views import plain_text
from tokenwatt.load.search import (
    CHECK_ROLE,
    ProbeOutcome,
    SearchOutcome,
    SearchStep,
    step_role,
)
from tokenwatt.metrics.boundary import Evidence
from tokenwatt.report.format import STAR_CAPTION
from tokenwatt.report.html import render_html
from tokenwatt.report.terminal import headline, probe_table


def _step(index: int, rate: float, passed: bool, halt: Any = None) -> SearchStep[None]:
    ev = None if halt else Evidence(rate, 200, {"tpot_p99": 0 if passed else 9})
    out: ProbeOutcome[None] = ProbeOutcome(passed, halt=halt, evidence=ev)
    return SearchStep(index, rate, index, "fit", out, None, None, rate)


def test_each_search_probe_says_whether_it_joined_and_why() -> None:
    """10 passes, 12 passes, 11 fails (a failure below a pass: it outranks the pass at 12, so
    the bracket's pass is 10), then an error probe."""
    out: SearchOutcome[None] = SearchOutcome(
        steps=[_step(1, 10.0, True), _step(2, 12.0, True), _step(3, 11.0, False),
               _step(4, 9.0, False, halt="error")],
        lo_rps=10.0, hi_rps=11.0,
    )  # fmt: skip
    assert step_role(out, 1).startswith("joined the fit; the headline's probe (*)")
    assert step_role(out, 2) == (
        "joined the fit; a pass above the headline's rate, outranked by a failure "
        "(probe 3 at 11 req/s)"
    )
    assert step_role(out, 3) == "joined the fit"
    assert step_role(out, 4).startswith("not joined: an error probe")
    assert step_role(out, 5) == "not joined: not a search probe"


def _with_higher_check(data: dict[str, Any]) -> None:
    """The demo's shape: the headline's probe at 9.25 req/s, a confirmation that passed at
    9.4 req/s after the search (a drift check)."""
    b = data["boundary"]
    per = b["goodput_output_tokens_per_s"] / b["achieved_rate_rps"]
    b.update(
        boundary_rate_rps=9.3, rate_interval_rps=[8.9, 9.5], confidence=0.95,
        goodput_tokens_per_s_at_boundary=9.3 * per,
        goodput_interval_tokens_per_s=[8.9 * per, 9.5 * per],
        fit_role="joined the fit; the headline's probe (*): the highest pass no lower failure "
        "outranks",
    )  # fmt: skip
    check = json.loads(json.dumps(b))
    for k in ("boundary_rate_rps", "rate_interval_rps", "goodput_tokens_per_s_at_boundary",
              "goodput_interval_tokens_per_s", "confidence"):  # fmt: skip
        check[k] = None
    check.update(index=11, rate_rps=9.4, phase="check", fit_role=CHECK_ROLE)
    data["probes"].append(check)


def _text(renderable: object) -> str:
    return plain_text(renderable, 400)


def test_a_higher_pass_is_printed_beside_the_headline_with_its_reason() -> None:
    r = _result(_with_higher_check)
    line = next(x for x in _text(headline(r)).splitlines() if x.startswith("SLO goodput"))
    assert "higher passes not headlined: probe 11 passed at 9.40 req/s: not joined: a drift " \
        "check" in line  # fmt: skip
    assert "higher passes not headlined" in render_html(r)


def test_without_a_higher_pass_nothing_is_added() -> None:
    assert "higher passes" not in _text(headline(_result()))


def test_the_star_is_captioned_with_what_it_marks() -> None:
    r = _result(_with_higher_check)
    assert "* = the headline's probe" in _text(probe_table(r))
    html = render_html(r)
    assert "★ = the headline&#x27;s probe" in html or "★ = the headline's probe" in html
    assert "highest rate that met the SLO" not in html
    assert "star = the headline" in html
    assert STAR_CAPTION.startswith("* = the headline's probe")
