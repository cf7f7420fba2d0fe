"""The command line's error contract: one line, exit 2, the message printed verbatim."""

from __future__ import annotations

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_error_text_is_not_read_as_markup() -> None:
    # Brackets in a message (e.g. "pip install 'tokenwatt[nvidia]'") must reach the user intact.
    out = _run("geometry", "no-such[nvidia]")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert "unknown model 'no-such[nvidia]'" in lines[0]


def test_usage_errors_and_version() -> None:
    assert _run("--version").stdout.startswith("tokenwatt ")
    bad = _run("geometry", "--no-such-flag")
    assert bad.returncode == 2 and "No such option" in bad.stderr
