"""The views of a prediction say PREDICTED and never pass for a measurement: the terminal
tables, the HTML page (the PREDICTED curve beside the measured one), and ``report``/
``compare``, which refuse a saved prediction."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from html import escape
from pathlib import Path
from typing import Any

import pytest

from test_predict_cli import QUICK, _rows_csv, _sim_rows
from tokenwatt import cli
from tokenwatt.report.predicted import predicted_tables

RESULT = Path(__file__).parent / "fixtures" / "report" / "probe-v2"


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr()
    return int(ended.value.code or 0), out.out, out.err


@pytest.fixture(scope="module")
def prediction(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("pred")
    path = _rows_csv(tmp / "rows.csv", _sim_rows()[:2])
    mp = pytest.MonkeyPatch()
    argv = ["tokenwatt", "predict", str(path), "--to", "b200", "--json",
            "--price-per-gpu-hour", "4", "--html", str(tmp / "p.html"), *QUICK]  # fmt: skip
    mp.setattr(sys, "argv", argv)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as ended:
        cli.main()
    mp.undo()
    assert not ended.value.code
    data: dict[str, Any] = json.loads(buf.getvalue())
    data["_html"] = (tmp / "p.html").read_text()
    return data


def test_every_predicted_column_is_labelled(prediction: dict[str, Any]) -> None:
    tables = predicted_tables(prediction)
    assert len(tables) == 2  # steps, and serving (the rows carry a workload)
    for table in tables:
        assert str(table.title).startswith("PREDICTED")
        heads = [str(c.header) for c in table.columns]
        measured = {"point", "B", "measured TPOT ms", "rate req/s"}
        assert all(h.startswith("PREDICTED") for h in heads if h not in measured), heads
    serving = [str(c.header) for c in tables[1].columns]
    assert {"PREDICTED TTFT ms", "PREDICTED boundary req/s", "PREDICTED $/Mtok"} <= set(serving)


def test_terminal_prints_predicted_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    path = _rows_csv(tmp_path / "rows.csv", _sim_rows()[:1])
    rc, out, err = _run(monkeypatch, capsys, "predict", str(path), "--to", "b200", *QUICK)
    assert rc == 0, err
    assert "PREDICTED serving on NVIDIA B200" in out
    assert "PREDICTED $/Mtok" in out
    assert "no GPU price: give --price-per-gpu-hour" in out


def test_html_draws_predicted_beside_measured(prediction: dict[str, Any]) -> None:
    page = prediction["_html"]
    assert page.count("<svg") == 1
    assert "<h1>PREDICTED on NVIDIA B200" in page and "not a measurement" in page
    svg = page[page.index("<svg") : page.index("</svg>")]
    # the figure's own legend names both curves, and its watermark says PREDICTED
    assert "measured: 2 published rows" in svg
    assert "PREDICTED on NVIDIA B200" in svg and "PREDICTED 95 % interval" in svg
    # every predicted figure of the table is in the page, beside the measured TPOT
    for p in prediction["points"]:
        assert f"{p['measured']['tpot_ms']:.2f}" in page
        assert f"{p['predicted']['tpot_ms']:.2f}" in page
        assert f"{p['predicted']['usd_per_mtok']:.3g}" in page
    assert "http://" not in page.replace("http://www.w3.org", "")


def test_html_is_never_a_results_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    rc, _, err = _run(monkeypatch, capsys, "predict", str(RESULT), "--to", "b200",
                      "--html", str(out))  # fmt: skip
    assert rc == 2
    assert "never written as a result's report" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_compare_and_report_refuse_a_saved_prediction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = _run(monkeypatch, capsys, "predict", str(RESULT), "--to", "b200", "--json")
    assert rc == 0, err
    folder = tmp_path / "pred"
    folder.mkdir()
    (folder / "result.json").write_text(out)
    for args in (["compare", str(folder), str(RESULT)], ["report", str(folder)]):
        rc, _, err = _run(monkeypatch, capsys, *args)
        assert rc == 2, args
        assert "PREDICTED figures from `tokenwatt predict`, not a measurement" in err
        assert "Traceback" not in err


def test_html_says_the_assumptions_the_terminal_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """To another vendor with another GPU count: both assumptions are notes on the page, word
    for word as in ``--json``, after the calibration's own notes; to the same vendor the
    calibration's notes stay and no vendor note is drawn."""
    page = tmp_path / "p.html"
    rc, out, err = _run(monkeypatch, capsys, "predict", str(RESULT), "--to", "mi300x",
                        "--to-gpus", "2", "--json", "--html", str(page), *QUICK)  # fmt: skip
    assert rc == 0, err
    said = json.loads(out)["assumptions"]
    assert [s.split(" ")[0] for s in said] == ["tensor", "another", "long"]
    html = page.read_text()
    notes = [*json.loads(out)["calibration"]["notes"], *said]
    assert len(notes) > len(said)
    assert "".join(f"<li>note: {escape(s)}</li>" for s in notes) in html
    same = prediction_page(tmp_path, monkeypatch, capsys)
    assert "<li>note: one batch size only" in same and "another vendor" not in same


def prediction_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    page = tmp_path / "same.html"
    rc, _, err = _run(monkeypatch, capsys, "predict", str(RESULT), "--to", "b200",
                      "--html", str(page), *QUICK)  # fmt: skip
    assert rc == 0, err
    return page.read_text()
