"""compare: relative changes against the first run, and every like-for-like difference named."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tokenwatt.errors import ReportError
from tokenwatt.report.compare import compare_results, load_runs
from tokenwatt.report.compare_view import comparison_view
from tokenwatt.report.labels import SIMULATED_NOTE
from tokenwatt.result import BenchResult

GOLDEN = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"


def _data() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text("utf-8"))


def _result(data: dict[str, Any]) -> BenchResult:
    return BenchResult.model_validate(data)


def test_identical_runs_show_no_change_and_no_warning() -> None:
    c = compare_results([("a", _result(_data())), ("b", _result(_data()))])
    assert c.warnings == ()
    assert [r.name for r in c.rows] == [
        "SLO goodput",
        "goodput per GPU",
        "tokens per joule",
        "MBU",
        "boundary rate",
        "achieved rate",
        "T",
        "TTFT p99",
        "TPOT p99",
    ]
    for row in c.rows:
        assert row.changes == (None, 0.0)


def test_changes_are_relative_to_the_first_run() -> None:
    base, faster, slower = _data(), _data(), _data()
    faster["boundary"]["goodput_output_tokens_per_s"] = 3000.0
    faster["boundary"]["tpot_s"]["p99"] = 0.050
    slower["boundary"]["goodput_output_tokens_per_s"] = 1184.21
    c = compare_results([("a", _result(base)), ("b", _result(faster)), ("c", _result(slower))])
    goodput = c.rows[0]
    assert goodput.values == (2368.42, 3000.0, 1184.21)
    assert goodput.changes[1] == pytest.approx(3000.0 / 2368.42 - 1)  # +26.7%
    assert goodput.changes[2] == pytest.approx(-0.5)
    tpot = c.rows[-1]
    assert tpot.better == "lower"
    assert tpot.changes[1] == pytest.approx(0.050 / 0.05963 - 1)


def test_differences_that_break_like_for_like_are_named() -> None:
    a, b = _data(), _data()
    b["geometry"]["name"] = "Qwen3-30B-A3B-FP8"
    b["geometry"]["weight_dtype"] = "fp8"
    b["accelerator"]["name"] = "h200"
    b["gpus"] = 4
    b["replicas"] = 4
    b["slo"]["tpot_ms"] = 40.0
    b["spec"]["workload"]["output_tokens"] = {"kind": "fixed", "value": 512}
    warnings = compare_results([("a", _result(a)), ("b", _result(b))]).warnings
    assert warnings == (
        "runs differ in models (a: Qwen3-30B-A3B (bf16 weights, bf16 KV); "
        "b: Qwen3-30B-A3B-FP8 (fp8 weights, bf16 KV)): differences are not like for like",
        "runs differ in accelerators (a: h100-sxm; b: h200): differences are not like for like",
        "runs differ in GPU counts (a: 2; b: 4): differences are not like for like",
        "runs differ in replicas (a: 2; b: 4): differences are not like for like",
        "runs differ in SLOs (a: p99 TTFT ≤ 500 ms, p99 TPOT ≤ 60 ms; "
        "b: p99 TTFT ≤ 500 ms, p99 TPOT ≤ 40 ms): differences are not like for like",
        "runs differ in workloads (workload.output_tokens.value: a 256; b 512): "
        "differences are not like for like",
    )


def test_run_without_boundary_has_no_figures_and_a_warning() -> None:
    a, b = _data(), _data()
    b["boundary"] = None
    b["interrupted"] = True
    c = compare_results([("a", _result(a)), ("b", _result(b))])
    assert all(row.values[1] is None and row.changes[1] is None for row in c.rows)
    # the reason is the views' own (report.format.no_boundary_text), never "SLO failed"
    assert (
        "b: no boundary: interrupted before one was measured; highest passing rate 9.25 req/s"
        in c.warnings
    )
    assert "b: the run was interrupted; its boundary may be loose" in c.warnings


def test_one_run_is_not_a_comparison() -> None:
    with pytest.raises(ReportError, match="at least two"):
        compare_results([("a", _result(_data()))])


def test_labels_are_directory_names_made_distinct(tmp_path: Path) -> None:
    for d in ("x/run", "y/run", "z/other"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "result.json").write_text(GOLDEN.read_text("utf-8"), "utf-8")
    runs = load_runs([tmp_path / "x/run", tmp_path / "y/run/result.json", tmp_path / "z/other"])
    assert [label for label, _ in runs] == ["x/run", "y/run", "z/other"]


def test_comparison_view_colours_direction_not_sign() -> None:
    a, b = _data(), _data()
    b["boundary"]["ttft_s"]["p99"] = 0.1  # 0.1 / 0.21736 − 1 = −54.0%: lower TTFT is better
    c = compare_results([("a", _result(a)), ("b", _result(b))])
    console = Console(width=100, file=io.StringIO(), record=True, color_system="truecolor")
    console.print(comparison_view(c))
    text = console.export_text(clear=False)
    row = next(line for line in text.splitlines() if line.startswith("TTFT p99"))
    assert row.split()[-3:] == ["100", "ms", "−54.0%"]
    html = console.export_html(inline_styles=True)
    assert "color: #008000" in html.split("−54.0%")[0].rsplit("<span", 1)[-1]


def _with_points(points: list[tuple[float, float]], gpus: int) -> BenchResult:
    """A run whose probes have the given (output tokens/s, median TPOT s)."""
    data = _data()
    base = data["probes"][0]
    data["gpus"] = gpus
    data["single_stream"] = None
    data["probes"] = []
    for i, (tok_s, tpot) in enumerate(points, 1):
        p = json.loads(json.dumps(base))
        p["index"], p["output_tokens_per_s"] = i, tok_s
        p["tpot_s"]["p50"] = tpot
        data["probes"].append(p)
    return _result(data)


def test_pareto_points_and_frontier_by_hand() -> None:
    # run a (1 GPU): (1000 tok/s, 20 ms) → 1000/GPU at 50 tok/s/user; (3000, 50 ms) → 3000 at 20
    # run b (2 GPUs): (2400, 10 ms) → 1200/GPU at 100; (4000, 40 ms) → 2000/GPU at 25
    a = _with_points([(1000, 0.020), (3000, 0.050)], gpus=1)
    b = _with_points([(2400, 0.010), (4000, 0.040)], gpus=2)
    c = compare_results([("a", a), ("b", b)])
    got = [
        (
            p.label,
            p.probe_index,
            round(p.output_tok_s_per_gpu),
            round(p.interactivity_tok_s_per_user),
        )
        for p in c.pareto
    ]
    assert got == [("b", 1, 1200, 100), ("a", 1, 1000, 50), ("b", 2, 2000, 25), ("a", 2, 3000, 20)]
    # a/1 (1000 at 50) is beaten by b/1 (1200 at 100) on both axes; the others are not beaten
    assert [p.on_frontier for p in c.pareto] == [True, False, True, True]
    buf = io.StringIO()
    Console(file=buf, width=120).print(comparison_view(c))
    text = buf.getvalue()
    assert "Pareto frontier" in text and "★ b" in text and "★ a" in text


def test_simulator_settings_alone_are_named_not_like_for_like() -> None:
    """Two simulated runs that differ only in sim.efficiency: the goodput change is the
    simulator's setting, and compare says so (issue 21: +178 % with no line before)."""
    a, b = _data(), _data()
    b["spec"]["sim"]["efficiency"] = 0.25
    b["boundary"]["goodput_output_tokens_per_s"] *= 2.78
    c = compare_results([("a", _result(a)), ("b", _result(b))])
    assert c.warnings == (
        "runs differ in simulator settings (sim.efficiency: a 0.5; b 0.25): "
        "differences are not like for like",
    )
    assert c.simulated == (True, True)


