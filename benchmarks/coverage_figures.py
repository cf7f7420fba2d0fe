"""Coverage of the 95 % intervals of T, τ and MBU, in virtual time on the simulator.

    python benchmarks/coverage_figures.py --probes 200 --window-s 60 --warmup-s 60

For each case (``tests/virtual_probe.CASES``: dense Llama-3.1-8B 1024 → 256, MoE Qwen3-30B-A3B
512 → 128, prefill-heavy Llama-3.1-8B 2048 → 32, each on a simulated H100 SXM) it runs
``--probes`` seeded virtual probes just below the case's boundary (``tests/virtual_figures``),
summarized by the production path (``load.derive.summarize_probe`` → ``load.intervals``), and
counts how often each interval holds the simulator's long-run truth (``long_run_truth``:
``--truth-seeds`` runs of ``--truth-span-s``). Prints one row per case and figure: covered of
probes with an interval, the share, the mean half width relative to the truth, and the load
average (virtual time does not feel it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tokenwatt.metrics import intervals
from virtual_figures import (
    CASES as _CASES,
)
from virtual_figures import (
    FIGURES,
    HOLDOUT_CASES,
    HOLDOUT_RATES,
    Truth,
    long_run_truth,
    probe_summary,
)
from virtual_figures import (
    RATES as _RATES,
)

# the development cases and the held-out ones (``--cases qwen3-32b-prefill llama-70b-tp4``)
CASES = {**_CASES, **HOLDOUT_CASES}
RATES = {**_RATES, **HOLDOUT_RATES}

ROW = "| {case} ({rate:g} req/s) | {fig} | {truth} | {k} of {n} ({share}) | {hw} | {none} | {err} |"


def _one(
    job: tuple[str, int, float, float],
) -> tuple[str, int, dict[str, tuple[float, float] | None], dict[str, float | None]]:
    name, seed, window_s, warmup_s = job
    s = probe_summary(CASES[name], RATES[name], seed, window_s, warmup_s)
    iv = s.intervals
    out: dict[str, tuple[float, float] | None] = {}
    for f in FIGURES:
        span = None if iv is None else getattr(iv, f)
        ok = span is not None and span[0] is not None and span[1] is not None
        out[f] = (span[0], span[1]) if ok else None  # type: ignore[index]
    return name, seed, out, {f: getattr(s, f) for f in FIGURES}


def _truth_of(truth: Truth, fig: str) -> float:
    return {"output_tokens_per_s": truth.t, "itl_token_weighted_s": truth.tau, "mbu": truth.mbu}[
        fig
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=list(_RATES), choices=list(RATES))
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--window-s", type=float, default=60.0)
    ap.add_argument("--warmup-s", type=float, default=60.0)
    ap.add_argument("--truth-span-s", type=float, default=600.0)
    ap.add_argument("--truth-seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-blocks", type=int, help="try another metrics.intervals.MAX_BLOCKS")
    ap.add_argument("--save", type=Path, help="also write each probe's points and spans (JSONL)")
    args = ap.parse_args()
    if args.max_blocks:
        intervals.MAX_BLOCKS = args.max_blocks  # the workers fork after this
    t0 = time.perf_counter()
    truths = {
        c: long_run_truth(CASES[c], RATES[c], args.truth_span_s, seeds=args.truth_seeds)
        for c in args.cases
    }
    jobs = [
        (c, seed, args.window_s, args.warmup_s)
        for c in args.cases
        for seed in range(1, args.probes + 1)
    ]
    spans: dict[str, list[dict[str, tuple[float, float] | None]]] = {c: [] for c in args.cases}
    points: dict[str, list[dict[str, float | None]]] = {c: [] for c in args.cases}
    save = args.save.open("w") if args.save else None
    with Pool(args.workers) as pool:
        for i, (name, seed, out, pts) in enumerate(pool.imap_unordered(_one, jobs, chunksize=4), 1):
            spans[name].append(out)
            points[name].append(pts)
            if save is not None:
                save.write(json.dumps({"case": name, "seed": seed, "spans": out, "points": pts}))
                save.write("\n")
                save.flush()
            if i % 25 == 0:
                print(
                    f"{i} of {len(jobs)} probes, {time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    print(
        f"window {args.window_s:g} s, {args.probes} probes per case, truth over "
        f"{args.truth_seeds} × {args.truth_span_s:g} s; {time.perf_counter() - t0:.0f} s wall, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print("| case | figure | truth | covered | mean half width | no interval | mean error |")
    print("|---|---|---|---|---|---|---|")
    for c in args.cases:
        for f in FIGURES:
            truth = _truth_of(truths[c], f)
            got = [s[f] for s in spans[c] if s[f] is not None]
            k = sum(1 for lo, hi in got if lo <= truth <= hi)  # type: ignore[misc]
            n = len(got)
            hw = np.mean([(hi - lo) / 2 / truth for lo, hi in got]) if got else float("nan")  # type: ignore[misc]
            err = [v / truth - 1 for p in points[c] if (v := p[f]) is not None]
            print(ROW.format(case=c, rate=RATES[c], fig=f, truth=f"{truth:.5g}", k=k, n=n,
                             share=f"{k / n:.1%}" if n else "-", hw=f"±{hw:.1%}",
                             none=len(spans[c]) - n,
                             err=f"{np.mean(err):+.2%}" if err else "-"))  # fmt: skip


if __name__ == "__main__":
    main()
