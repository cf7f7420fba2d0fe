"""``--precision`` and ``--max-time``: the spec fields they stand for, the refusals, and the
time the chosen precision is estimated to take (``load.eta``), worked by hand."""

from __future__ import annotations

import math

import pytest

from tokenwatt.cli.options import Flags, build_spec, search_fields
from tokenwatt.errors import SpecError
from tokenwatt.load.eta import (
    LOW_END_CLEAN,
    PASS_JUDGED,
    close_extra_s,
    close_probes,
    probes_to_come,
    search_plan_text,
)
from tokenwatt.spec import SearchSettings


@pytest.mark.parametrize(
    ("text", "seconds"), [("300", 300.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0)]
)
def test_max_time_forms(text: str, seconds: float) -> None:
    assert search_fields(None, text) == {"search.max_time_s": seconds}


def test_a_malformed_max_time_is_one_line_naming_the_flag() -> None:
    with pytest.raises(SpecError, match=r"--max-time must be seconds .* got 'ten minutes'"):
        search_fields(None, "ten minutes")


def _spec(precision: float | None, max_time: str | None) -> SearchSettings:
    extra = {"hardware.accelerator": "h100-sxm", **search_fields(precision, max_time)}
    flags = Flags(base_url="sim", model="llama-3.1-8b", extra=extra)
    return build_spec(None, flags).search


def test_the_flags_set_the_spec_fields_and_the_default_is_ten_percent() -> None:
    assert _spec(None, None).precision == 0.10 and _spec(None, None).max_time_s is None
    s = _spec(0.05, "12m")
    assert s.precision == 0.05 and s.max_time_s == 720.0


@pytest.mark.parametrize(("precision", "max_time"), [(1.5, None), (0.0, None), (None, "-5m")])
def test_out_of_range_values_are_refused_naming_the_field(
    precision: float | None, max_time: str | None
) -> None:
    field = "precision" if precision is not None else "max_time_s"
    with pytest.raises(SpecError, match=field):
        _spec(precision, max_time)


def test_the_low_end_needs_765_clean_requests_by_hand() -> None:
    # 2 · (n / 4) · −ln(0.99) > 3.841 (χ²₁ at 95 %, D = 4): n > 764.4
    assert LOW_END_CLEAN == 765
    assert 2 * (764 / 4) * -math.log(0.99) < 3.8415 < 2 * (765 / 4) * -math.log(0.99)
    seq = SearchSettings()
    # the low end is one long window: one probe while any clean request is missing
    assert close_probes(seq, 0) == 1
    assert close_probes(seq, 700) == 1
    assert close_probes(seq, 1000) == 0
    assert close_probes(SearchSettings(sequential=False), 0) == 0


def test_the_low_end_window_lasts_what_it_still_needs_beyond_a_pass_by_hand() -> None:
    seq = SearchSettings()
    # nothing judged near the boundary yet: 765 − 280 = 485 requests more than a decided
    # pass holds, at 13 req/s 37.3 s
    assert close_extra_s(seq, 0, 13.0) == pytest.approx(485 / 13.0)
    assert close_extra_s(seq, 400, 13.0) == pytest.approx(85 / 13.0)  # 765 − 400 − 280
    assert close_extra_s(seq, 600, 13.0) == 0.0  # 165 still wanted: a pass holds that many
    assert close_extra_s(seq, 1000, 13.0) == 0.0  # established: no probe, no time
    assert close_extra_s(seq, 0, None) == 0.0
    assert close_extra_s(SearchSettings(sequential=False), 0, 13.0) == 0.0


def test_probes_to_come_adds_the_low_end_probe_and_learns() -> None:
    seq = SearchSettings()
    # bracket 12–13.2: ⌈log2(ln 1.1 / ln 1.1)⌉ − 1 = 0 bisections; 1 low-end probe; 2 checks
    before = probes_to_come(seq, index=4, checks_started=0, lo_rps=12.0, hi_rps=13.2)
    assert before == 0 + 1 + 2
    enough = probes_to_come(
        seq, index=4, checks_started=0, lo_rps=12.0, hi_rps=13.2, clean_near=4 * PASS_JUDGED
    )
    assert enough == 0 + 0 + 2
    # the low end's long window in flight is the probe in flight, not one to come
    during = probes_to_come(
        seq, index=4, checks_started=0, lo_rps=12.0, hi_rps=13.2, low_end_in_flight=True
    )
    assert during == 0 + 0 + 2


def test_the_plan_before_the_search_by_hand() -> None:
    # 1 in flight + ⌈log2(ln 2 / ln 1.1)⌉ = 3 to bracket + 1 for the low end + 2 checks = 7
    # probes of 10 s warm-up + 280 / 13 s + 12 s drain = 43.54 s: 304.8 s, and the low end's
    # window (765 − 280) / 13 = 37.3 s longer than a pass: 342.1 s, "6 min"
    text = search_plan_text(SearchSettings(), rate_rps=13.0, drain_s=12.0)
    assert text == "±10% asked: about 7 probes, about 6 min (an estimate; it updates as the " \
        "search learns)"  # fmt: skip
    capped = search_plan_text(SearchSettings(max_time_s=300), rate_rps=13.0, drain_s=12.0)
    assert "capped by --max-time 5 min" in capped


@pytest.mark.parametrize(
    ("flags", "field"),
    [(["--precision", "1.5"], "search.precision"), (["--max-time", "soon"], "--max-time")],
)
def test_the_cli_refuses_a_bad_value_in_one_line_exit_2(flags: list[str], field: str) -> None:
    import subprocess
    import sys

    args = ["bench", "--base-url", "sim", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
    out = subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args, *flags],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [x for x in (out.stdout + out.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in out.stderr
