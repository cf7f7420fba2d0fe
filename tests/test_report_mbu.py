"""MBU in the reports: the headline and the decode-only figure side by side, every raised flag
with its direction, and an MBU above 100 % shown as a refusal (never a percentage) in the
terminal report, the HTML report and the self-checks."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from tokenwatt.geometry import load_geometry
from tokenwatt.metrics.mbu import StepRegime, compute_mbu
from tokenwatt.report.checks import self_checks
from tokenwatt.report.format import fmt_pct
from tokenwatt.report.html import render_html
from tokenwatt.report.terminal import ResultView
from tokenwatt.result import BenchResult, Mbu

FIXTURES = Path(__file__).parent / "fixtures" / "report"
MOE = load_geometry("qwen3-30b-a3b")


def _mbu(bandwidth_bytes_per_s: float) -> Mbu:
    """B = 10 at τ = 20 ms with 20 prompts/s arriving: mixed steps, idle share, uniform routing."""
    return compute_mbu(
        MOE,
        output_tokens_per_s=10 / 0.02,
        itl_token_weighted_s=0.02,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        mean_context_per_token=0.0,
        kv_bytes_per_output_token=0.0,
        regime=StepRegime(
            request_rate_rps=20.0,
            mean_prompt_tokens=512.0,
            mean_output_tokens=1e9,
            idle_fraction=0.1,
        ),
    )


def _result(detail: Mbu) -> BenchResult:
    data: dict[str, Any] = json.loads((FIXTURES / "result-v1.json").read_text("utf-8"))
    data["boundary"]["mbu"] = detail.mbu
    data["boundary"]["mbu_detail"] = detail.model_dump()
    return BenchResult.model_validate(data)


def _terminal(result: BenchResult) -> str:
    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    console.print(ResultView(result))
    return " ".join(console.export_text().split())


def test_both_figures_and_flags_with_direction() -> None:
    d = _mbu(3.35e12)
    assert d.mbu is not None and d.mbu_decode_only is not None
    assert d.mbu_decode_only < d.mbu  # prompt-routed experts counted in the headline only
    assert d.flags.mixed_steps and d.flags.idle and d.flags.moe_uniform_routing_upper_bound
    text = _terminal(_result(d))
    assert f"{fmt_pct(d.mbu)} (weights" in text
    assert f"decode-only MBU {fmt_pct(d.mbu_decode_only)}" in text
    assert (
        "flag mixed_steps: headline counts prompt-routed experts; decode-only leaves them" in text
    )
    assert "flag idle: corrected by the measured busy share" in text
    # routing not measured: the band beside the headline, the flag with both directions
    assert d.flags.routing_unmeasured and d.mbu_lower_bound is not None
    assert d.mbu_lower_bound < d.mbu - 0.01
    assert f"routing unmeasured: {fmt_pct(d.mbu_lower_bound)}–{fmt_pct(d.mbu)}" in text
    assert "flag routing_unmeasured: routing not measured: both figures are uniform upper" in text
    html = render_html(_result(d))
    assert f"decode-only MBU {fmt_pct(d.mbu_decode_only)}" in html
    assert "flag moe_uniform_routing_upper_bound: reads high if routing is skewed" in html
    assert f"routing unmeasured: {fmt_pct(d.mbu_lower_bound)}" in html


def test_above_rated_bandwidth_is_a_refusal_everywhere() -> None:
    d = _mbu(3.35e10)  # a hundredth of an H100: the same traffic reads far above 100 %
    assert d.mbu is None and d.flags.above_rated_bandwidth
    result = _result(d)
    text = _terminal(result)
    assert "MBU refused: above the rated bandwidth (an input is wrong: see the self-checks)" in text
    assert "MBU refused: the derived traffic is" in text and "hardware.gpus" in text
    assert "(weights" not in text  # no split, no figure
    warnings = [c.message for c in self_checks(result) if c.level == "warning"]
    assert any(w.startswith("MBU refused at probe") and "hardware.gpus" in w for w in warnings)
    html = render_html(result)
    assert "refused: above the rated bandwidth" in html and "hardware.gpus" in html


def _page_text(html: str) -> str:
    """The HTML's visible text: the embedded result JSON and the tags left out."""
    import re

    body = html.split('<script type="application/json"', 1)[0]
    return " ".join(re.sub(r"<[^>]+>", " ", body).split())


def test_each_mbu_line_and_note_is_said_once() -> None:
    """The figure once (the headline), each flag once with its direction, each note once:
    no note restated by its flag's line, none again among the self-checks."""
    d = _mbu(3.35e12)
    d.notes.append("a note no flag restates")
    result = _result(d)
    assert d.mbu_decode_only is not None
    for text in (_terminal(result), _page_text(render_html(result))):
        assert text.count(f"decode-only MBU {fmt_pct(d.mbu_decode_only)}") == 1
        assert text.count("a note no flag restates") == 1
        for flag_prose in d.flags.notes():  # said by the flag's line, not again as prose
            assert " ".join(flag_prose.split()) not in text
        assert text.count("reads high if routing is skewed") == 1


def test_a_refusal_is_said_once() -> None:
    d = _mbu(3.35e10)
    result = _result(d)
    reason = " ".join(d.notes[0].split())
    for text in (_terminal(result), _page_text(render_html(result))):
        assert text.count(reason) == 1  # the self-checks' warning
        assert text.count("refused: above the rated bandwidth") == 1  # the headline's MBU
