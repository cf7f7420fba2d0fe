"""Measure how long README's runs take and write docs/howto/run-times.md from the measurement.

    python benchmarks/run_times.py                 # the demo and the flag form, then the page
    python benchmarks/run_times.py --print-only    # measure, print the page, write nothing

Runs README's own commands, parsed out of README.md: ``tokenwatt demo``, and the bench flag
form against README's ``tokenwatt sim`` line (on a free loopback port instead of 8000). Each run
is timed on the wall clock with the load average before and after (a shared machine stretches
every figure), and its result.json is read for the probes, their windows and the stop reason.
The page's prose describes the search as the code runs it; every number on it is this run's.
Takes about 6 minutes on a quiet 2-core machine; each run is killed after ``--timeout`` s.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tokenwatt.load.bench import WARMUP_LIFETIMES
from tokenwatt.result import BenchResult, load_result
from tokenwatt.spec.search import ProbeSettings, SearchSettings

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "howto" / "run-times.md"


def readme_command(sub: str, *has: str) -> list[str]:
    """README's first ``tokenwatt SUB`` command (of its bash blocks) holding every ``has``."""
    text = (ROOT / "README.md").read_text("utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                args = shlex.split(part, comments=True)
                if args[:2] == ["tokenwatt", sub] and all(h in args for h in has):
                    return args
    raise SystemExit(f"README has no `tokenwatt {sub}` command with {has}")


@dataclass
class Timed:
    what: str
    command: str
    wall_s: float
    exit_code: int
    load_before: float
    load_after: float
    result: BenchResult | None


def _timed(what: str, args: list[str], out: Path, timeout_s: float, shown: str) -> Timed:
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args[1:], "--out", str(out)],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    result = load_result(out) if (out / "result.json").is_file() else None
    print(f"{what}: {wall:.1f} s, exit {done.returncode}", flush=True)
    return Timed(what, shown, wall, done.returncode, load0, os.getloadavg()[0], result)


def run_demo(tmp: Path, timeout_s: float) -> Timed:
    args = readme_command("demo")
    return _timed("demo", args, tmp / "demo", timeout_s, shlex.join(args))


def run_flag_form(tmp: Path, timeout_s: float) -> Timed:
    sim_args = readme_command("sim")
    sim = subprocess.Popen(
        [sys.executable, "-m", "tokenwatt", *sim_args[1:], "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert sim.stdout is not None
        m = re.search(r"serving (http://127\.0\.0\.1:\d+)/v1", sim.stdout.readline())
        if m is None:
            raise SystemExit("README's simulator did not start")
        bench = readme_command("bench", "--base-url")
        args = [a.replace("http://127.0.0.1:8000", m.group(1)) for a in bench]
        return _timed("flag form", args, tmp / "flag", timeout_s, shlex.join(bench))
    finally:
        sim.terminate()
        sim.wait(timeout=30)


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):d} s"


def _row(t: Timed) -> str:
    r = t.result
    probes = len(r.probes) if r is not None else 0
    stop = r.search.stop_reason if r is not None and r.search is not None else "—"
    windows = [p.window_s for p in r.probes] if r is not None else []
    span = f"{min(windows):.0f}–{max(windows):.0f} s" if windows else "—"
    return (
        f"| {t.what} | {_mmss(t.wall_s)} | {t.exit_code} | {probes} | {span} | {stop} | "
        f"{t.load_before:.1f} → {t.load_after:.1f} |"
    )


_SHORTER = (
    ("start near the boundary", "`--rate R` (first probe's rate)", "nothing, if R is close"),
    (
        "coarser boundary",
        "`--precision 0.20`",
        "the boundary's interval within ±20 % instead of ±{precision_pct:g} %",
    ),
    (
        "shorter windows",
        "`--duration 20`",
        "noisier p99s: a p99 over 100 requests rests on one request",
    ),
    (
        "fewer requests per window",
        "`--set search.probe.min_requests=100`",
        "the same: the self-check warns when a p99 rests on fewer than 2 requests beyond it",
    ),
    (
        "shorter warm-up",
        "`--set search.probe.warmup_s=3`",
        "a cold cache or a growing queue can leak into the window (the trend check flags it)",
    ),
    ("shorter outputs", "`--output-tokens 128`", "a different workload: say so when comparing"),
    (
        "one point instead of a search",
        "`tokenwatt probe --rate R` or `--concurrency N`",
        "no boundary; one verdict",
    ),
)


def _shorter(precision: float) -> str:
    rows = [f"| {a} | {b} | {c.format(precision_pct=precision * 100)} |" for a, b, c in _SHORTER]
    return "\n".join(["| change | flag | what it costs |", "|---|---|---|", *rows])


def page(runs: list[Timed], when: str) -> str:
    p, s = ProbeSettings(), SearchSettings()
    low = p.min_requests / p.min_duration_s
    rows = "\n".join(_row(t) for t in runs)
    cmds = "\n".join(f"* {t.what}: `{t.command}`" for t in runs)
    return f"""# How long a bench takes, and how to make it shorter

This page is written by `benchmarks/run_times.py` from a measured run ({when}); rerun it to
refresh every figure below.

A bench is a single-stream point ({s.single_stream_requests} requests one at a time), a
short closed-loop staircase that picks the first rate, then a search of probes. Each probe is a
warm-up, a window and a drain (spec `search.probe`, defaults in brackets):

* warm-up `warmup_s` [{p.warmup_s:g} s], stretched to {WARMUP_LIFETIMES:g} request lifetimes
  once one is measured; then the window: at least `min_duration_s` [{p.min_duration_s:g} s]
  **and** at least `min_requests` [{p.min_requests}] requests started in it, at most
  `max_duration_s` [{p.max_duration_s:g} s];
* with `search.sequential` [{s.sequential}] a probe ends as soon as its p99 verdict is decided
  (a clear pass or failure), so near the boundary a probe lasts about as long as its
  {p.min_requests}-odd requests take to arrive, and far from it a few seconds;
* drain: the counted requests finish (at most `drain_timeout_s` [{p.drain_timeout_s:g} s]);
* the interval's low end needs about 770 clean requests below the boundary: its
  probe runs one long window of as many as the end still needs (one warm-up and one
  drain, not one per ~280 requests);
* the search stops when the boundary's 95 % interval is closed at both ends and its half
  width is within `precision` [{s.precision:g}] of its point (`--precision`; at most
  `max_probes` [{s.max_probes}], or `--max-time`), then re-tests one rate and confirms the
  fitted boundary.

## Measured

README's commands as written ({"; ".join(t.what for t in runs)}), on the machine that ran the
script; the load average is the 1-minute figure before → after each run:

{cmds}

| run | wall time | exit | probes | probe windows | stop | load average |
|---|---|---|---|---|---|---|
{rows}

At a low boundary rate (under {p.min_requests} ÷ {p.min_duration_s:g} ≈ {low:.1f} req/s) the
{p.min_requests}-request minimum stretches each window to {p.min_requests} ÷ rate seconds, and
the run takes longer.

## Shorter, in order of what it costs in accuracy

{_shorter(s.precision)}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout", type=float, default=1200, help="per run, seconds")
    ap.add_argument("--print-only", action="store_true", help="print the page, write nothing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run_demo(Path(tmp), args.timeout), run_flag_form(Path(tmp), args.timeout)]
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    text = page(runs, when)
    if args.print_only:
        print(text)
    else:
        PAGE.write_text(text, "utf-8")
        print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
