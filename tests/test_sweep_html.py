"""The sweep's picture: frontier over passing points only, labels, simulated marks, the table;
and the CLI's one-line refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tokenwatt.report.sweep_html import PlotPoint, pareto_svg, render_sweep_html
from tokenwatt.sweep_result import OperatingPoint


def op(
    name: str, x: float, y: float, *, sim: bool = False, boundary: bool = True
) -> OperatingPoint:
    return OperatingPoint(
        name=name, simulated=sim, gpus=1, boundary=boundary, tokens_per_s_per_user=x,
        goodput_output_tokens_per_s_per_gpu=y, tokens_per_joule=y / 400, usd_per_mtok=1e3 / y,
        energy_valid=True,
    )  # fmt: skip


def test_frontier_over_passing_points_with_labels() -> None:
    points = [
        PlotPoint("np=1", "ok", None, "points/00", op("np=1", 60.0, 100.0)),  # frontier (x best)
        PlotPoint("np=2", "ok", None, "points/01", op("np=2", 40.0, 250.0)),  # frontier
        PlotPoint("np=3", "ok", None, "points/02", op("np=3", 35.0, 200.0)),  # dominated by np=2
        PlotPoint("np=4", "ok", None, "points/03", op("np=4", 20.0, 900.0, sim=True)),  # frontier
        # no boundary: would dominate everything, but never met the SLO: not plotted
        PlotPoint("np=8", "ok", None, "points/04", op("np=8", 99.0, 9e9, boundary=False)),
        PlotPoint("np=16", "failed", "the server exited with code 1", "points/05", None),
    ]
    assert [p.xy is not None for p in points] == [True] * 4 + [False] * 2
    svg = pareto_svg(points)
    assert svg is not None and "np=4 (sim)" in svg and "np=8" not in svg
    html = render_sweep_html("llama-slots", points)
    rows = html.split("<tbody>")[1].split("</tr>")
    frontier = {r.split("<td")[1].split(">")[1].split("<")[0]: "<td class=\"\">yes</td>" in r
                for r in rows if "<td" in r}  # fmt: skip
    assert frontier == {"np=1": True, "np=2": True, "np=3": False, "np=4 (sim)": True,
                        "np=8": False, "np=16": False}  # fmt: skip
    assert "no boundary" in html and "the server exited with code 1" in html
    assert "$/Mtok" in html and "tokens/J" in html and "J/total tok" in html


def test_no_passing_point_says_so() -> None:
    points = [PlotPoint("a", "failed", "boom", "points/00", None)]
    assert pareto_svg(points) is None
    assert "No point met the SLO" in render_sweep_html("s", points)


def test_bad_sweep_file_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "sweep.yaml"
    bad.write_text("server: {command: 'srv -np {slotz}', health_url: 'http://x'}\n"
                   "grid: {slots: [1]}\nbench: {model: {source: qwen3-8b}}\n")  # fmt: skip
    env_src = str(Path(__file__).parents[1] / "src")
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "sweep", str(bad), "--out", str(tmp_path / "o")],
        capture_output=True, text=True, check=False, env={"PYTHONPATH": env_src, "PATH": ""},
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "{slotz} is not defined" in lines[0]
    assert not (tmp_path / "o").exists()
