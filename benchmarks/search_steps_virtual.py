"""What the walk from a start near the boundary costs, in virtual time: ×growth against small steps.

    python benchmarks/search_steps_virtual.py --searches 20 --starts 0.8 0.95 1.05 1.2

``tokenwatt bench`` starts its search from the closed-loop staircase, an estimate of the
boundary (real runs on the dense case started 5–7 % above it). From there the classic walk
steps by ``growth`` (×2 or ÷2), and a pass far below the boundary costs ≥ 194 requests like any
other; ``first_step`` = 1 + 2 · precision walks 1.1, 1.21, 1.46, 2, … instead
(``load.search.step_factor``). For each case of ``tests/virtual_probe.CASES`` and each start
(a multiple of the case's long-run reference boundary, ``docs/methodology.md``), the same
seeded virtual-time searches run both ways (fit mode, precision 5 %, as bench runs them; the
drift checks that follow are the same for both and are left out). Printed per case, start and
walk: the mean probes per search, the mean requests, and the mean seconds the probes would
take on a real server (each probe's warm-up, its window to the decision, and the drain of
the requests it judged: the simulator's own clock), with the share of searches that converged
and whose interval held the reference at the search's own D = 1.

Two more columns: the share of searches whose reported interval (``metrics.boundary.
reported_boundary``, the one the result shows) ended within ± precision of its point, and the
share whose reported interval held the reference. ``--walks`` picks the walks (``1.1`` is the
bench's).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.load.search import BoundarySearch, ProbeOutcome
from tokenwatt.metrics.boundary import reported_boundary
from virtual_probe import CASES, VirtualProbe, VirtualRun

# Long-run references (docs/methodology.md, "Coverage of the boundary's interval, measured").
REFERENCE_RPS = {"dense": 12.96, "moe": 21.03, "prefill": 6.35}
PRECISION = 0.05


@dataclass
class TimedProbe:
    """``VirtualProbe`` that also adds up the virtual seconds each probe would take."""

    inner: VirtualProbe
    seconds: list[float] = field(default_factory=list)

    async def __call__(self, rate: float, seed: int) -> ProbeOutcome[VirtualRun]:
        known = self.inner.e2e_s or {}
        lower = [r for r in known if r <= rate]
        warm = max(self.inner.warmup_s, self.inner.lifetimes * (known[max(lower)] if lower else 0))
        out = await self.inner(rate, seed)
        run, ev = out.payload, out.evidence
        assert run is not None and ev is not None
        if out.passed or not ev.judged:
            end = max(run.done_s[: max(1, out.requests or 0)])
        else:
            end = sorted(run.done_s)[ev.judged - 1]
        self.seconds.append(warm + end - run.window_s[0])
        return out


def _one(
    case: str, start: float, seed: int, first_step: float | None
) -> tuple[int, int, float, bool, bool, bool, bool]:
    probe = TimedProbe(VirtualProbe(CASES[case], lifetimes=3.0))
    s = BoundarySearch(
        probe, start_rate_rps=start, allowed=0.01, seed=seed, max_probes=20,
        precision=PRECISION, first_step=first_step,
    )  # fmt: skip
    out = asyncio.run(s.run())
    fit, ref = out.fit, REFERENCE_RPS[case]
    held = (
        fit is not None
        and (fit.low_rps is None or fit.low_rps <= ref)
        and (fit.high_rps is None or ref <= fit.high_rps)
    )
    n_req = sum(e.judged for e in out.evidence)
    rep = reported_boundary(out.evidence, 0.01) if out.evidence else None
    reach = rep.relative_reach if rep is not None else None
    rep_held = rep is not None and (rep.low_rps or 0.0) <= ref <= (rep.high_rps or float("inf"))
    conv = out.stop_reason == "converged"
    within = reach is not None and reach <= PRECISION
    return len(out.steps), n_req, sum(probe.seconds), conv, held, within, rep_held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(REFERENCE_RPS))
    ap.add_argument("--starts", nargs="+", type=float, default=[0.8, 0.95, 1.05, 1.2])
    ap.add_argument("--searches", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=500)
    ap.add_argument("--walks", nargs="+", choices=["2", "1.1"], default=["2", "1.1"])
    args = ap.parse_args()
    walks = [w for w in (("×2", None), ("1.1, 1.21, …", 1 + 2 * PRECISION))
             if ("2" if w[1] is None else "1.1") in args.walks]  # fmt: skip
    print("| case | start (× reference) | walk | probes | requests | probe seconds ", end="")
    print("| converged | held at D = 1 | reported within ±5 % | reported held |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        for m in args.starts:
            start = m * REFERENCE_RPS[case]
            for name, fs in walks:
                rows = [_one(case, start, args.first_seed + k, fs) for k in range(args.searches)]
                a = np.array(rows, dtype=float)
                print(
                    f"| {case} | {m:g} | {name} | {a[:, 0].mean():.1f} | {a[:, 1].mean():.0f} | "
                    f"{a[:, 2].mean():.0f} | {a[:, 3].mean():.0%} | {a[:, 4].mean():.0%} | "
                    f"{a[:, 5].mean():.0%} | {a[:, 6].mean():.0%} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
