"""`tokenwatt report` and `tokenwatt compare` as a user runs them: a subprocess, exit codes,
one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run-a"
    d.mkdir()
    shutil.copy(FIXTURES / "result-v1.json", d / "result.json")
    return d


def test_report_rerenders_terminal_and_html(run_dir: Path) -> None:
    proc = _run("report", str(run_dir), "--width", "100")
    assert proc.returncode == 0, proc.stderr
    expected = (FIXTURES / "terminal-v1.txt").read_text("utf-8")
    # The same text the library renders, followed by where the HTML went.
    assert proc.stdout.startswith(expected.rstrip("\n").split("\n")[0])
    assert [line.rstrip() for line in proc.stdout.splitlines()[: len(expected.splitlines())]] == [
        line.rstrip() for line in expected.splitlines()
    ]
    assert proc.stdout.rstrip().endswith(f"report: {run_dir / 'report.html'}")
    html = (run_dir / "report.html").read_text("utf-8")
    assert '<script type="application/json" id="result-json">' in html
    assert proc.stderr == ""


def test_report_accepts_the_file_and_no_html(run_dir: Path) -> None:
    proc = _run("report", str(run_dir / "result.json"), "--no-html")
    assert proc.returncode == 0, proc.stderr
    assert "SLO goodput" in proc.stdout
    assert not (run_dir / "report.html").exists()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "has no result.json"),
        ("{oops", "not valid JSON"),
        ('{"schema_version": 7}', "unknown schema_version 7"),
    ],
)
def test_report_bad_input_is_one_line_exit_2(
    tmp_path: Path, content: str | None, fragment: str
) -> None:
    if content is not None:
        (tmp_path / "result.json").write_text(content, "utf-8")
    proc = _run("report", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in proc.stderr


def test_report_missing_dir(tmp_path: Path) -> None:
    proc = _run("report", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: {tmp_path / 'nope'} not found; give a run directory written by `tokenwatt bench`"
    )


def test_compare_side_by_side(run_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "run-b"
    other.mkdir()
    data = json.loads((run_dir / "result.json").read_text("utf-8"))
    b = data["boundary"]
    b["goodput_output_tokens_per_s"] = 2605.26  # +10.0% over 2,368.42
    b["tokens_per_joule"] = 1.737  # −10.0% under 1.93
    data["gpus"] = 4
    (other / "result.json").write_text(json.dumps(data), "utf-8")
    proc = _run("compare", str(run_dir), str(other), "--width", "100")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "run-a (base)" in out and "run-b" in out
    row = next(line for line in out.splitlines() if line.startswith("SLO goodput"))
    assert row.split() == ["SLO", "goodput", "(output", "tok/s)", "2,368", "2,605", "+10.0%"]
    row = next(line for line in out.splitlines() if line.startswith("tokens per joule"))
    assert row.split()[-3:] == ["1.93", "1.74", "−10.0%"]
    assert "! runs differ in GPU counts (run-a: 2; run-b: 4)" in out


def test_compare_needs_two_readable_runs(run_dir: Path, tmp_path: Path) -> None:
    proc = _run("compare", str(run_dir))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: compare needs at least two run directories"
    proc = _run("compare", str(run_dir), str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "missing not found" in proc.stderr


def test_report_and_compare_read_an_old_probe_only_folder(tmp_path: Path) -> None:
    """A folder holding only a pre-schema-3 ``probe.json`` (no geometry): the terminal and
    the HTML report render it, and compare sets it beside a probe's result.json."""
    fixtures = Path(__file__).parent / "fixtures" / "report"
    only = tmp_path / "only"
    shutil.copytree(fixtures / "probe-v2-only", only)
    proc = _run("report", str(only), "--width", "120")
    assert proc.returncode == 0, proc.stderr
    assert "one probe, SLO met" in proc.stdout and "Traceback" not in proc.stderr
    html = (only / "report.html").read_text("utf-8")
    assert "no model geometry in this result" in html  # the MBU plots need one
    cmp = _run("compare", str(only), str(fixtures / "probe-v2"))
    assert cmp.returncode == 0, cmp.stderr
    assert "achieved rate" in cmp.stdout
