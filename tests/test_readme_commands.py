"""README's commands run as written: each command is parsed out of README.md, so a change to
README changes what runs here.

The simulator is started by README's own ``tokenwatt sim`` line, with ``--port 0`` added (a
free port; README's 8000 may be taken), and README's ``127.0.0.1:8000`` is pointed at the port
it announced. The default suite runs README's probe form, shortened by README's own "first
look" flags, then README's ``report`` and ``compare`` on its result: the model name README
passes is served, and the simulated result says SIMULATED in the terminal, in report.html and
in compare. README's bench flag form (whole and shortened) and the spec form are real-time runs of a
minute or more: ``slow``; README's demo is the command ``test_bench`` runs (``slow``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenwatt.metrics.boundary import LOW_END_MIN_BELOW, LOW_END_MIN_BELOW_SHORT

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SERVING = re.compile(r"serving (http://127\.0\.0\.1:\d+)/v1")


def readme_commands() -> list[list[str]]:
    """Every ``tokenwatt`` command of README's bash blocks, continuation lines joined and
    comments dropped, as argument lists."""
    text = README.read_text("utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                args = shlex.split(part, comments=True)
                if args and args[0] == "tokenwatt":
                    out.append(args)
    return out


def first_look_flags() -> list[str]:
    """The flags README gives for a first look (its inline code after "For a first look")."""
    text = README.read_text("utf-8").replace("\n", " ")
    m = re.search(r"For a first look[^`]*`([^`]+)`", text)
    assert m, "README lost its first-look flags"
    return shlex.split(m.group(1))


def _command(sub: str, *has: str) -> list[str]:
    found = [c for c in readme_commands() if c[1] == sub and all(h in c for h in has)]
    assert found, f"README has no `tokenwatt {sub}` command with {has}"
    return found[0]


def _run(
    args: list[str], cwd: Path, timeout_s: float, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "COLUMNS": "200", **env},
        check=False,
    )


@pytest.fixture(scope="module")
def readme_sim() -> Iterator[str]:
    """README's simulator (its own line, on a free port); yields its base URL."""
    args = _command("sim")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenwatt", *args[1:], "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = SERVING.search(line)
        assert m, f"README's simulator did not announce a URL: {line!r}"
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _pointed(args: list[str], url: str) -> list[str]:
    return [a.replace("http://127.0.0.1:8000", url) for a in args]


