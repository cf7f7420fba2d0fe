"""Coverage of the boundary's 95 % interval, in virtual time on the simulator (no wall clock).

    python benchmarks/coverage_virtual.py --case dense --searches 200 --dump dense.jsonl
    python benchmarks/coverage_virtual.py --summarize *.jsonl --design-effect 1 2 3 4 6

For a case (``tests/virtual_probe.CASES``: dense, moe, prefill) it finds the reference boundary
(``virtual_probe.reference_boundary``: the rate where each limit's miss fraction, pooled over
six 3000-request windows after a 60 s warm-up, reaches 1 %), then runs ``--searches`` seeded
sequential searches (the bench's warm-up rule, ``--lifetimes`` request lifetimes) and counts
how often each design effect's interval holds the reference. Prints one row per design
effect: coverage, mean half width, mean probes and requests per search, converged searches,
and the load average (virtual time does not feel it; it says what else ran). ``--dump``
appends each search's probes (rate, counts, miss flags in send order) to a JSON-lines file;
``--summarize`` (with ``--precision`` for two-sided dumps) prints the table from dumps (how
many references fell below and above the interval, how many intervals were open below and
above, and the probe seconds a real server would spend, estimated from the dump: ``_probe_s``),
so several processes can share the searches of one case (``--first-seed``); ``--design-effect``
is the low end's in the printed interval (``metrics.boundary.reported_boundary``, or
``two_sided_boundary``: the high end reads D = 1); ``--search-design-effect`` is the one the
two-sided search's own stop reads (``BoundarySearch.low_end_design_effect``: where it puts the
low end's probe and how many clean requests its window gathers), so a candidate D needs runs
with both set to it, not a re-summary of dumps made at another.
With ``--precision P`` each search is two-sided, as ``tokenwatt bench`` searches (``two_sided``:
it goes on until the reported interval is closed and within ± P); without it, each search
stops on its own D = 1 interval at 5 %. The row adds the
searches whose reported interval at that D lies within ± 5 % of its point.
``--checks`` follows each converged search with ``tokenwatt bench``'s drift checks
(``load.bench._drift_checks``: a re-test at the highest pass and a confirmation at the fitted
point unless the re-test lies within the precision of it, each failing only on 194 judged
requests), judged as the bench judges them
(``metrics.drift``, through ``virtual_probe.drift_checks``); they do not join the evidence, and
a change called leaves no boundary (counted as not held, and printed).
``--low-end-below δ`` sets the two-sided low end's distance below the point
(``metrics.boundary.LOW_END_MIN_BELOW`` by default; its probe δ + 1 % below at every
precision), and ``--low-end-by-precision`` probes it at the precision's own rate where that
lies farther down (δ then a minimum; with δ = 0, as the precision alone allows): candidates need
runs, not re-summaries (pass the same ``--low-end-below`` to ``--summarize``).
``--start-factor F`` (with ``--reference``) starts each search where ``tokenwatt bench``'s
staircase starts it, near the boundary: at F × the reference, walking away from it in the
bench's small first steps (``first_step`` = 1 + 2 · min(precision, 5 %)); a probe with
nothing measured at or below its rate warms up for the lifetime at the start rate (the
median E2E of a virtual window there after 60 s, standing in for the staircase's
``load.capacity.lifetime_at``), as ``load.bench.warmup_lifetime_s`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.load.bench import WARMUP_LIFETIMES
from tokenwatt.load.search import RESOLUTION, BoundarySearch, SearchOutcome
from tokenwatt.metrics.boundary import (
    LOW_END_MIN_BELOW,
    REPORTED_DESIGN_EFFECT,
    TWO_SIDED_DESIGN_EFFECT,
    BoundaryFit,
    Evidence,
    reported_boundary,
    two_sided_boundary,
)
from virtual_probe import (
    CASES,
    HOLDOUT_CASES,
    SHORT_OUTPUT_CASES,
    Case,
    VirtualProbe,
    VirtualRun,
    drift_checks,
    lifetime_at,
    reference_boundary,
)

ALL_CASES = CASES | HOLDOUT_CASES | SHORT_OUTPUT_CASES


def _dump(
    path: Path, case: str, seed: int, ref: float | None, out: SearchOutcome[VirtualRun]
) -> None:
    """One line per search: the reference, and per probe the rate the fit placed it at
    (``load.search.bracket_rate``: the offered rate unless the counted one differs beyond
    Poisson noise), its counted rate, counts and miss flags in send order (what a dependence
    estimate needs). Dumps before ``achieved`` held the counted rate as ``rate``."""
    probes = []
    for st in out.steps:
        run, ev = st.outcome.payload, st.outcome.evidence
        if run is None or ev is None:
            continue
        at = st.bracket_rps if st.bracket_rps is not None else ev.rate_rps
        flags = "".join(
            "1" if (r.ttft_s or 0) > 0.5 or (r.tpot_s or 0) > 0.05 else "0"
            for r in run.lats[: ev.judged]
        )
        e2e = float(np.median(np.subtract(run.done_s, run.sent_s)))
        probes.append({"rate": at, "achieved": ev.rate_rps, "n": ev.judged, "misses": ev.misses,
                       "flags": flags, "e2e_s": e2e, "passed": st.passed})  # fmt: skip
    line = {"case": case, "seed": seed, "reference": ref, "stop": out.stop_reason, "probes": probes}
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")


def interval(
    ev: list[Evidence], d: float, two_sided: bool, min_below: float = LOW_END_MIN_BELOW
) -> BoundaryFit:
    """The interval a search reports: two-sided (``two_sided_boundary``, the low end at a
    probed rate, at least ``min_below`` below the point) or the one-sided search's
    (``reported_boundary``)."""
    if two_sided:
        return two_sided_boundary(ev, 0.01, 0.95, d, min_below)
    return reported_boundary(ev, 0.01, 0.95, d)


def checks(
    probe: VirtualProbe, out: SearchOutcome[VirtualRun], seed: int, precision: float
) -> bool:
    """The bench's drift checks after a converged search, in virtual time
    (``virtual_probe.drift_checks``, the bench's rule and plan at ``precision``); True when a
    change is called (no boundary). Checks never join the evidence, as in
    ``load.bench._drift_checks``."""
    found = drift_checks(probe, out, seed, precision=precision)
    return any(c.changed is not None for c in found)


def _within(fit: BoundaryFit, precision: float | None) -> bool:
    """Two-sided (``precision``): both ends closed and the half width within it; else the
    one-sided search's check, the interval within ± 5 % of its point."""
    if precision is not None:
        half = fit.relative_half_width
        return half is not None and half <= precision + 1e-12
    return fit.relative_reach is not None and fit.relative_reach <= 0.05


def _probe_s(p: dict[str, Any]) -> float:
    """A probe's seconds on a real server, estimated from its dump: the bench's warm-up
    (10 s, at least ``WARMUP_LIFETIMES`` of its own median E2E), its judged requests at its
    rate, and one median E2E of drain. An estimate (the warm-up reads the probe's own E2E,
    the bench the nearest lower rate's)."""
    e2e = float(p.get("e2e_s", 0.0))
    return max(10.0, WARMUP_LIFETIMES * e2e) + p["n"] / p["rate"] + e2e


def summarize(
    paths: list[Path],
    design_effects: list[float],
    precision: float | None,
    min_below: float = LOW_END_MIN_BELOW,
) -> None:
    """The coverage table from dumps (several processes may have appended to one file): per
    case and design effect, coverage, where the misses fell, mean half width."""
    lines = []
    for p in paths:
        for raw in p.read_text().splitlines():
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                print(f"skipped a torn line in {p}", file=sys.stderr)
    seen: set[tuple[str, str]] = set()
    unique = []
    for x in lines:  # a seed run twice (overlapping --first-seed ranges) counts once: a
        # search is deterministic, so the same seed gives the same probes
        key = (x["case"], json.dumps(x["probes"], sort_keys=True))
        if key not in seen:
            seen.add(key)
            unique.append(x)
    lines = unique
    for case in sorted({x["case"] for x in lines}):
        mine = [x for x in lines if x["case"] == case]
        conv = sum(x["stop"] == "converged" for x in mine)
        probes = np.mean([len(x["probes"]) for x in mine])
        reqs = np.mean([sum(p["n"] for p in x["probes"]) for x in mine])
        probe_s = np.mean([sum(_probe_s(p) for p in x["probes"]) for x in mine])
        for d in design_effects:
            held = below = above = open_low = open_high = within = 0
            halves = []
            for x in mine:
                ev = [Evidence(p["rate"], p["n"], p["misses"]) for p in x["probes"]]
                fit = interval(ev, d, precision is not None, min_below)
                lo, hi = fit.low_rps or 0.0, fit.high_rps or float("inf")
                held += lo <= x["reference"] <= hi
                below += x["reference"] < lo
                above += x["reference"] > hi
                open_low += fit.low_rps is None
                open_high += fit.high_rps is None
                halves.append(fit.relative_half_width or float("nan"))
                within += _within(fit, precision)
            n = len(mine)
            print(
                f"| {case} ({mine[0]['reference']:.2f} req/s) | {d:g} | {held} of {n} "
                f"({held / n:.1%}) | {below} | {above} | {open_low} | {open_high} | "
                f"{np.nanmean(halves):.1%} | {within} of {n} | {probes:.1f} | {reqs:.0f} | "
                f"{probe_s:.0f} s | "
                f"{conv} of {n} |",
                flush=True,
            )


def _start(args: argparse.Namespace, c: Case) -> tuple[float, float | None, dict[float, float]]:
    """The start rate, the walk's first step and the lifetimes known before the first probe:
    2 req/s, ×growth, none; with ``--start-factor``, the bench's start near the boundary."""
    if args.start_factor is None:
        return 2.0, None, {}
    if args.reference is None:
        raise SystemExit("--start-factor needs --reference")
    start = args.start_factor * args.reference
    life = lifetime_at(c, start)
    print(f"{c.name}: start {start:.3f} req/s, lifetime there {life:.2f} s", flush=True)
    precision = args.precision if args.precision is not None else RESOLUTION
    return start, 1 + 2 * min(precision, RESOLUTION), {0.0: life}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="dense", choices=sorted(ALL_CASES))
    ap.add_argument(
        "--precision",
        type=float,
        default=None,
        help="search two-sided to this half width (as tokenwatt bench does); omitted: the "
        "search stops on its own D = 1 interval at 5 %%",
    )
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--design-effect", type=float, nargs="+", default=[REPORTED_DESIGN_EFFECT])
    ap.add_argument(
        "--search-design-effect", type=float, default=TWO_SIDED_DESIGN_EFFECT,
        help="two-sided: the low end's D the search's stop reads (a candidate needs its own "
        "runs: it moves the low end's probe and its long window)",
    )  # fmt: skip
    ap.add_argument(
        "--low-end-below", type=float, default=LOW_END_MIN_BELOW,
        help="the low end's probe this fraction (+ 1 %%) below the point",
    )  # fmt: skip
    ap.add_argument(
        "--low-end-by-precision", dest="low_end_fixed", action="store_false",
        help="the low end's probe at the precision's own rate where that lies farther below "
        "the point than --low-end-below (the rule before the probe went at one distance)",
    )  # fmt: skip
    ap.add_argument("--lifetimes", type=float, default=WARMUP_LIFETIMES, help="warm-up rule")
    ap.add_argument("--reference", type=float, default=None, help="skip computing it")
    ap.add_argument("--dump", type=Path, default=None, help="each search's probes, JSON lines")
    ap.add_argument("--summarize", type=Path, nargs="+", help="print the table from dumps")
    ap.add_argument("--checks", action="store_true", help="the bench's drift checks after")
    ap.add_argument(
        "--start-factor", type=float, default=None,
        help="start at this × the reference, as the bench's staircase does (needs --reference)",
    )  # fmt: skip
    return ap


