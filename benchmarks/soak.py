"""Soak: one long probe near capacity against the simulator, and the client's memory per request.

    python benchmarks/soak.py --duration 180 --rate 40

The simulator runs in its own process (``sim_mode=subprocess``), so the resident memory
sampled here (``/proc/self/statm``, every progress tick) is the load generator's alone: its
in-flight tasks, the records it keeps for the probe's figures and the incremental
``requests.jsonl`` spill. Printed: requests finished, RSS after warm-up and at the end, the
growth per finished request (the memory a record costs while the probe runs), and the same
for the second half alone (a leak beyond the records would make it grow faster than the
first). The sender's bound (``MAX_PENDING_SENDS``) caps what is in flight; the records are
the only part that grows with the probe's length, and they are on disk as they end.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tokenwatt.load.probe import ProbeProgress, run_probe
from tokenwatt.load.spill import RecordSpill
from tokenwatt.load.target import open_target
from tokenwatt.spec import ProbeSettings, parse_spec

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE


def spec_for(args: argparse.Namespace) -> Any:
    return parse_spec(
        {
            "name": "soak",
            "model": {"source": args.model},
            "hardware": {"accelerator": args.accelerator},
            "endpoint": {"url": "sim"},
            "sim": {"efficiency": 0.5, "prefill_cost": False, "max_num_seqs": args.max_num_seqs},
            "workload": {
                "input_tokens": args.input_tokens,
                "output_tokens": args.output_tokens,
                "seed": 7,
            },
            "slo": {"ttft_ms": 2000, "tpot_ms": 200},
        }
    )


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    spec = spec_for(args)
    samples: list[tuple[float, int, int]] = []  # (elapsed_s, finished, rss_bytes)

    def on_progress(p: ProbeProgress) -> None:
        samples.append((p.elapsed_s, p.finished, rss_bytes()))

    with tempfile.TemporaryDirectory() as tmp:
        spill = RecordSpill(Path(tmp) / "requests.jsonl")
        async with open_target(spec, sim_mode="subprocess") as target:
            t0 = time.monotonic()
            run = await run_probe(
                spec,
                target.client,
                rate_rps=args.rate,
                seed=1,
                settings=ProbeSettings(
                    warmup_s=args.warmup,
                    min_duration_s=args.duration,
                    max_duration_s=args.duration,
                    min_requests=1,
                    drain_timeout_s=30,
                    early_stop=False,
                ),
                on_progress=on_progress,
                on_record=spill,
            )
            wall = time.monotonic() - t0
        spill.close()
        spilled_bytes = spill.path.stat().st_size if spill.path.exists() else 0
    after_warm = [s for s in samples if s[0] >= args.warmup] or samples
    first, last = after_warm[0], after_warm[-1]
    mid = after_warm[len(after_warm) // 2]

    def per_request(a: tuple[float, int, int], b: tuple[float, int, int]) -> float | None:
        return (b[2] - a[2]) / (b[1] - a[1]) if b[1] > a[1] else None

    m = run.metrics
    return {
        "rate_rps": args.rate,
        "wall_s": round(wall, 1),
        "requests_recorded": len(run.records),
        "requests_spilled": spill.written,
        "spilled_bytes": spilled_bytes,
        "errors_by_kind": m.errors_by_kind,
        "saturated": run.saturated,
        "late_sends": run.late_sends,
        "output_tokens_per_s": m.output_tokens_per_s,
        "ttft_p99_s": m.ttft_s.p99,
        "rss_after_warmup_bytes": first[2],
        "rss_end_bytes": last[2],
        "rss_peak_bytes": max(s[2] for s in samples),
        "rss_growth_per_request_bytes": per_request(first, last),
        "rss_growth_per_request_first_half_bytes": per_request(first, mid),
        "rss_growth_per_request_second_half_bytes": per_request(mid, last),
        "spill_bytes_per_request": spilled_bytes / spill.written if spill.written else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=180.0, help="window, s")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=40.0, help="offered req/s (near capacity)")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--accelerator", default="h100-sxm")
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--input-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    args = ap.parse_args()
    from tokenwatt.cli._loop import run_async

    print(json.dumps(run_async(soak(args)), indent=2))


if __name__ == "__main__":
    main()
