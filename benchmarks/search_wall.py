"""Wall time of README's flag form against a standalone simulator, and of the demo.

    python benchmarks/search_wall.py            # the flag form (and --demo for the demo)
    python benchmarks/search_wall.py --demo
    python benchmarks/search_wall.py --precisions 0.10 0.05   # README's form at each precision

Starts ``tokenwatt sim --model llama-3.1-8b --accelerator h100-sxm`` on a free loopback port,
runs README's command (SLO p99 TTFT 500 ms, TPOT 50 ms) into a temporary folder, and prints
the wall time, the boundary with its interval, the probes, and the load average before and
after (the machine is shared: a figure without its load average says little). ``--demo`` times
``tokenwatt demo`` the same way. Bounded: the run is killed after ``--timeout`` seconds.
``--precisions`` runs README's form once per ``--precision`` given (a fresh simulator each),
one after the other, and prints each run's wall time, its two-sided interval (the safe rate,
or the end left open and why) and a closing table of both.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenwatt.result import load_result


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _start_sim() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenwatt", "sim", "--model", "llama-3.1-8b",
         "--accelerator", "h100-sxm", "--host", "127.0.0.1", "--port", "0",
         "--served-model-name", "llama-3.1-8b"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"serving (http://\S+)", line)
    if m is None:
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return proc, m.group(1)


def _verdict(passed: bool, interrupted: bool) -> str:
    """An interrupted probe judged nothing: it is neither a pass nor a failure."""
    return "interrupted" if interrupted else "pass" if passed else "fail"


def _summary(out: Path) -> None:
    r = load_result(out)
    b, s = r.boundary, r.search
    print(f"stop: {s.stop_reason if s else None}; start: {s.start if s else None}")
    if b is not None:
        print(
            f"boundary {b.boundary_rate_rps} req/s, interval {b.rate_interval_rps} "
            f"({b.confidence}); goodput {b.goodput_tokens_per_s_at_boundary} "
            f"{b.goodput_interval_tokens_per_s}; measured at {b.rate_rps} offered "
            f"({b.achieved_rate_rps:.3g} achieved): {b.goodput_output_tokens_per_s:.0f} tok/s"
        )
    for p in r.probes:
        print(
            f"  probe {p.index} {p.phase}: {p.rate_rps:.3g} req/s, window {p.window_s:.1f} s, "
            f"{p.slo_detail.judged} judged, misses {p.slo_detail.misses}, "
            f"{_verdict(p.slo_passed, p.interrupted)} ({p.slo_detail.sequential})"
            + (f", in flight {late}" if (late := p.slo_detail.in_flight_misses) else "")
        )
    if b is not None:
        print(
            f"safe rate {b.safe_rate_rps} req/s, "
            f"goodput there {b.goodput_tokens_per_s_at_safe_rate}"
        )
    if s is not None:
        print(f"precision asked {s.precision_target}, reached {s.precision_reached}; "
              f"unclosed: {s.unclosed}")  # fmt: skip
    for d in s.drift if s else []:
        print(f"  drift: {d}")
    for w in r.warnings:
        print(f"  warning: {w}")


def _run_once(args: argparse.Namespace, out: Path, precision: float | None) -> str:
    """One run (the demo, or README's flag form against a fresh simulator, at ``precision``
    when given); returns its table row."""
    sim = None
    if args.demo:
        cmd = [sys.executable, "-m", "tokenwatt", "demo", "--out", str(out)]
    else:
        sim, url = _start_sim()
        cmd = [
            sys.executable, "-m", "tokenwatt", "bench", "--base-url", url,
            "--model", "llama-3.1-8b", "--set", "hardware.accelerator=h100-sxm",
            "--set", "hardware.gpus=1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
            "--out", str(out),
        ]  # fmt: skip
        if precision is not None:
            cmd += ["--precision", str(precision)]
    try:
        before = _loadavg()
        print(f"load average before: {before}")
        t0 = time.perf_counter()
        res = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=args.timeout)
        wall = time.perf_counter() - t0
        after = _loadavg()
        print(f"load average after: {after}")
        print(f"wall time {wall:.1f} s ({wall / 60:.2f} min), exit {res.returncode}")
        if res.returncode not in (0, 3):
            print(res.stdout[-3000:], res.stderr[-3000:])
            return (
                f"| {precision} | {wall:.0f} s | exit {res.returncode} | | | {before} → {after} |"
            )
        print(res.stdout[-4000:])
        _summary(out)
        r = load_result(out)
        b, s = r.boundary, r.search
        interval = None if b is None else b.rate_interval_rps
        half = None if s is None or s.precision_reached is None else f"{s.precision_reached:.1%}"
        stop = s.stop_reason if s else None
        return (
            f"| {precision} | {wall:.0f} s ({wall / 60:.1f} min) | {stop} | {interval} "
            f"(half width {half}) | {None if b is None else b.safe_rate_rps} | "
            f"{before} → {after} |"
        )
    finally:
        if sim is not None:
            sim.terminate()
            sim.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--timeout", type=float, default=1500)
    ap.add_argument("--keep", type=Path, default=None, help="write the run here and keep it")
    ap.add_argument(
        "--precisions", type=float, nargs="+", default=None,
        help="README's form once per --precision (e.g. 0.10 0.05)",
    )  # fmt: skip
    args = ap.parse_args()
    rows = []
    for k, precision in enumerate(args.precisions or [None]):
        with tempfile.TemporaryDirectory() as tmp:
            out = args.keep / f"run-{k}" if args.keep is not None else Path(tmp) / "run"
            print(f"--- precision {precision}")
            rows.append(_run_once(args, out, precision))
    print("| precision | wall time | stop | interval (req/s) | safe rate | load average |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
