"""The safe rate held to the drift checks, in virtual time (``load.safe_rate``): how often a
check at or below the search's safe rate fails, and whether the corrected safe rate holds.

    python benchmarks/safe_rate_flag_virtual.py --case dense --reference 12.96 \
        --precision 0.05 --searches 60

For each seeded search (seeds from 1000) the search as ``tokenwatt bench`` runs it: two-sided
to ``--precision``, started at the reference as the staircase starts it, in the bench's small
first steps; then the drift checks the bench plans (``load.search.drift_check_plan``), with
the seeds and warm-up it gives them, each failing only on as many judged requests as a pass
needs. ``load.safe_rate.checked_safe_rate`` then reads them. The reference is the case's
long-run boundary (``virtual_probe.reference_boundary``; docs/validation.md gives each).
Prints one line per search and the counts: safe rates above the reference, flags raised,
flags on a safe rate that was not above it (false flags), and corrected safe rates above it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.load.bench import CHECK_WARMUP_LIFETIMES, WARMUP_LIFETIMES
from tokenwatt.load.safe_rate import checked_safe_rate
from tokenwatt.load.search import (
    RESOLUTION,
    BoundarySearch,
    ProbeOutcome,
    drift_check_plan,
    probe_seed,
)
from tokenwatt.metrics.sequential import Sprt
from tokenwatt.result import SafeRateFlag
from virtual_probe import CASES, HOLDOUT_CASES, VirtualProbe, VirtualRun

ALLOWED = 0.01  # p99


def one_search(case: str, reference: float, precision: float, seed: int) -> str | None:
    """One search and its checks: a line, or None when the search did not converge with a
    safe rate (no checks run then)."""
    probe = VirtualProbe({**CASES, **HOLDOUT_CASES}[case], lifetimes=WARMUP_LIFETIMES)
    search = BoundarySearch(probe, start_rate_rps=reference, allowed=ALLOWED, seed=seed,
                            max_probes=30, precision=precision, two_sided=True,
                            first_step=1 + 2 * min(precision, RESOLUTION))  # fmt: skip
    probe.search = search
    out = asyncio.run(search.run())
    probe.search, probe.lifetimes = None, CHECK_WARMUP_LIFETIMES
    probe.min_fail_judged = Sprt(ALLOWED).clean_pass_n
    rep, fit, b = out.reported, out.fit, out.boundary
    if out.stop_reason != "converged" or rep is None or rep.low_rps is None:
        return None
    assert fit is not None and fit.rate_rps is not None and b is not None
    checks = []
    for i, (rate, _) in enumerate(drift_check_plan(b.rate_rps, fit.rate_rps, precision)):
        index = len(out.steps) + 1 + i
        checks.append((index, rate, asyncio.run(probe(rate, probe_seed(seed, index)))))
    flag = checked_safe_rate(out.evidence, ALLOWED, rep.low_rps, checks)
    shown = ", ".join(_check_text(r, o) for _, r, o in checks)
    return _line(seed, rep.low_rps, reference, shown, flag)


def _check_text(rate: float, o: ProbeOutcome[VirtualRun]) -> str:
    verdict = "pass" if o.passed else "FAIL"
    e = o.evidence
    counts = f" {max(e.misses.values(), default=0)}/{e.judged}" if e is not None else ""
    return f"{rate:.3f} {verdict}{counts}"


def _line(seed: int, safe: float, reference: float, checks: str, flag: SafeRateFlag | None) -> str:
    above = "ABOVE" if safe > reference else "held"
    if flag is None:
        return f"{seed} safe {safe:.3f} {above}; checks {checks}; no flag"
    new = flag.safe_rate_rps
    now = "withdrawn" if new is None else f"{new:.3f} ({'ABOVE' if new > reference else 'held'})"
    return f"{seed} safe {safe:.3f} {above}; checks {checks}; FLAG: {now}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", default="dense")
    p.add_argument("--reference", type=float, required=True)
    p.add_argument("--precision", type=float, default=0.05)
    p.add_argument("--searches", type=int, default=60)
    p.add_argument("--first-seed", type=int, default=1000)
    a = p.parse_args()
    lines = []
    for seed in range(a.first_seed, a.first_seed + a.searches):
        line = one_search(a.case, a.reference, a.precision, seed)
        print(line if line is not None else f"{seed} not converged", flush=True)
        if line is not None:
            lines.append(line)
    above = sum(" ABOVE;" in x for x in lines)
    flags = [x for x in lines if "FLAG" in x]
    false = sum(" held;" in x for x in flags)
    still = sum("(ABOVE)" in x for x in flags)
    print(f"{a.case} ±{a.precision:.0%}: {len(lines)} searches with a safe rate, {above} above "
          f"the reference {a.reference}; {len(flags)} flagged ({false} not above it), "
          f"{still} corrected still above")  # fmt: skip


if __name__ == "__main__":
    main()
