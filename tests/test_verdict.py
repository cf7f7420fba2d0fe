"""A/B verdicts (``report.verdict``): the log-ratio interval against hand calculations, the
refusal naming the fields that differ beyond the settings under test, the command's output,
and virtual-time runs: a slower simulator called slower, the same settings not called."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenwatt.cli import app
from tokenwatt.report.verdict import (
    Estimate,
    compare_estimates,
    paired_design,
    result_verdicts,
    untestable_differences,
)
from tokenwatt.result import BenchResult, load_result, write_result

FIXTURE = Path(__file__).parent / "fixtures" / "peers" / "tokenwatt_sim_probe"
Z = 1.959963984540054  # the normal 97.5 % quantile
T9 = 2.2621571627409915  # Student's t, 97.5 %, 9 degrees of freedom (SciPy)


def _normal(value: float, log_se: float, measured_s: float = 60.0) -> Estimate:
    return Estimate(
        value, value * math.exp(-Z * log_se), value * math.exp(Z * log_se), 0.95, None, measured_s
    )


def test_log_se_recovered_from_the_interval() -> None:
    assert _normal(100.0, 0.02).log_se() == pytest.approx(0.02, rel=1e-9)
    t_based = Estimate(50.0, 50 * math.exp(-T9 * 0.03), 50 * math.exp(T9 * 0.03), 0.95, 9, 30)
    assert t_based.log_se() == pytest.approx(0.03, rel=1e-6)
    assert Estimate(1.0, None, 2.0, 0.95, None, 1.0).log_se() is None


def test_a_ten_percent_difference_is_called_with_its_interval() -> None:
    v = compare_estimates("goodput", _normal(100.0, 0.02), _normal(110.0, 0.02))
    d, se = math.log(1.1), 0.02 * math.sqrt(2)  # by hand: log ratio, quadrature
    assert v.called
    assert v.change == pytest.approx(0.10)
    assert v.low == pytest.approx(math.exp(d - Z * se) - 1)  # +4.07 %
    assert v.high == pytest.approx(math.exp(d + Z * se) - 1)
    assert v.text() == "goodput: B − A = +10.0 % (+4.1 %…+16.3 %, 95 %)"
    lower = compare_estimates("goodput", _normal(110.0, 0.02), _normal(100.0, 0.02))
    assert lower.called and lower.change is not None and lower.change < 0


def test_no_difference_says_how_long_would_resolve_one() -> None:
    v = compare_estimates("MBU", _normal(100.0, 0.02), _normal(101.0, 0.02, 120.0))
    assert not v.called
    assert v.resolve == pytest.approx(0.02)  # the floor: 1 % measured is below it
    by_hand = 90.0 * (Z * 0.02 * math.sqrt(2) / math.log(1.02)) ** 2  # mean of 60 s and 120 s
    assert v.need_s == pytest.approx(by_hand)
    assert "no difference detectable at this precision (would need ~12 min per run" in v.text()


def test_welch_degrees_of_freedom_widen_small_samples() -> None:
    a = Estimate(100.0, 100 * math.exp(-T9 * 0.02), 100 * math.exp(T9 * 0.02), 0.95, 9, 60)
    b = Estimate(105.0, 105 * math.exp(-T9 * 0.02), 105 * math.exp(T9 * 0.02), 0.95, 9, 60)
    v = compare_estimates("MBU", a, b)
    # equal variances: Welch gives 18 dof, t(0.975, 18) = 2.10092204 (SciPy)
    se = 0.02 * math.sqrt(2)
    assert v.low == pytest.approx(math.exp(math.log(1.05) - 2.10092204 * se) - 1, rel=1e-6)


def test_no_verdict_without_a_closed_interval() -> None:
    open_low = Estimate(10.0, None, 11.0, 0.95, None, 60.0)
    v = compare_estimates("boundary rate", open_low, _normal(10.0, 0.02))
    assert v.reason is not None and not v.called
    assert "A: interval open" in v.text()
    assert "B: not measured" in compare_estimates("MBU", _normal(1, 0.1), "not measured").text()


def _with(r: BenchResult, section: str, **values: Any) -> BenchResult:
    sec = getattr(r.spec, section).model_copy(update=values)
    return r.model_copy(update={"spec": r.spec.model_copy(update={section: sec})})


def test_refusal_names_every_field_beyond_the_settings_under_test() -> None:
    a = load_result(FIXTURE)
    assert untestable_differences(["a", "b"], [a, a]) == []
    assert paired_design(a, a)
    reseeded = _with(a, "workload", seed=a.spec.workload.seed + 1)
    assert untestable_differences(["a", "b"], [a, reseeded]) == []  # a rerun: allowed
    assert not paired_design(a, reseeded)
    other = _with(a, "workload", ignore_eos=not a.spec.workload.ignore_eos)
    lines = untestable_differences(["a", "b"], [a, other])
    assert len(lines) == 1 and lines[0].startswith("workload.ignore_eos (a ")
    assert untestable_differences(["a", "b"], [a, other], ["workload.ignore_eos"]) == []
    refused = result_verdicts(["a", "b"], [a, other])
    assert refused.refused and not refused.verdicts


def test_compare_command_prints_the_verdict_or_the_refusal(tmp_path: Path) -> None:
    a = load_result(FIXTURE)
    write_result(a, tmp_path / "a")
    other = _with(a, "workload", ignore_eos=not a.spec.workload.ignore_eos)
    write_result(other, tmp_path / "b")
    out = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert out.exit_code == 0, out.output
    assert "no verdict: the specs differ" in out.output
    assert "workload.ignore_eos" in out.output
    write_result(a, tmp_path / "c")
    out = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "c")])
    assert "paired design" in out.output and "MBU: no verdict" in out.output


def test_virtual_slower_server_called_slower_same_server_not() -> None:
    """Virtual time: efficiency 0.45 against 0.5 (B 10 % slower per step): MBU's estimate reads
    lower and nothing is called higher; two seeds of the same settings call no difference.
    (Goodput and the boundary are not called here: the search's reported boundary interval is
    open below, so their intervals span the change; methodology, "A/B verdicts".)"""
    from virtual_verdicts import case_at, pair_verdicts, virtual_run

    effect = pair_verdicts(virtual_run(case_at(0.5), 2500, 30.0),
                           virtual_run(case_at(0.45), 12500, 30.0))  # fmt: skip
    m = effect["MBU"]
    assert m.change is not None and m.change < 0 and m.reason is None, m.text()
    for v in effect.values():  # nothing called the wrong way
        assert not v.called or (v.change or 0) < 0, v.text()
    null = pair_verdicts(virtual_run(case_at(0.5), 2000, 30.0),
                         virtual_run(case_at(0.5), 12000, 30.0))  # fmt: skip
    for f in ("boundary rate", "SLO goodput", "MBU"):
        assert null[f].reason is None and not null[f].called, null[f].text()


@pytest.mark.slow
@pytest.mark.virtual
def test_virtual_null_pairs_rarely_call_a_difference() -> None:
    """8 null pairs (the first 8 of ``benchmarks/compare_verdicts.py``'s 40, seeds 2000 + k
    against 12000 + k; the benchmark measures the >= 95 % of 40 pairs that call none): no
    difference called in at least 7 of 8 per figure. 3 effect pairs, efficiency 0.45 (seed
    12500 + k) against the first three null pairs' A runs: every called effect has B lower."""
    from virtual_verdicts import case_at, pair_verdicts, virtual_run

    calls = {f: 0 for f in ("boundary rate", "SLO goodput", "MBU")}
    runs_a = [virtual_run(case_at(0.5), 2000 + k) for k in range(8)]
    for k, a in enumerate(runs_a):
        vs = pair_verdicts(a, virtual_run(case_at(0.5), 12000 + k))
        for f in calls:
            calls[f] += vs[f].called
    print(calls)
    assert all(c <= 1 for c in calls.values()), calls
    for k in range(3):
        vs = pair_verdicts(runs_a[k], virtual_run(case_at(0.45), 12500 + k))
        print({f: v.text() for f, v in vs.items()})
        for f in ("boundary rate", "SLO goodput"):
            assert not vs[f].called or (vs[f].change or 0) < 0, vs[f].text()
