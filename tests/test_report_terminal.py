"""The terminal report: exact output for the golden result, and each self-check firing."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tokenwatt.report.checks import self_checks
from tokenwatt.report.format import (
    fmt_bytes,
    fmt_float,
    fmt_ms,
    fmt_pct,
    fmt_quantile,
    fmt_signed_pct,
    rel_change,
)
from tokenwatt.report.terminal import ResultView, describe_slo, energy_text, headline
from tokenwatt.result import BenchResult

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def _data() -> dict[str, Any]:
    return json.loads((FIXTURES / "result-v1.json").read_text("utf-8"))


def _render(renderable: object, width: int = 100) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_golden_terminal_output_is_exact() -> None:
    result = BenchResult.model_validate(_data())
    expected = (FIXTURES / "terminal-v1.txt").read_text("utf-8")
    assert _render(ResultView(result)) == expected


def test_headline_leads_with_goodput_then_energy_then_mbu() -> None:
    text = _render(headline(BenchResult.model_validate(_data())))
    lines = [line.rstrip() for line in text.splitlines()]
    rows = [line for line in lines if line.startswith(("SLO goodput", "Tokens per", "MBU"))]
    assert rows == [
        "SLO goodput       2,368 output tok/s  ·  1,184 per GPU  ·  "
        "at 9.25 req/s offered, 9.30 achieved",
        # the simulator's power model: marked beside tok/J and beside the watts
        "Tokens per joule  1.93 tok/J simulated  (0.518 J/token; 1,233 W mean (simulated); "
        "sim, gpu)",
        "MBU               41.0%  (weights 36.9% + KV 4.1%)",
    ]


def test_energy_not_measured_and_modelled() -> None:
    data = _data()
    b = data["boundary"]
    b["tokens_per_joule"] = None
    b["energy"] = None
    r = BenchResult.model_validate(data)
    assert r.boundary is not None
    assert energy_text(r.boundary) == "not measured"
    assert "Tokens per joule  not measured" in _render(headline(r))

    data = _data()
    data["boundary"]["energy"].update(source="constant", modelled=True, flags=[])
    r = BenchResult.model_validate(data)
    assert r.boundary is not None
    assert energy_text(r.boundary).startswith("1.93 tok/J modelled  (")
    assert any("modelled from a stated constant" in c.message for c in self_checks(r))


def test_no_boundary_says_so() -> None:
    data = _data()
    data["boundary"] = None
    for p in data["probes"]:
        p["slo_passed"] = False
    text = _render(headline(BenchResult.model_validate(data)))
    assert "SLO not met at any probed rate (lowest rate probed: 1.00 req/s)" in text


def test_no_boundary_never_says_slo_not_met_when_a_probe_passed() -> None:
    """An error probe, a saturated sender or an interruption stops a search that had passes."""
    for stop, words in (
        ("error", "error probe"),
        ("saturated", "load generator"),
        ("interrupted", "interrupted"),
    ):
        data = _data()
        data["boundary"] = None
        data["search"]["stop_reason"] = stop
        text = " ".join(_render(headline(BenchResult.model_validate(data))).split())
        assert "SLO not met" not in text and words in text
        assert "highest passing rate" in text


def test_describe_slo_forms() -> None:
    r = BenchResult.model_validate(_data())
    assert describe_slo(r.slo) == "p99 TTFT ≤ 500 ms, p99 TPOT ≤ 60 ms"
    att = r.slo.model_copy(update={"kind": "attainment", "attainment": 0.9, "e2e_ms": 20000.0})
    assert describe_slo(att) == (
        "≥ 90% of requests with TTFT ≤ 500 ms and TPOT ≤ 60 ms and E2E ≤ 20000 ms"
    )


def test_golden_has_only_its_own_warning() -> None:
    checks = self_checks(BenchResult.model_validate(_data()))
    assert [c.message for c in checks] == [
        "probe 5 (16 rps): stopped early after 22.5 s, TTFT p99 rising across the window"
    ]


def _messages(data: dict[str, Any]) -> list[str]:
    return [c.message for c in self_checks(BenchResult.model_validate(data))]


def test_check_too_few_requests_for_the_quantile() -> None:
    data = _data()
    for p, n in zip(data["probes"][:2], (150, 199), strict=True):
        p["ttft_s"]["count"] = n
    data["probes"][2]["ttft_s"]["count"] = 200  # 200 x 0.01 = 2 beyond p99: enough
    (msg,) = [m for m in _messages(data) if "rests on" in m]
    assert msg == (
        "probes 1, 2: p99 rests on fewer than 2 requests beyond it (150, 199 requests); "
        "raise search.probe.min_requests to ≥ 200"
    )


def test_a_sequentially_decided_verdict_is_not_called_too_few_requests() -> None:
    """README's flag form on a healthy simulator: probe 1 failed by the sequential test on 108
    requests (4 over TPOT); the test decided it at its stated error rates, so the p99-count
    warning, meant for a verdict read off the point estimate, must not name it."""
    data = _data()
    for p, n in zip(data["probes"][:2], (108, 150), strict=True):
        p["ttft_s"]["count"] = n
    data["probes"][0]["slo_detail"]["sequential"] = "fail"
    (msg,) = [m for m in _messages(data) if "rests on" in m]
    assert msg.startswith("probe 2: p99 rests on fewer than 2 requests beyond it (150 requests)")


def test_check_send_lateness_is_relative_to_the_arrival_gap() -> None:
    data = _data()
    # Probe 4 at 7.78 req/s: mean gap 129 ms, 10% is 12.9 ms.
    data["probes"][3]["send_lateness_s"]["p99"] = 0.012
    assert not [m for m in _messages(data) if "late" in m]
    data["probes"][3]["send_lateness_s"]["p99"] = 0.014
    (msg,) = [m for m in _messages(data) if "late" in m]
    assert msg.startswith("probe 4: the client sent requests late (p99 up to 14.0 ms")


def test_check_multi_token_chunks_and_energy_flags() -> None:
    data = _data()
    data["probes"][6]["mbu_detail"]["flags"]["multi_token_chunks"] = True
    data["boundary"]["flags"] = ["multi_token_chunks"]
    data["single_stream"]["energy"]["flags"] = ["window_short"]
    msgs = _messages(data)
    assert any(m.startswith("probes 7, 10: several tokens per chunk") for m in msgs)
    assert any(m.startswith("single stream energy: the window is shorter") for m in msgs)


def test_check_search_stops_and_interruption() -> None:
    data = _data()
    data["interrupted"] = True
    data["search"]["stop_reason"] = "max_probes"
    data["search"]["precision_reached"] = 0.25
    msgs = _messages(data)
    assert msgs[0].startswith("the run was interrupted")
    assert msgs[1] == (
        "the search stopped (max_probes) before the bracket closed to 5% (reached 25.0%): "
        "raise search.max_probes"
    )


def test_check_max_probes_with_a_closed_bracket_claims_no_precision_miss() -> None:
    # 9.1% < the 15% target: the bracket closed; only the confirming re-run was cut.
    data = _data()
    data["search"]["stop_reason"] = "max_probes"
    data["search"]["precision_target"] = 0.15
    data["search"]["precision_reached"] = 0.091
    msgs = [m for m in _messages(data) if m.startswith("the search stopped")]
    assert msgs == [
        "the search stopped (max_probes) before confirming the boundary: raise search.max_probes"
    ]


def test_check_failures_at_the_boundary() -> None:
    data = _data()
    data["boundary"]["requests_failed"] = 3
    data["boundary"]["errors_by_kind"] = {"stall": 1, "http_status": 2}
    assert (
        "3 of 561 requests failed at the boundary (http_status 2, stall 1); "
        "see the probe's requests file"
    ) in _messages(data)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (fmt_float(1234.5678), "1,235"),
        (fmt_float(0.012345), "0.0123"),
        (fmt_float(None), "—"),
        (fmt_float(float("inf")), "∞"),
        (fmt_ms(0.0596), "59.6 ms"),
        (fmt_ms(3.47483), "3,475 ms"),
        (fmt_ms(0.00474), "4.74 ms"),
        (fmt_pct(0.4096), "41.0%"),
        (fmt_bytes(58_957_356_000), "59.0 GB"),
        (fmt_bytes(6.7e12, "B/s"), "6.70 TB/s"),
        (fmt_quantile(0.99), "p99"),
        (fmt_quantile(0.995), "p99.5"),
        (fmt_signed_pct(rel_change(110.0, 100.0)), "+10.0%"),
        (fmt_signed_pct(rel_change(87.0, 100.0)), "−13.0%"),
        (fmt_signed_pct(rel_change(1.0, 0.0)), "—"),
    ],
)
def test_formatting(value: str, expected: str) -> None:
    assert value == expected


def test_probe_table_fits_80_columns_with_every_verdict() -> None:
    from tokenwatt.report.terminal import probe_table

    result = BenchResult.model_validate(_data())
    text = _render(probe_table(result), width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = lines[1].split()
    assert " ".join(header) == "# rate achieved T tok/s TTFT p99 TPOT p99 attain MBU SLO"
    rows = [line for line in lines[3:] if line[:3].strip()]
    assert len(rows) == 10
    verdicts = [line[line.index("%", line.index("%") + 1) + 1 :].strip() for line in rows]
    assert [v.split()[0] for v in verdicts] == [
        "pass" if p.slo_passed else "FAIL" for p in result.probes
    ]
    wide = _render(probe_table(result), width=100).splitlines()[1].split()
    assert "B" in wide and "tok/J" in wide


def test_simulated_mark_on_every_section_and_none_on_a_measured_run() -> None:
    data = _data()  # served by the simulator
    text = _render(ResultView(BenchResult.model_validate(data)), width=140)
    for title in ("MBU inputs at the boundary", "Probes (rates in req/s", "Single stream ("):
        line = next(x for x in text.splitlines() if x.startswith(title))
        assert line.rstrip().endswith("· SIMULATED"), line
    assert "SIMULATED Qwen3-30B-A3B" in text.splitlines()[0]
    assert "W mean (simulated)" in text
    data["spec"]["endpoint"]["url"] = "http://127.0.0.1:8000/v1"
    for p in [*data["probes"], data["single_stream"], data["boundary"]]:
        if p.get("energy"):
            p["energy"]["source"] = "nvml"
    text = _render(ResultView(BenchResult.model_validate(data)), width=140)
    assert "SIMULATED" not in text and "simulated" not in text


def test_max_probes_is_warned_once_in_one_wording() -> None:
    """The search ran out of probes: one warning, the self-check's, with its remedy (the
    bench no longer adds a second wording of it to result.warnings)."""
    data = _data()
    data["search"].update(stop_reason="max_probes", precision_reached=0.12)
    result = BenchResult.model_validate(data)
    text = _render(ResultView(result), width=200)
    assert len([c for c in self_checks(result) if "max_probes" in c.message]) == 1
    assert len([x for x in text.splitlines() if "max_probes" in x]) == 1
    assert (
        "the search stopped (max_probes) before the bracket closed to 5% (reached 12.0%): "
        "raise search.max_probes" in text
    )
