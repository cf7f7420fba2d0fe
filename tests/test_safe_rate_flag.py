"""The safe rate held to the drift checks (``load.safe_rate``): a check at or below it that
failed the SLO lowers or withdraws it, with a flag that says "too high"; a check above it, or
one that passed, changes nothing. Then the flag in result.json, the terminal, the HTML report
and ``compare``.

The hand calculation behind every corrected end: the two-sided low end is the highest probed
rate whose clean requests (with those above it up to the first failure), read as n/D
independent ones with D = 4, exclude a miss fraction of 1 % at or below it; n clean requests
lose n · −ln(0.99) / 4 of log-likelihood against χ²₁(95 %)/2 = 1.9207. So 909 or 900 clean
establish an end (2.28, 2.26), 700 do not (1.76), 700 + 300 = 1000 do (2.51). The first
tests read that statistic alone (``min_below=0``: the pooling by hand); the search also keeps
the low end at least ``LOW_END_MIN_BELOW`` (12 %) below the point, which the later tests apply.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

from report_views import fixture_result as _result
from report_views import plain_text
from tokenwatt.load.bench import (
    CHECK_WARMUP_LIFETIMES,
    WARMUP_LIFETIMES,
    _checked_safe_rate,
    _with_interval,
)
from tokenwatt.load.safe_rate import checked_safe_rate
from tokenwatt.load.search import (
    RESOLUTION,
    BoundarySearch,
    ProbeOutcome,
    SearchOutcome,
    drift_check_plan,
    probe_seed,
)
from tokenwatt.metrics.boundary import (
    LOW_END_MIN_BELOW,
    BoundaryFit,
    Evidence,
    profile_threshold,
    two_sided_boundary,
)
from tokenwatt.metrics.sequential import Sprt
from tokenwatt.report.compare import compare_results
from tokenwatt.report.html import render_html
from tokenwatt.report.terminal import headline
from tokenwatt.result import BenchResult, ProbeSummary, load_result, write_result
from virtual_probe import CASES, VirtualProbe

ALLOWED = 0.01  # p99
LIMIT = "tpot_p99"
STATISTIC = 0.0  # ``min_below`` for the step statistic alone


def _clean(rate: float, n: int) -> Evidence:
    return Evidence(rate, n, {LIMIT: 0})


def _check(rate: float, judged: int, misses: int, passed: bool) -> ProbeOutcome[None]:
    """A drift check as the search sees it, its window holding exactly its offered rate."""
    return ProbeOutcome(passed, None, None, counted_rps=rate, requests=judged,
                        evidence=Evidence(rate, judged, {LIMIT: misses}))  # fmt: skip


# README's flag form at ±5 %: the low end's long window at 13.24 req/s judged 909 requests
# with no miss, failures above; a pass at 11 req/s with 900 clean lies below it.
SEARCH = [_clean(11.0, 900), _clean(13.24, 909), Evidence(14.33, 150, {LIMIT: 5}),
          Evidence(14.6, 100, {LIMIT: 9})]  # fmt: skip


def test_the_hand_figures_of_the_module_docstring() -> None:
    per = -math.log1p(-ALLOWED) / 4.0
    assert 909 * per > profile_threshold(0.95) > 700 * per
    assert 900 * per > profile_threshold(0.95) and 1000 * per > profile_threshold(0.95)
    assert two_sided_boundary(SEARCH, ALLOWED, min_below=STATISTIC).low_rps == 13.24


def test_a_failed_check_below_the_safe_rate_lowers_it_to_the_established_pass_below() -> None:
    flag = checked_safe_rate(
        SEARCH, ALLOWED, 13.24, [(5, 13.21, _check(13.21, 200, 72, False))], STATISTIC
    )
    assert flag is not None and flag.direction == "too high"
    assert (flag.check_rate_rps, flag.check_probe) == (13.21, 5)
    assert (flag.misses, flag.judged, flag.searched_safe_rate_rps) == (72, 200, 13.24)
    # 72 of 200 pooled with 13.24's 0 of 909: 6.5 % > 1 %, no longer clean; 11's 900 clean hold
    assert flag.safe_rate_rps == 11.0
    assert flag.line() == (
        "safe rate too high: a check at 13.21 req/s (≤ the safe rate 13.24) failed with 72 "
        "misses of 200; lowered to 11 req/s with its counts pooled"
    )


def test_with_too_few_clean_requests_below_the_safe_rate_is_withdrawn() -> None:
    search = [_clean(11.0, 700), *SEARCH[1:]]  # 700 clean: 1.76 < 1.92, no end there
    assert two_sided_boundary(search, ALLOWED, min_below=STATISTIC).low_rps == 13.24
    flag = checked_safe_rate(
        search, ALLOWED, 13.24, [(5, 13.21, _check(13.21, 200, 72, False))], STATISTIC
    )
    assert flag is not None and flag.safe_rate_rps is None
    assert flag.line().endswith("withdrawn: with its counts pooled no lower rate is established")
    # 300 clean more below: the end at 10 rests on 300 + 700 = 1000 (2.51 > 1.92)
    flag = checked_safe_rate([_clean(10.0, 300), *search], ALLOWED, 13.24,
                             [(5, 13.21, _check(13.21, 200, 72, False))], STATISTIC)  # fmt: skip
    assert flag is not None and flag.safe_rate_rps == 10.0


def test_a_failed_check_above_the_safe_rate_or_a_passing_one_raises_nothing() -> None:
    above = _check(13.9, 200, 72, False)  # the confirmation at the fitted point: drift's business
    assert checked_safe_rate(SEARCH, ALLOWED, 13.24, [(5, 13.9, above)], STATISTIC) is None
    passed = _check(13.21, 800, 2, True)
    assert checked_safe_rate(SEARCH, ALLOWED, 13.24, [(5, 13.21, passed)], STATISTIC) is None

    # a failure offered at 13.2 whose window held 15.5 req/s, beyond 2 Poisson sigmas of 200
    # arrivals (13.2 + 2 · 13.2/√200 = 15.07): its verdict speaks for 15.5
    # (load.search.bracket_rate), above the safe rate; at 14.5, within the noise, the
    # offered 13.2 stands and the flag is raised
    def busy(counted: float) -> ProbeOutcome[None]:
        return ProbeOutcome(False, None, None, counted_rps=counted, requests=200,
                            evidence=Evidence(counted, 200, {LIMIT: 72}))  # fmt: skip

    assert checked_safe_rate(SEARCH, ALLOWED, 13.24, [(5, 13.2, busy(15.5))], STATISTIC) is None
    flag = checked_safe_rate(SEARCH, ALLOWED, 13.24, [(5, 13.2, busy(14.5))], STATISTIC)
    assert flag is not None and flag.check_rate_rps == 13.2


def test_with_the_low_end_kept_below_the_point_a_contradicted_safe_rate_is_withdrawn() -> None:
    """The search's own rule (``LOW_END_MIN_BELOW``): SEARCH's point is 14.0 req/s, so the low
    end is the highest probed rate at or under 0.88 × 14.0 = 12.3: 11.0. A check there failing
    72 of 200 pulls the pooled point under 11.0 / 0.88 = 12.5, and no probe lies 12 % below it:
    withdrawn."""
    fit = two_sided_boundary(SEARCH, ALLOWED)
    assert fit.rate_rps is not None and fit.low_rps == 11.0
    assert fit.rate_rps * (1 - LOW_END_MIN_BELOW) < 13.24  # the nearer pass is not the end
    flag = checked_safe_rate(SEARCH, ALLOWED, 11.0, [(5, 10.9, _check(10.9, 200, 72, False))])
    assert flag is not None and flag.safe_rate_rps is None and flag.check_rate_rps == 10.9


def _flagged_result() -> tuple[BenchResult, float]:
    """The fixture's run with a fitted interval (safe rate 9.0) and a re-test at 8.9 req/s that
    failed 72 of 200, through the bench's own step; returns it with goodput per request/s.
    Pooled, the point falls to 8.54 req/s; the low end, at least 12 % under it (7.51), is the
    pass at 7.5 (900 clean)."""
    r = _result()
    b = r.boundary
    assert b is not None and b.counted_rate_rps
    per_rps = b.goodput_output_tokens_per_s / b.counted_rate_rps
    b = _with_interval(b, BoundaryFit(9.3, 9.0, 9.6, 0.95, LIMIT))
    check = b.model_copy(deep=True, update={
        "index": 11, "phase": "check", "rate_rps": 8.9, "counted_rate_rps": 8.9,
        "window_s": 200 / 8.9, "slo_passed": False, "safe_rate_rps": None})  # fmt: skip
    check.slo_detail.judged, check.slo_detail.misses = 200, {LIMIT: 72}
    out: SearchOutcome[ProbeSummary] = SearchOutcome(
        evidence=[
            _clean(7.5, 900),
            _clean(8.0, 900),
            _clean(9.0, 909),
            Evidence(9.5, 150, {LIMIT: 5}),
        ]
    )
    r.probes.append(check)
    r.boundary = _checked_safe_rate(b, r.probes, out, r.spec)
    return r, per_rps


def test_the_bench_lowers_the_safe_rate_and_its_goodput_follows() -> None:
    r, per_rps = _flagged_result()
    b = r.boundary
    assert b is not None and b.safe_rate_flag is not None
    assert b.safe_rate_rps == 7.5 and b.safe_rate_flag.searched_safe_rate_rps == 9.0
    assert b.goodput_tokens_per_s_at_safe_rate is not None
    assert abs(b.goodput_tokens_per_s_at_safe_rate - 7.5 * per_rps) < 1e-9
    assert b.boundary_rate_rps == 9.3  # the boundary and its interval are the search's
    unflagged = _result()
    assert unflagged.boundary is not None
    fitted = _with_interval(unflagged.boundary, BoundaryFit(9.3, 9.0, 9.6, 0.95, LIMIT))
    out: SearchOutcome[ProbeSummary] = SearchOutcome(evidence=[_clean(9.0, 909)])
    assert _checked_safe_rate(fitted, unflagged.probes, out, unflagged.spec) == fitted


def _text(renderable: object) -> str:
    return plain_text(renderable, 300)


WANT = "safe rate too high: a check at 8.9 req/s (≤ the safe rate 9) failed with 72 misses of 200"


def test_the_flag_in_result_json_the_terminal_the_html_and_compare(tmp_path: Path) -> None:
    r, _ = _flagged_result()
    assert r.boundary is not None
    back = load_result(write_result(r, tmp_path))
    assert back.boundary is not None and back.boundary.safe_rate_flag == r.boundary.safe_rate_flag
    raw: Any = json.loads((tmp_path / "result.json").read_text("utf-8"))
    assert raw["boundary"]["safe_rate_flag"]["direction"] == "too high"
    line = next(x for x in _text(headline(r)).splitlines() if x.startswith("Safe rate"))
    assert line.split("Safe rate", 1)[1].strip().startswith("7.50 req/s") and WANT in line
    assert WANT in render_html(r)
    c = compare_results([("A", _result()), ("B", r)])
    assert any(w.startswith("B: " + WANT) and "no verdict is called on its safe rate" in w
               for w in c.warnings)  # fmt: skip
    assert not any("safe rate too high" in w for w in compare_results(
        [("A", _result()), ("B", _result())]).warnings)  # fmt: skip


def test_a_virtual_search_whose_re_test_fails_at_the_safe_rate_has_it_withdrawn() -> None:
    """End to end in virtual time: the bench's two-sided search at ±5 % on the dense case
    (seed 1019), started at the long-run boundary 12.96 req/s as the staircase starts it,
    then the re-test the bench plans, with the seed it gives it. The low end is let as near the
    point as the precision and the step statistic allow (``low_end_min_below=0``,
    ``low_end_fixed=False``: the placement the distance rule replaced, whose safe rates lay
    above the long-run boundary in most ±5 % searches), the regime in which a check meets a
    safe rate from above. The search's safe rate,
    14.26 req/s, lies above the long-run boundary; the re-test there fails with 40 misses of
    194, and with those counts pooled no rate below is established: the safe rate is
    withdrawn (docs/validation.md, "Safe rate too high: the flag in virtual time")."""
    reference, precision, seed = 12.96, 0.05, 1019
    probe = VirtualProbe(CASES["dense"], lifetimes=WARMUP_LIFETIMES)
    search = BoundarySearch(probe, start_rate_rps=reference, allowed=ALLOWED, seed=seed,
                            max_probes=30, precision=precision, two_sided=True,
                            first_step=1 + 2 * min(precision, RESOLUTION),
                            low_end_min_below=STATISTIC, low_end_fixed=False)  # fmt: skip
    probe.search = search
    out = asyncio.run(search.run())
    probe.search, probe.lifetimes = None, CHECK_WARMUP_LIFETIMES
    probe.min_fail_judged = Sprt(ALLOWED).clean_pass_n  # a check fails on a pass's count
    assert out.stop_reason == "converged" and out.reported is not None
    assert out.fit is not None and out.fit.rate_rps is not None and out.boundary is not None
    safe = out.reported.low_rps
    assert safe is not None and safe > reference  # too high, as the long run shows
    checks = []
    plan = drift_check_plan(out.boundary.rate_rps, out.fit.rate_rps, precision)
    for i, (rate, _) in enumerate(plan):
        index = len(out.steps) + 1 + i
        checks.append((index, rate, asyncio.run(probe(rate, probe_seed(seed, index)))))
    flag = checked_safe_rate(out.evidence, ALLOWED, safe, checks, STATISTIC)
    assert flag is not None and flag.direction == "too high"
    assert flag.check_rate_rps <= safe and flag.misses > ALLOWED * flag.judged
    assert flag.safe_rate_rps is None  # withdrawn: nothing below it is established
    assert (flag.misses, flag.judged) == (40, 194)  # the seeded run's counts, as recorded