def test_spec_diff_names_each_section_once_and_skips_the_endpoint() -> None:
    a, b = _data(), _data()
    b["spec"]["endpoint"]["api"] = "chat"  # the endpoint is the system under test: no line
    b["spec"]["search"]["max_probes"] = 7
    b["spec"]["search"]["precision"] = 0.02
    b["spec"]["slo"]["max_error_rate"] = 0.01
    b["spec"]["hardware"]["gpus"] = 4  # named by the GPU-count check, not twice
    b["gpus"] = 4
    c = compare_results([("a", _result(a)), ("b", _result(b))])
    assert c.warnings == (
        "runs differ in GPU counts (a: 2; b: 4): differences are not like for like",
        "runs differ in SLO settings (slo.max_error_rate: a 0.05; b 0.01): "
        "differences are not like for like",
        "runs differ in search settings (search.max_probes: a 20; b 7 | search.precision: "
        "a 0.05; b 0.02): differences are not like for like",
    )
    # an endpoint run's sim section served nothing: not compared; what served them is
    b["target"] = {"kind": "endpoint", "base_url": "http://127.0.0.1:9/v1"}
    b["spec"]["sim"]["efficiency"] = 0.9
    c = compare_results([("a", _result(a)), ("b", _result(b))])
    assert c.warnings[0] == (
        "runs differ in what served them (a: tokenwatt simulator; b: an endpoint): "
        "simulated figures are not measured"
    )
    assert not any("simulator settings" in w for w in c.warnings)
    assert c.simulated == (True, False)


