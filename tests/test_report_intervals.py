"""The headline probe's intervals in the terminal and HTML reports: "x (lo–hi, 95 %)"."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from tokenwatt.report.html import render_html
from tokenwatt.report.intervals_text import interval_rows
from tokenwatt.report.terminal import ResultView
from tokenwatt.result import BenchResult, FigureIntervals

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def _result(with_intervals: bool = True) -> BenchResult:
    result = BenchResult.model_validate(
        json.loads((FIXTURES / "result-v1.json").read_text("utf-8"))
    )
    b = result.boundary
    assert b is not None and b.mbu is not None
    if with_intervals:
        b.intervals = FigureIntervals(
            confidence=0.95,
            blocks=10,
            block_s=6.0,
            output_tokens_per_s=(b.output_tokens_per_s * 0.95, b.output_tokens_per_s * 1.05),
            mbu=(b.mbu - 0.021, b.mbu + 0.021),
            ttft_p99_s=(0.1, None),
            mbu_window_for_1pt_s=264.6,
            notes=["MBU ±2.1 pt (95%) over this 60 s window: a window of about 265 s would ..."],
        )
    return result


def _terminal(result: BenchResult) -> str:
    console = Console(width=120, file=io.StringIO(), record=True, color_system=None)
    console.print(ResultView(result))
    return console.export_text()


def test_rows_read_point_then_interval() -> None:
    result = _result()
    b = result.boundary
    assert b is not None and b.mbu is not None
    rows = dict(interval_rows(b))
    t = b.output_tokens_per_s
    assert rows["T"] == f"{t:,.0f} tok/s ({t * 0.95:,.0f}–{t * 1.05:,.0f}, 95 %)"
    assert round(b.mbu, 3) == 0.410  # the fixture's MBU, ±2.1 pt
    assert rows["MBU"] == "41.0 % (38.9–43.1, 95 %)"
    assert rows["TTFT p99"].endswith("(≥ 100, 95 %)")  # open above: the lower end alone
    assert "(" not in rows["τ"]  # no interval stated: the point alone


def test_terminal_and_html_show_the_intervals_and_the_note() -> None:
    result = _result()
    text = _terminal(result)
    html = render_html(result)
    for label, row in interval_rows(result.boundary):  # type: ignore[arg-type]
        assert row in text, (label, row)
    assert "95 % intervals: batch means over 10 blocks of 6.0 s" in text
    assert "a window of about 265 s" in text
    headline = html[html.index('id="headline"') : html.index('id="checks"')]
    assert "(" in headline and "95 %)" in headline and "about 265 s" in headline


def test_no_intervals_no_block() -> None:
    """An older file (no intervals) renders as before: no interval block, no empty table."""
    result = _result(with_intervals=False)
    assert "intervals: batch means" not in _terminal(result)
    assert 'class="intervals"' not in render_html(result)
