"""Run the demo N times and hold each self-check warning against the simulator's truth log.

The demo's self-checks speak about the run (the client sent late, the client and the engine
disagree on B or s, a p99 rests on few requests). On a loaded machine a check must still say
only what is true: this script runs the demo's spec as the demo does (``tokenwatt bench`` on
the bundled ``demo.yaml``, the simulator in its own process) with the simulator's per-step
truth log on, then prints, per run, the load average, every warning, and for each probe the
client's and the engine's B and s beside the truth over the probe's own window:

* truth B (time-weighted): the decode batch of each step weighted by the step's share of the
  window, over decode time; the client's B = T·τ estimates this one;
* truth B (per step): emitted decode tokens ÷ decode steps, the engine counters' definition;
* truth s: decode steps per second of the window.

A disagreement warning is *contradicted* when both sides are within their tolerance of the
truth by their own definitions (the figures agree with what happened, the warning says they
do not); a lateness warning is the client's own measurement and is not judged here. Prints;
asserts nothing. Usage: ``python benchmarks/demo_selfchecks.py --runs 10 --out /tmp/demos``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tokenwatt.report.checks import self_checks
from tokenwatt.result import BenchResult

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src/tokenwatt/examples/demo.yaml"


def truth_over(steps: list[dict[str, Any]], w0: int, w1: int) -> dict[str, float]:
    """B (time-weighted and per step) and s over [w0, w1) from the truth log, edges pro rata."""
    dec_t = batch_t = n = tokens = 0.0
    for s in steps:
        a, b = s["sched_start_ns"], s["deadline_ns"]
        lo, hi = max(a, w0), min(b, w1)
        if hi <= lo or b <= a or s["batch"] <= 0:
            continue
        f = (hi - lo) / (b - a)
        dec_t += (hi - lo) / 1e9
        batch_t += (hi - lo) / 1e9 * s["batch"]
        n += f
        tokens += f * s["batch"]
    span_s = (w1 - w0) / 1e9
    return {
        "B_time": batch_t / dec_t if dec_t else float("nan"),
        "B_step": tokens / n if n else float("nan"),
        "s": n / span_s if span_s else float("nan"),
    }


def run_once(out: Path) -> int:
    truth = out / "truth.jsonl"
    cmd = [sys.executable, "-m", "tokenwatt", "bench", str(DEMO), "--out", str(out)]
    cmd += ["--overwrite", "-q", "--set", f"sim.truth_log={truth}"]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).returncode


def judge(out: Path) -> tuple[list[str], int]:
    result = BenchResult.model_validate(orjson.loads((out / "result.json").read_bytes()))
    steps = [orjson.loads(line) for line in (out / "truth.jsonl").read_bytes().splitlines()]
    lines, contradicted = [], 0
    for c in self_checks(result):
        if c.level == "warning":
            lines.append(f"  warning: {c.message}")
    probes = [*([result.single_stream] if result.single_stream else []), *result.probes]
    for p in probes:
        if p.engine is None or p.window_start_ns is None or p.window_end_ns is None:
            continue
        t = truth_over(steps, p.window_start_ns, p.window_end_ns)
        for a in p.engine.agreements:
            if a.figure not in ("B", "s") or a.engine is None:
                continue
            true_client = t["s"] if a.figure == "s" else t["B_time"]
            true_engine = t["s"] if a.figure == "s" else t["B_step"]
            c_err = a.client / true_client - 1
            e_err = a.engine / true_engine - 1
            said = "agree" if a.ok else "DISAGREE"
            bad = a.ok is False and abs(c_err) <= a.tolerance and abs(e_err) <= a.tolerance
            contradicted += bad
            lines.append(
                f"  probe {p.index} {a.figure}: {said} (client {a.client:.3g}, engine "
                f"{a.engine:.3g}, ±{a.tolerance:.1%}); client vs truth {c_err:+.1%}, engine vs "
                f"truth {e_err:+.1%}{'  <- CONTRADICTED by the truth log' if bad else ''}"
            )
    return lines, contradicted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("/tmp/tokenwatt-demo-selfchecks"))
    args = ap.parse_args()
    total = 0
    for i in range(args.runs):
        out = args.out / f"run-{i:02d}"
        out.mkdir(parents=True, exist_ok=True)
        load_before = os.getloadavg()[0]
        rc = run_once(out)
        load_after = os.getloadavg()[0]
        print(f"run {i}: exit {rc}, load average {load_before:.1f} → {load_after:.1f}")
        if rc != 0 or not (out / "result.json").exists():
            continue
        lines, bad = judge(out)
        total += bad
        print("\n".join(lines))
    print(f"warnings the truth log contradicts: {total} in {args.runs} runs")


if __name__ == "__main__":
    main()
