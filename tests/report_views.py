"""What the report tests share: the bundled version-1 result (optionally edited before it is
validated, so a test states the one change it makes) and a renderable as the plain text a
terminal without colour would show."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from tokenwatt.result import BenchResult

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"


def fixture_result(edit: Callable[[dict[str, Any]], None] | None = None) -> BenchResult:
    """The fixture's result, with ``edit`` applied to its raw JSON first."""
    data = json.loads(FIXTURE.read_text("utf-8"))
    if edit is not None:
        edit(data)
    return BenchResult.model_validate(data)


def plain_text(renderable: object, width: int = 200) -> str:
    """``renderable`` printed at ``width`` columns with no colour, as text."""
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def attach_fit(data: dict[str, Any], point: float, low: float | None, high: float) -> None:
    """A fitted boundary written into a raw result's boundary probe as an older file holds it
    (no ``boundary_rate_leans``): goodput scaled at the probe's own goodput per request/s."""
    b = data["boundary"]
    per = b["goodput_output_tokens_per_s"] / b["achieved_rate_rps"]
    b.update(
        boundary_rate_rps=point,
        rate_interval_rps=[low, high],
        goodput_tokens_per_s_at_boundary=point * per,
        goodput_interval_tokens_per_s=[None if low is None else low * per, high * per],
        confidence=0.95,
    )