def main() -> None:
    args = _parser().parse_args()
    if args.summarize:
        summarize(args.summarize, args.design_effect, args.precision, args.low_end_below)
        return
    c = ALL_CASES[args.case]
    ref = args.reference
    rows: dict[float, list[tuple[bool, float, int, int, str, bool]]] = {
        d: [] for d in args.design_effect
    }
    start, first_step, seeded = _start(args, c)
    for k in range(args.searches):
        probe = VirtualProbe(c, lifetimes=args.lifetimes, e2e_s=dict(seeded))
        two = args.precision is not None
        s = BoundarySearch(
            probe,
            start_rate_rps=start,
            allowed=0.01,
            seed=args.first_seed + k,
            max_probes=30,
            precision=args.precision if two else 0.05,
            two_sided=two,
            first_step=first_step,
            low_end_design_effect=args.search_design_effect,
            low_end_min_below=args.low_end_below,
            low_end_fixed=args.low_end_fixed,
        )
        probe.search = s  # the low end's long window (``BoundarySearch.want_judged``)
        out = asyncio.run(s.run())
        changed = args.checks and checks(probe, out, args.first_seed + k, s.precision)
        if changed:
            print(f"seed {args.first_seed + k}: the checks called a change", flush=True)
        if ref is None and out.fit is not None and out.fit.rate_rps:
            r0 = out.fit.rate_rps
            ref = reference_boundary(c, r0 * 0.7, r0 * 1.3)
            print(f"{args.case}: reference boundary {ref:.3f} req/s", flush=True)
        n_req = sum(e.judged for e in out.evidence)
        if args.dump is not None:
            _dump(args.dump, args.case, args.first_seed + k, ref, out)
        for d in args.design_effect:
            fit = interval(out.evidence, d, two, args.low_end_below)
            lo, hi = fit.low_rps or 0.0, fit.high_rps or float("inf")
            held = ref is not None and lo <= ref <= hi and not changed
            half = fit.relative_half_width or float("nan")
            within = _within(fit, args.precision)
            rows[d].append((held, half, len(out.steps), n_req, out.stop_reason, within))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for d, rs in rows.items():
        k, n = sum(r[0] for r in rs), len(rs)
        conv = sum(r[4] == "converged" for r in rs)
        inside = sum(r[5] for r in rs)
        print(
            f"| {args.case} ({ref:.2f} req/s) | {d:g} | {k} of {n} ({k / n:.0%}) | "
            f"{np.nanmean([r[1] for r in rs]):.1%} | {inside} of {n} | "
            f"{np.mean([r[2] for r in rs]):.1f} | "
            f"{np.mean([r[3] for r in rs]):.0f} | {conv} of {n} |  load average {load}",
            flush=True,
        )


if __name__ == "__main__":
    main()