def test_readme_names_the_commands_a_first_hour_needs() -> None:
    cmds = readme_commands()
    subs = [c[1] for c in cmds]
    for sub in ("demo", "bench", "probe", "sim", "report", "compare"):
        assert sub in subs, f"README lost its `tokenwatt {sub}` command"
    bench = _command("bench", "--base-url")
    sim = _command("sim")
    # the flag form names a served model the README's simulator must answer to
    assert bench[bench.index("--model") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert sim[sim.index("--model") + 1] == "llama-3.1-8b"
    # README's endpoint is where README's simulator listens by default (127.0.0.1:8000; a
    # "localhost" that resolves to ::1 first would miss it)
    assert "--port" not in sim and "--host" not in sim
    assert bench[bench.index("--base-url") + 1] == "http://127.0.0.1:8000"
    probe = _command("probe", "--base-url")
    assert probe[probe.index("--base-url") + 1] == "http://127.0.0.1:8000"
    assert "--duration" in first_look_flags() and "--output-tokens" in first_look_flags()


def test_readme_probe_form_is_served_and_labelled_simulated(
    readme_sim: str, tmp_path: Path
) -> None:
    probe = _pointed(_command("probe", "--base-url"), readme_sim) + first_look_flags()
    done = _run([*probe, "--out", str(tmp_path / "run-a")], tmp_path, 120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIMULATED" in done.stdout  # the terminal, although the spec names no simulator
    report = _command("report")
    shown = _run([*report[:2], str(tmp_path / "run-a")], tmp_path, 120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "SIMULATED" in shown.stdout
    html = (tmp_path / "run-a" / "report.html").read_text("utf-8")
    assert html.count("SIMULATED") >= 3  # the badge on the page, its cards and figures
    result = (tmp_path / "run-a" / "result.json").read_text("utf-8")
    assert '"server_identity": "tokenwatt-sim' in result
    compare = _command("compare")
    both = _run([*compare[:2], str(tmp_path / "run-a"), str(tmp_path / "run-a")], tmp_path, 60)
    assert both.returncode == 0, both.stdout + both.stderr
    assert "SIMULATED" in both.stdout


@pytest.mark.slow
@pytest.mark.timeout(960)
@pytest.mark.parametrize("first_look", [True, False], ids=["first-look", "as-written"])
def test_readme_bench_flag_form_converges(
    readme_sim: str, tmp_path: Path, first_look: bool
) -> None:
    bench = _pointed(_command("bench", "--base-url"), readme_sim)
    extra = first_look_flags() if first_look else []
    done = _run([*bench, *extra, "--out", str(tmp_path / "b")], tmp_path, 900)
    assert done.returncode in (0, 3), done.stdout + done.stderr  # 3: an honest no-boundary
    assert "SIMULATED" in done.stdout
    search = json.loads((tmp_path / "b" / "result.json").read_text("utf-8"))["search"]
    if not first_look:
        assert done.returncode == 0, done.stdout
        assert search["low_end_min_below"] == LOW_END_MIN_BELOW  # 256 output tokens
    elif search["low_end_min_below"] is not None:  # 32 output tokens: the low end farther down
        assert search["low_end_min_below"] == LOW_END_MIN_BELOW_SHORT


def test_readme_demo_is_the_command_run_end_to_end() -> None:
    """README's demo line is exactly the command ``test_bench.test_demo_runs_the_bundled_spec``
    runs end to end (``slow``; it checks the result, the report and the SIMULATED label), so
    README's demo is not run a second time here. A README demo with other flags fails this."""
    assert _command("demo") == ["tokenwatt", "demo"]


@pytest.mark.slow
@pytest.mark.timeout(960)
def test_readme_spec_form_runs(tmp_path: Path) -> None:
    """README's spec lines: copy the example, name the key's variable, bench, report. The
    example's endpoint is a 70B on 8 H100s; README's simulator is started for that node. The
    run is bounded by ``--max-time`` (its search walks up from a low start on this node, 4–7
    min to converge): what this checks is the spec form's plumbing (the copied spec, the key
    from its variable and never in the result, the report from the folder); the flag-form
    tests above check a search that converges."""
    text = README.read_text("utf-8")
    cp = re.search(r"cp (examples/\S+\.yaml) my\.yaml", text)
    assert cp, "README lost its spec form"
    (tmp_path / "my.yaml").write_text((ROOT / cp.group(1)).read_text("utf-8"), "utf-8")
    sim = subprocess.Popen(
        [sys.executable, "-m", "tokenwatt", "sim", "--model", "llama-3.1-70b",
         "--accelerator", "h100-sxm", "--gpus-per-replica", "4", "--replicas", "2",
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert sim.stdout is not None
        m = SERVING.search(sim.stdout.readline())
        assert m
        bench = _command("bench", "my.yaml")
        args = [*bench, "--set", f"endpoint.url={m.group(1)}/v1", *first_look_flags(),
                "--max-time", "90s"]  # fmt: skip
        done = _run(args, tmp_path, 900, VLLM_API_KEY="not-a-real-key")
        assert done.returncode in (0, 3), done.stdout + done.stderr
        assert "SIMULATED" in done.stdout
        assert "not-a-real-key" not in (tmp_path / "results" / "my-run" / "result.json").read_text()
        report = _run(_command("report", "results/my-run"), tmp_path, 120)
        assert report.returncode == 0, report.stdout + report.stderr
    finally:
        sim.terminate()
        sim.wait(timeout=30)
