"""Issue 23, item 11: small things a user meets, each a one-line refusal or a note where a
person reads (was: a traceback, a silent drop, a 90-line traceback after 25 s of measuring,
a flag ignored without a word, a preset standing in for a repo id said only in result.json)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenwatt.errors import SpecError
from tokenwatt.spec import parse_spec


def _tw(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://127.0.0.1:70000/v1", "port '70000' is not a port"),
        ("http://127.0.0.1:8000/v1?x=y", "must not carry a query string"),
        ("http://127.0.0.1:8000?x=y", "must not carry a query string"),
        ("http://127.0.0.1:8000/v1#frag", "must not carry a query string"),
    ],
)
def test_endpoint_urls_that_cannot_be_sent(url: str, match: str) -> None:
    spec = {
        "name": "u",
        "endpoint": {"url": url},
        "model": {"source": "llama-3.1-8b"},
        "hardware": {"accelerator": "h100-sxm"},
        "server_metrics": {"url": url.replace("/v1", "/metrics")},
    }
    with pytest.raises(SpecError, match=match) as err:
        parse_spec(spec)
    assert "\n" not in str(err.value) and "endpoint.url" in str(err.value)


def test_base_url_with_a_query_is_one_line_exit_2() -> None:
    proc = _tw("probe", "--base-url", "http://127.0.0.1:9?x=y", "--model", "llama-3.1-8b",
               "--set", "hardware.accelerator=h100-sxm", "--rate", "1")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "must not carry a query string" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["probe", "bench"])
def test_out_under_proc_is_refused_before_measuring(command: str) -> None:
    extra = ["--rate", "1"] if command == "probe" else []
    proc = _tw(command, "--base-url", "sim", "--model", "llama-3.1-8b",
               "--set", "hardware.accelerator=h100-sxm", "--out", "/proc/tokenwatt-out",
               *extra)  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    assert "--out: cannot create a folder in /proc" in proc.stderr
    assert "Traceback" not in proc.stderr and "sim" not in proc.stdout.lower()


@pytest.mark.timeout(150)
def test_closed_loop_workers_and_an_uncached_repo_id_are_said(tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = _tw("probe", "--base-url", "sim", "--model", "meta-llama/Llama-3.1-8B",
               "--set", "hardware.accelerator=h100-sxm", "--concurrency", "1",
               "--max-requests", "2", "--workers", "2", "--out", str(out),
               "--output-tokens", "16", "--warmup", "0",  # the notes, not the figures
               env={"HF_HOME": str(tmp_path / "hf")})  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = " ".join(proc.stdout.split())
    assert "note: --workers/--ray are not used in a closed loop" in text
    assert "warning: model geometry from the bundled preset llama-3.1-8b" in text
    assert "is not in the local HF cache" in text
