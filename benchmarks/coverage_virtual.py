"""Coverage of the boundary's 95 % interval, in virtual time on the simulator (no wall clock).

    python benchmarks/coverage_virtual.py --case dense --searches 30 --design-effect 1 4

For a case (``tests/virtual_probe.CASES``: dense, moe, prefill) it finds the reference boundary
by bisection on long windows (4000 requests after a 30 s warm-up: the rate where the p99 of
TTFT and TPOT meets the limits), then runs ``--searches`` seeded sequential searches and counts
how often each design effect's interval holds the reference. Prints one line per design
effect: coverage, mean half width, mean number of probes, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.load.search import BoundarySearch
from tokenwatt.metrics.boundary import fit_boundary
from tokenwatt.metrics.sequential import Sprt
from virtual_probe import CASES, reference_boundary, run_window, sequential_outcome


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="dense")
    ap.add_argument("--searches", type=int, default=30)
    ap.add_argument("--design-effect", type=float, nargs="+", default=[1.0])
    ap.add_argument("--search-design-effect", type=float, default=1.0, help="the search's own")
    args = ap.parse_args()
    c, test = CASES[args.case], Sprt(0.01)

    async def probe(rate: float, s: int):  # type: ignore[no-untyped-def]
        run = run_window(c, rate, s, window_requests=max(200, int(rate * 60)), warmup_s=15)
        return sequential_outcome(run, test)

    ref = None
    rows = {d: [0, 0, [], []] for d in args.design_effect}
    for seed in range(args.searches):
        s = BoundarySearch(
            probe,
            start_rate_rps=2.0,
            allowed=0.01,
            seed=1000 + seed,
            max_probes=30,
            design_effect=args.search_design_effect,
        )
        out = asyncio.run(s.run())
        if ref is None and out.fit and out.fit.rate_rps:
            ref = reference_boundary(
                c, out.fit.rate_rps * 0.6, out.fit.rate_rps * 1.4, requests=4000, steps=8, seed=7
            )
            print(f"{args.case}: reference boundary {ref:.3f} req/s", flush=True)
        for d in args.design_effect:
            fit = fit_boundary(s._evidence, 0.01, 0.95, d)
            lo = fit.low_rps or 0.0
            hi = fit.high_rps or float("inf")
            r = rows[d]
            r[0] += 1
            r[1] += int(ref is not None and lo <= ref <= hi)
            r[2].append(fit.relative_half_width or float("nan"))
            r[3].append(len(out.steps))
            r.append(out.stop_reason)
    for d, (n, k, hw, steps, *stops) in rows.items():
        print(
            f"{args.case} D={d:g}: coverage {k}/{n} = {k / n:.0%}, mean half width "
            f"{np.nanmean(hw):.1%}, mean probes {np.mean(steps):.1f}, converged "
            f"{stops.count('converged')}/{n}; "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )


if __name__ == "__main__":
    main()
