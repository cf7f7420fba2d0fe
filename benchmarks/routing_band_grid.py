"""Print the routing band's grid: 6 MoE shapes × Zipf 0.6/1.2/1.5/2.0 × 3 batches, virtual time.

For every case: the simulator's truth (all bytes / decode-only), the client's MBU with its band
[fewest experts, uniform] on the byte law and on the counted steps, whether the rule holds (the
truth inside the band, or the figure within 1 pt) and the flags; then the count of cases that
hold and the median band width. The same cases are ``tests/test_validation_routing_band.py``'s
slow grid; this script prints them. Run: ``PYTHONPATH=src python benchmarks/routing_band_grid.py``
(about two minutes on one core).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_validation_routing_band import MODELS, SKEWS, rows, run


def main() -> None:
    print(
        "| model | Zipf | B | truth MBU / dec | MBU [band] | decode-only [band] | counted MBU "
        "[band] | holds | flags |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    widths: list[float] = []
    held = total = 0
    worst = 0.0  # the largest amount a figure read below its truth
    for case, eff, batches in MODELS:
        for skew in SKEWS:
            for batch in batches:
                o = run(case, eff, skew, batch)
                try:
                    got = rows(o)
                except AssertionError as exc:
                    print(f"| {case.label} | {skew:g} | {batch} | refused: {exc} |")
                    total += 1
                    continue
                ok = all(r.holds for r in got)
                held += ok
                total += 1
                widths.append(got[0].width_pt)
                worst = min(worst, *(r.upper - r.truth for r in got))
                cells = [
                    f"{100 * r.upper:.1f} [{_lo(r.lower)}, {100 * r.upper:.1f}]"
                    for r in (got[0], got[1], got[2])
                ]
                flags = ", ".join(k for k, v in o.mbu.flags.model_dump().items() if v)
                print(
                    f"| {case.label} | {skew:g} | {o.truth.mean_batch:.0f} | "
                    f"{100 * o.truth.all_bytes:.1f} / {100 * o.truth.decode_only:.1f} | "
                    f"{' | '.join(cells)} | {'yes' if ok else '**no**'} | {flags} |"
                )
    print(f"\nrule holds in {held} of {total} cases")
    if widths:
        print(f"median band width (headline, byte law): {statistics.median(widths):.1f} pt")
    print(f"lowest figure minus truth: {100 * worst:+.1f} pt")


def _lo(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


if __name__ == "__main__":
    main()
