"""Wall time of a failing probe on llama-server, with and without the in-flight TTFT misses.

    python benchmarks/late_first_tokens_llama.py                      # 0.615 req/s, 256 → 32
    python benchmarks/late_first_tokens_llama.py --rate 0.4 --repeat 2

Starts llama-server as ``benchmarks/llama_wall.py`` does (Gemma 3 270M Q4_K_M, 4 slots, one
core, ``-t 1``) and runs one search probe at a rate above its boundary twice, as ``bench``
runs it (open loop, Poisson, the spec's default probe settings: 10 s warm-up, ≥ 60 s and ≥ 200
requests, the sequential test): once with the early stop reading finished requests only
(``before``), once counting the counted requests in flight whose first token is already past
the TTFT limit (``after``, ``load.probe.LateFirstTokens``). A fresh server for each probe (the
cancelled queue of one must not load the next); the order alternates over ``--repeat``.

Prints per probe: wall time from the first arrival slot to the end, window length, counted
and judged requests, misses, the known misses in flight the stop counted, and the stop's
reason. SLOs: p99 TTFT ≤ 4 s, TPOT ≤ 400 ms, 256 → 32 tokens (the llama-server case of
docs/methodology.md, "Against llama-server", where every rate down to 0.316 req/s failed on
TTFT in 47-88 s windows). Bounded: each probe's window at most ``--max-window`` s (its drain
120 s); every server is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from llama_wall import ALIAS, CACHE, _find, _start_server, _stop
from search_wall import _loadavg

from tokenwatt.load.probe import LateFirstTokens, ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.metrics.sequential import SequentialStop
from tokenwatt.metrics.slo import Limits, latencies
from tokenwatt.spec import BenchSpec


def _spec(url: str, args: argparse.Namespace) -> BenchSpec:
    gguf = _find("TOKENWATT_GGUF", CACHE / "models" / "gemma-3-270m-q4_k_m.gguf")
    return BenchSpec.model_validate(
        {
            "name": "late-first-tokens",
            "endpoint": {"url": url, "model": ALIAS, "api": "completions"},
            "model": {"source": str(gguf)},
            "hardware": {
                "accelerator": None,
                "custom": {"bandwidth_bytes_per_s": 1.7e10, "memory_bytes": 2.4e10},
            },
            "power": {"sources": []},
            "workload": {
                "input_tokens": args.input_tokens,
                "output_tokens": args.output_tokens,
                "seed": 11,
            },
            "slo": {"ttft_ms": args.ttft_ms, "tpot_ms": args.tpot_ms},
            "search": {"probe": {"max_duration_s": args.max_window}},
        }
    )


async def _one(spec: BenchSpec, rate: float, late: bool) -> tuple[ProbeRun, SequentialStop, float]:
    stop = SequentialStop(Limits.from_spec(spec.slo))
    hook = LateFirstTokens.of(stop) if late else None
    async with open_target(spec) as target:
        t0 = time.perf_counter()
        run = await run_probe(
            spec, target.client, rate_rps=rate, seed=3, should_stop=stop.should_stop,
            should_close=stop.should_close, late=hook,
        )  # fmt: skip
        wall = time.perf_counter() - t0
    return run, stop, wall


def _print(kind: str, run: ProbeRun, stop: SequentialStop, wall: float) -> None:
    lats = latencies(run.counted)
    w = run.window_dict()
    cancelled = sum(1 for r in run.counted if r.cancelled)
    print(
        f"{kind:6s} wall {wall:6.1f} s (slot 0 to end {(run.ended_ns - run.started_ns) / 1e9:6.1f}"
        f" s), window {w['window_s']:5.1f} s, counted {len(run.counted)}, judged {len(lats)}, "
        f"cancelled {cancelled}, misses {stop.misses}, in flight counted "
        f"{run.late_first_tokens_at_stop}, stopped early {run.stopped_early}"
    )
    print(f"       reason: {stop.reason}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rate", type=float, default=0.615, help="offered rate, req/s")
    ap.add_argument("--repeat", type=int, default=1, help="before/after pairs, order alternating")
    ap.add_argument("--ttft-ms", type=float, default=4000)
    ap.add_argument("--tpot-ms", type=float, default=400)
    ap.add_argument("--input-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--max-window", type=float, default=240, help="longest window, s")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # the client on core 1, the server on core 0
    print(f"rate {args.rate:g} req/s, SLO p99 TTFT ≤ {args.ttft_ms:g} ms, TPOT ≤ "
          f"{args.tpot_ms:g} ms, {args.input_tokens} → {args.output_tokens} tokens")  # fmt: skip
    walls: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(args.repeat):
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
        for kind in order:
            with tempfile.TemporaryDirectory() as tmp:
                server, url = _start_server(Path(tmp) / "llama-server.log")
                try:
                    print(f"load average: {_loadavg()}")
                    run, stop, wall = asyncio.run(
                        _one(_spec(url, args), args.rate, kind == "after")
                    )
                finally:
                    _stop(server)
            _print(kind, run, stop, wall)
            walls[kind].append(wall)
    for kind, ws in walls.items():
        print(f"{kind}: probe wall time {', '.join(f'{w:.1f}' for w in ws)} s")


if __name__ == "__main__":
    main()
