"""The drift checks in virtual time: how often they call a change on a healthy server, and
which slow-downs they catch (``load.bench._drift_checks``, ``metrics.drift``).

    python benchmarks/drift_virtual.py --case dense --reference 12.96 --searches 30 \
        --factors 1 1.1 1.25 2 10

For each seeded search of a case (``tests/virtual_probe.CASES``, or ``HOLDOUT_CASES``, where
no threshold was tuned), the search as ``tokenwatt bench`` runs it: two-sided to
``--precision`` (default 0.10, the bench's), started at ``--start-factor`` × the reference
(default 1.0: where the staircase starts it) in the bench's small first steps, its first
probes warming up for the lifetime at the start rate (``virtual_probe.lifetime_at``); without
``--reference``, from 2 req/s. After a converged search the checks run once per factor
against the same simulator with its decode bandwidth efficiency divided by the factor (1: the
server did not change; 10: every decode step 10× longer), warming up for
``CHECK_WARMUP_LIFETIMES``, through ``virtual_probe.drift_checks`` (the bench's rule,
``metrics.drift.slower_than_search``). Both checks are run with the seeds the bench gives
them and the bench's plan (``load.search.drift_check_plan`` at the precision) decides which
count: a change is called by the re-test, or by the confirmation where the plan runs it.
``--old-plan`` adds the rule this replaced (the confirmation run when the two rates lie
5 % or more apart in log rate, ``min(precision, 5 %)``) on the same searches. Prints per
factor how many searches the plan's checks called a change in, and for factor 1 the ratio of
each check's median TPOT to its neighbours' on the search's curve
(``metrics.drift.neighbours``): the margin under ``DRIFT_LATENCY_FACTOR``. ``--dump``
appends every search's levels as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.load.bench import CHECK_WARMUP_LIFETIMES, WARMUP_LIFETIMES
from tokenwatt.load.search import RESOLUTION, BoundarySearch, SearchOutcome, drift_check_plan
from tokenwatt.metrics.drift import DRIFT_LATENCY_FACTOR, Level, neighbours
from virtual_probe import (
    CASES,
    HOLDOUT_CASES,
    Case,
    VirtualCheck,
    VirtualProbe,
    VirtualRun,
    drift_checks,
    lifetime_at,
    virtual_level,
)

Plan = dict[str, list[tuple[float, str]]]  # plan name → the checks it runs


def _ratio(check: Level, levels: list[Level]) -> float | None:
    """The check's median TPOT over its neighbours' (``metrics.drift.neighbours``): the
    rule's ratio."""
    v, top = check.tpot_p50_s, neighbours(levels, check.rate_rps)
    return v / top if v is not None and top is not None else None


def _search(
    c: Case, seed: int, args: argparse.Namespace, life_s: float | None
) -> tuple[VirtualProbe, SearchOutcome[VirtualRun]]:
    """One seeded search as the bench runs it (two-sided, from the reference's
    neighbourhood) or, without ``--reference``, from 2 req/s."""
    seeded = {0.0: life_s} if life_s is not None else {}
    probe = VirtualProbe(c, lifetimes=WARMUP_LIFETIMES, e2e_s=seeded)
    near = args.reference is not None
    s = BoundarySearch(
        probe,
        start_rate_rps=args.start_factor * args.reference if near else 2.0,
        allowed=0.01,
        seed=seed,
        max_probes=30,
        precision=args.precision,
        two_sided=True,
        first_step=1 + 2 * min(args.precision, RESOLUTION) if near else None,
    )
    probe.search = s  # the low end's long window (``BoundarySearch.want_judged``)
    out = asyncio.run(s.run())
    probe.search = None
    probe.lifetimes = CHECK_WARMUP_LIFETIMES  # the bench's checks warm up for one lifetime
    return probe, out


def _plans(out: SearchOutcome[VirtualRun], args: argparse.Namespace) -> Plan:
    """Which checks each plan runs after this search: the bench's, and the old one."""
    fit, b = out.fit, out.boundary
    assert fit is not None and fit.rate_rps is not None and b is not None
    plans = {"bench": drift_check_plan(b.rate_rps, fit.rate_rps, args.precision)}
    if args.old_plan:
        gap = abs(math.log(fit.rate_rps / b.rate_rps))
        old = min(args.precision, RESOLUTION)
        both = [(b.rate_rps, "re-test"), (fit.rate_rps, "confirmation")]
        plans["old"] = both if gap >= old else both[:1]
    return plans


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="dense", choices=sorted({**CASES, **HOLDOUT_CASES}))
    ap.add_argument("--searches", type=int, default=30)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--factors", type=float, nargs="+", default=[1.0, 1.1, 1.25, 2.0, 10.0])
    ap.add_argument("--precision", type=float, default=0.10)
    ap.add_argument("--reference", type=float, default=None, help="start near it, as the bench")
    ap.add_argument("--start-factor", type=float, default=1.0)
    ap.add_argument("--old-plan", action="store_true", help="also the rule this replaced")
    ap.add_argument("--dump", type=Path, default=None)
    args = ap.parse_args()
    c = {**CASES, **HOLDOUT_CASES}[args.case]
    life = lifetime_at(c, args.start_factor * args.reference) if args.reference else None
    called: dict[str, dict[float, list[tuple[bool, bool]]]] = {}
    ratios: dict[str, list[float]] = {}
    confirmed: dict[str, int] = {}
    for k in range(args.searches):
        seed = args.first_seed + k
        probe, out = _search(c, seed, args, life)
        if out.stop_reason != "converged":
            print(f"seed {seed}: stopped {out.stop_reason}, no checks", flush=True)
            continue
        levels = [
            virtual_level(st.outcome, st.rate_rps)
            for st in out.steps
            if st.outcome.payload is not None and st.outcome.evidence is not None
        ]
        plans = _plans(out, args)
        for name, plan in plans.items():
            confirmed[name] = confirmed.get(name, 0) + (len(plan) > 1)
        line: dict[str, object] = {"case": c.name, "seed": seed, "stop": out.stop_reason}
        line["levels"] = [dataclasses.astuple(lv) for lv in levels]
        line["plans"] = {name: [k for _, k in p] for name, p in plans.items()}
        for f in args.factors:
            slowed = dataclasses.replace(c, efficiency=c.efficiency / f)
            found: list[VirtualCheck] = drift_checks(probe, out, seed, slowed)
            for name, plan in plans.items():
                run = [x.changed is not None for x in found[: len(plan)]]
                called.setdefault(name, {g: [] for g in args.factors})[f].append(
                    (run[0], len(run) > 1 and run[1])
                )
            line[str(f)] = [[x.kind, dataclasses.astuple(x.level), x.passed, x.changed]
                            for x in found]  # fmt: skip
            if f == 1.0:
                for x in found[: len(plans["bench"])]:
                    r = _ratio(x.level, levels)
                    if r is not None:
                        ratios.setdefault(x.kind, []).append(r)
                if any(x.changed for x in found[: len(plans["bench"])]):
                    print(f"seed {seed}: a change called on the healthy server", flush=True)
        if args.dump is not None:
            with args.dump.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
    for name, rows in called.items():
        runs = f"confirmation run after {confirmed.get(name, 0)} of {len(rows[args.factors[0]])}"
        _print(f"{args.case}, {name} plan ({runs})", rows, ratios if name == "bench" else {})


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
