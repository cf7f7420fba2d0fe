"""A/B verdicts (``tokenwatt compare``) in virtual time: how often they call a difference.

    python benchmarks/compare_verdicts.py --pairs 40 --effect-pairs 5 --dump runs.jsonl
    python benchmarks/compare_verdicts.py --summarize runs.jsonl

Null pairs: two runs of the same settings (``--case``, default dense; efficiency 0.5)
with different seeds (``--first-seed`` + k and + k + 10 000); each run is a virtual search
and its boundary probe (``tests/virtual_verdicts.virtual_run``). The verdict should call no
difference in ≥ 95 % of pairs per figure. Effect pairs: efficiency 0.5 (A) against 0.45 (B),
the server 10 % slower per step: every called difference in goodput and the boundary must
have B lower. Prints, per figure, the pairs that called a difference, the seed-to-seed spread
of each figure against the standard error its interval states (above 1: the interval is
narrower than the runs scatter), and the load average (virtual time does not feel it).
``--dump`` keeps each run's estimates (JSON lines) so ``--summarize`` can re-judge them
without re-running.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.report.verdict import (
    BOUNDARY_SPREAD,
    VERDICT_FIGURES,
    Estimate,
    compare_estimates,
)
from tokenwatt.result import ProbeSummary
from virtual_verdicts import case_at, estimates_of, virtual_headline

Run = dict[str, Estimate | str]


def _load(path: Path) -> list[tuple[str, int, Run]]:
    """Each dumped run re-read through the verdict's current rules (``estimates_of``)."""
    out = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        head = d["head"] if isinstance(d["head"], str) else ProbeSummary(**d["head"])
        out.append((d["kind"], d["seed"] % 10_000, estimates_of(head, d["search_s"])))
    return out


def _spread(runs: list[Run]) -> None:
    """Seed-to-seed sd of ln(figure) against the mean log SE its interval states."""
    for f in VERDICT_FIGURES:
        est = [r[f] for r in runs if isinstance(r.get(f), Estimate)]
        se = [s for e in est if isinstance(e, Estimate) and (s := e.log_se()) is not None]
        logs = [math.log(e.value) for e in est if isinstance(e, Estimate)]
        if len(logs) < 3 or not se:
            continue
        m = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (len(logs) - 1))
        mean_se = sum(se) / len(se)
        widened = f == "boundary rate"
        raw = f", as stated {mean_se / BOUNDARY_SPREAD:.2%}" if widened else ""
        print(f"{f}: {len(logs)} runs, seed-to-seed sd {sd:.2%}, the verdict's SE {mean_se:.2%}"
              f"{raw} (ratio {sd / mean_se:.2f})")  # fmt: skip


def summarize(rows: list[tuple[str, int, Run]]) -> None:
    pairs: dict[tuple[str, int], list[Run]] = defaultdict(list)
    for kind, k, figs in rows:
        pairs[(kind, k)].append(figs)
    judged: Counter[str] = Counter()
    called: Counter[str] = Counter()
    right: Counter[str] = Counter()
    for (kind, k), runs in sorted(pairs.items()):
        if len(runs) != 2:
            continue  # a pair cut short
        a, b = runs
        for f in VERDICT_FIGURES:
            v = compare_estimates(f, a.get(f, "absent"), b.get(f, "absent"))
            if v.reason is not None:
                continue
            judged[kind, f] += 1
            called[kind, f] += v.called
            right[kind, f] += v.called and (v.change or 0) < 0
            if v.called or kind == "effect":
                print(f"{kind} pair {k}: {v.text()}")
    _spread([figs for kind, _, figs in rows if kind == "null"])
    for f in VERDICT_FIGURES:
        n, c = judged["null", f], called["null", f]
        if n:
            print(f"same settings, {f}: no difference called in {n - c} of {n} ({(n - c) / n:.0%})")
    for f in VERDICT_FIGURES:
        n, c = judged["effect", f], called["effect", f]
        if n:
            print(
                f"efficiency 0.45 vs 0.5, {f}: called in {c} of {n}, {right['effect', f]} B lower"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=40, help="null pairs (same settings)")
    ap.add_argument("--effect-pairs", type=int, default=5, help="efficiency 0.5 vs 0.45")
    ap.add_argument("--first-seed", type=int, default=2000)
    ap.add_argument("--case", default="dense", help="a tests/virtual_probe case")
    ap.add_argument("--window-s", type=float, default=60.0, help="the boundary probe's window")
    ap.add_argument("--dump", type=Path, default=None, help="each run's estimates, JSON lines")
    ap.add_argument("--summarize", type=Path, nargs="+", help="judge dumped runs")
    args = ap.parse_args()
    if args.summarize:
        summarize([row for p in args.summarize for row in _load(p)])
        return
    t0 = time.monotonic()
    plan = [("null", k, 0.5, 0.5) for k in range(args.pairs)]
    plan += [("effect", k, 0.5, 0.45) for k in range(args.effect_pairs)]
    rows = []
    for kind, k, eff_a, eff_b in plan:
        s = args.first_seed + k + (500 if kind == "effect" else 0)
        for eff, seed in ((eff_a, s), (eff_b, s + 10_000)):
            head, search_s = virtual_headline(case_at(eff, args.case), seed, args.window_s)
            rows.append((kind, k, estimates_of(head, search_s)))
            if args.dump is not None:
                enc = head if isinstance(head, str) else head.model_dump(mode="json")
                line = {"kind": kind, "pair": k, "seed": seed, "efficiency": eff,
                        "search_s": search_s, "head": enc}  # fmt: skip
                with args.dump.open("a") as fh:
                    fh.write(json.dumps(line) + "\n")
    summarize(rows)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.monotonic() - t0:.0f} s, load average {load}")


if __name__ == "__main__":
    main()
