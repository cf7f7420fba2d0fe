"""The drift checks in virtual time: how often they call a change on a healthy server, and
which slow-downs they catch (``load.bench._drift_checks``, ``metrics.drift``).

    python benchmarks/drift_virtual.py --case dense --searches 150 --factors 1 1.1 1.25 2 10

For each seeded search of a case (``tests/virtual_probe.CASES``, or ``HOLDOUT_CASES``, where
no threshold was tuned; the search as ``tokenwatt
bench`` runs it, from 2 req/s, stopping on its own D = 1 interval), the two checks run once
per factor against the same simulator with its decode bandwidth efficiency divided by the
factor (1: the server did not change; 10: every decode step 10× longer), through
``virtual_probe.drift_checks`` (the bench's rule, ``metrics.drift.slower_than_search``).
Prints per factor how many searches the checks called a change in (either check, re-test,
confirmation), and for factor 1 the ratio of each check's median TPOT to its
neighbours' on the search's curve (``metrics.drift.neighbours``): the margin under
``DRIFT_LATENCY_FACTOR``. ``--dump`` appends every search's levels as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.load.bench import WARMUP_LIFETIMES
from tokenwatt.load.search import BoundarySearch
from tokenwatt.metrics.drift import DRIFT_LATENCY_FACTOR, Level, neighbours
from virtual_probe import (
    CASES,
    HOLDOUT_CASES,
    VirtualCheck,
    VirtualProbe,
    drift_checks,
    virtual_level,
)


def _ratio(check: Level, levels: list[Level]) -> float | None:
    """The check's median TPOT over its neighbours' (``metrics.drift.neighbours``): the
    rule's ratio."""
    v, top = check.tpot_p50_s, neighbours(levels, check.rate_rps)
    return v / top if v is not None and top is not None else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="dense", choices=sorted({**CASES, **HOLDOUT_CASES}))
    ap.add_argument("--searches", type=int, default=150)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--factors", type=float, nargs="+", default=[1.0, 1.1, 1.25, 1.5, 2.0, 10.0])
    ap.add_argument("--dump", type=Path, default=None)
    args = ap.parse_args()
    c = {**CASES, **HOLDOUT_CASES}[args.case]
    called: dict[float, list[tuple[bool, bool]]] = {f: [] for f in args.factors}
    ratios: dict[str, list[float]] = {}
    for k in range(args.searches):
        seed = args.first_seed + k
        probe = VirtualProbe(c, lifetimes=WARMUP_LIFETIMES)
        s = BoundarySearch(probe, start_rate_rps=2.0, allowed=0.01, seed=seed, max_probes=30)
        out = asyncio.run(s.run())
        levels = [
            virtual_level(st.outcome.payload, st.outcome.evidence.judged, st.rate_rps)
            for st in out.steps
            if st.outcome.payload is not None and st.outcome.evidence is not None
        ]
        line: dict[str, object] = {"case": c.name, "seed": seed, "stop": out.stop_reason}
        line["levels"] = [dataclasses.astuple(lv) for lv in levels]
        for f in args.factors:
            slowed = dataclasses.replace(c, efficiency=c.efficiency / f)
            found: list[VirtualCheck] = drift_checks(probe, out, seed, slowed)
            if not found:
                continue
            called[f].append((found[0].changed is not None, found[1].changed is not None))
            line[str(f)] = [[x.kind, dataclasses.astuple(x.level), x.passed, x.changed]
                            for x in found]  # fmt: skip
            if f == 1.0:
                for x in found:
                    r = _ratio(x.level, levels)
                    if r is not None:
                        ratios.setdefault(x.kind, []).append(r)
                if any(x.changed for x in found):
                    print(f"seed {seed}: a change called on the healthy server", flush=True)
        if args.dump is not None:
            with args.dump.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
    _print(args.case, called, ratios)


def _print(
    case: str,
    called: dict[float, list[tuple[bool, bool]]],
    ratios: dict[str, list[float]],
) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{case}: checks after converged searches (load average {load})")
    print("| slow-down | searches | change called | by the re-test | by the confirmation |")
    print("|---|---|---|---|---|")
    for f, rows in called.items():
        n = len(rows)
        either = sum(a or b for a, b in rows)
        print(f"| {f:g}× | {n} | {either} ({either / max(n, 1):.1%}) | "
              f"{sum(a for a, _ in rows)} | {sum(b for _, b in rows)} |")  # fmt: skip
    rule = f"rule: > {DRIFT_LATENCY_FACTOR:g}"
    print(f"\nhealthy server: check median TPOT ÷ its neighbours' ({rule})")
    print("| check | p50 | p90 | p99 | max |")
    print("|---|---|---|---|---|")
    for kind, rs in sorted(ratios.items()):
        q = np.quantile(rs, [0.5, 0.9, 0.99, 1.0])
        print(f"| {kind} | {q[0]:.2f} | {q[1]:.2f} | {q[2]:.2f} | {q[3]:.2f} |")


if __name__ == "__main__":
    main()