def test_simulated_runs_are_marked_in_the_comparison_view() -> None:
    a, b = _data(), _data()
    b["target"] = {"kind": "endpoint", "base_url": "http://127.0.0.1:9/v1"}
    c = compare_results([("sim-run", _result(a)), ("real-run", _result(b))])
    buf = io.StringIO()
    Console(file=buf, width=200).print(comparison_view(c))
    lines = buf.getvalue().splitlines()
    header = next(line for line in lines if "sim-run" in line and "real-run" in line)
    assert "sim-run (base) SIMULATED" in header and "real-run SIMULATED" not in header
    # under both tables, the one wording; every Pareto row of the simulated run is marked
    note = f"sim-run: {SIMULATED_NOTE}"[:60]
    assert sum(note in x for x in lines) == 2
    rows = [x for x in lines if x.lstrip("★ ").startswith(("sim-run ", "real-run "))]
    assert rows and all(("SIMULATED" in x) == ("sim-run" in x) for x in rows)


def test_pareto_frontier_is_drawn_over_passing_probes_only() -> None:
    # a/1 (1000/GPU at 50 tok/s/user), a/2 (3000 at 20); b/1 (2000 at 100) would beat a/1 on
    # both axes but failed the SLO; b/2 (900 at 25) is beaten by a/1
    a = _with_points([(1000, 0.020), (3000, 0.050)], gpus=1)
    b = _with_points([(2000, 0.010), (900, 0.040)], gpus=1)
    b.probes[0].slo_passed = False
    c = compare_results([("a", a), ("b", b)])
    starred = {(p.label, p.probe_index) for p in c.pareto if p.on_frontier}
    assert starred == {("a", 1), ("a", 2)}
    failed = next(p for p in c.pareto if (p.label, p.probe_index) == ("b", 1))
    assert not failed.on_frontier and not failed.slo_passed
    buf = io.StringIO()
    Console(file=buf, width=120).print(comparison_view(c))
    row = next(x for x in buf.getvalue().splitlines() if "fail" in x.split()[-1:])
    assert "★" not in row


def test_a_standalone_simulator_is_simulated_and_named_beside_others() -> None:
    """An endpoint that said it is the simulator (``target.server_identity``): SIMULATED like a
    run that started its own, and compare says the simulators differ (a standalone one's
    settings are not recorded); beside a measured endpoint, that they are not measured."""
    a, b, c = _data(), _data(), _data()
    b["target"] = {
        "kind": "endpoint",
        "base_url": "http://127.0.0.1:9/v1",
        "server_identity": "tokenwatt-sim 0.1.0",
    }
    c["target"] = {"kind": "endpoint", "base_url": "http://127.0.0.1:9/v1"}
    rb = _result(b)
    assert rb.simulated and not _result(c).simulated
    both = compare_results([("a", _result(a)), ("b", rb)])
    assert both.simulated == (True, True)
    assert both.warnings[0] == (
        "runs differ in the simulator that served them (a: tokenwatt simulator; b: a standalone "
        "tokenwatt-sim 0.1.0): a standalone simulator's settings are not recorded, so its "
        "figures may not be like for like"
    )
    assert not any("simulator settings" in w for w in both.warnings)
    real = compare_results([("b", rb), ("c", _result(c))])
    assert real.warnings[0] == (
        "runs differ in what served them (b: a standalone tokenwatt-sim 0.1.0; c: an endpoint): "
        "simulated figures are not measured"
    )
    b["geometry"]["name"] = "Llama-3.1-8B"  # and a model that differs is named too
    models = compare_results([("a", _result(a)), ("b", _result(b))])
    assert any(w.startswith("runs differ in models (a: Qwen3-30B-A3B") for w in models.warnings)
