"""MBU work per probe: calls and CPU time of the MBU derivation, window and interval blocks.

    PYTHONPATH=src python benchmarks/mbu_cost.py [--window-s 10] [--repeat 3]

For each case one real probe runs against the simulator (its own process, loopback), long
enough for the full set of interval blocks; then ``load.derive.summarize_probe`` (what
``probe`` and ``bench`` call) is repeated on that probe's records and measured:

- CPU time of ``probe_mbu`` summed over one probe (the window and every block), plus the one
  sweep of the records the window and its blocks share where the code has one
  (``RequestSweep``), without a profiler, the median of ``--repeat`` runs;
- under ``cProfile`` (one run: the spec parsed as a run parses it, then the probe): calls
  of the MBU entry point, of the mixed-step estimate, of the speculative estimate, of the
  distinct-experts evaluations, of the passes over the records that build the span events
  and gather the token gaps, and how many times the expert-load file was read.

Cases: Qwen3-30B-A3B with uniform routing; the same with ``engine.expert_load_file`` (a
Zipf 1.2 histogram); the same with n-gram speculation (k = 3) and the expert load. Only
interfaces that exist before and after a change are used, so the script can measure both.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokenwatt.geometry import load_geometry
from tokenwatt.load import derive
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target, resolve_accelerator
from tokenwatt.spec import BenchSpec, parse_spec

MODEL = "qwen3-30b-a3b"
WINDOW_S = [10.0]  # the probe window (``--window-s``)
# function names whose calls are counted (any module): entry points, estimates, routing math
COUNTED = {
    "probe_mbu": "probe_mbu (window + blocks)",
    "compute_mbu": "compute_mbu",
    "estimate_mixed_steps": "estimate_mixed_steps",
    "speculative_mbu": "speculative_mbu",
    "_distinct_by_batch": "distinct experts over a batch law",
    "expected_distinct_with": "distinct experts evaluations (ExpertLoad, one per batch)",
    "_distinct_experts": "distinct experts (speculative, own formula)",
    "load_expert_load": "expert-load file parsed (load_expert_load)",
    "read_expert_counts": "expert-load file parsed (read_expert_counts)",
    "_events": "span event lists built (a pass over the records' stamps)",
    "_gaps": "token gaps gathered (a pass over the records' chunks)",
}


def _zipf_file(folder: Path) -> Path:
    w = [r**-1.2 for r in range(1, 129)]
    path = folder / "zipf.json"
    path.write_text(json.dumps({"counts": [[round(1e6 * x) for x in w]]}))
    return path


def _body(engine: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {"source": MODEL},
        "hardware": {"accelerator": "h100-sxm", "gpus": 1},
        "endpoint": {"url": "sim"},
        "sim": {"efficiency": 0.5, "prefill_cost": False, **sim},
        "workload": {"input_tokens": 256, "output_tokens": 48, "seed": 1},
        "search": {
            "probe": {
                "warmup_s": 2,
                "min_duration_s": WINDOW_S[0],
                "min_requests": 400,
                "max_duration_s": 4 * WINDOW_S[0],
            }
        },
        "engine": engine,
    }


def _probe(spec: BenchSpec, rate: float) -> ProbeRun:
    async def main() -> ProbeRun:
        async with open_target(spec, sim_mode="subprocess") as target:
            return await run_probe(spec, target.client, rate_rps=rate, seed=1)

    return asyncio.run(main())


def _timed(real: Callable[..., Any], totals: list[float]) -> Callable[..., Any]:
    """``real``, adding the CPU time of each call to ``totals``."""

    def timed(*args: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        try:
            return real(*args, **kw)
        finally:
            totals.append(time.process_time() - t0)

    return timed


def _summarize(spec: BenchSpec, run: ProbeRun) -> Any:
    return derive.summarize_probe(
        index=1, run=run, spec=spec, geometry=load_geometry(MODEL),
        accelerator=resolve_accelerator(spec.hardware),
    )  # fmt: skip


def _measure(body: dict[str, Any], run: ProbeRun, repeat: int) -> dict[str, Any]:
    spec = parse_spec(body)
    real = derive.probe_mbu
    sweep = getattr(derive, "RequestSweep", None)  # the shared sweep, where there is one
    cpu = []
    calls = 0
    try:
        for _ in range(repeat):
            totals: list[float] = []
            swept: list[float] = []
            derive.probe_mbu = _timed(real, totals)  # type: ignore[assignment]
            if sweep is not None:
                derive.RequestSweep = _timed(sweep, swept)  # type: ignore[misc, unused-ignore]
            summary = _summarize(spec, run)
            cpu.append(sum(totals) + sum(swept))
            calls = len(totals)
    finally:
        derive.probe_mbu = real  # type: ignore[assignment]
        if sweep is not None:
            derive.RequestSweep = sweep  # type: ignore[misc, unused-ignore]
    prof = cProfile.Profile()
    prof.enable()
    _summarize(parse_spec(body), run)  # the spec parsed as a run parses it, then the probe
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    counted: dict[str, int] = {}
    for (_file, _line, name), (_cc, nc, *_rest) in stats.items():
        if name in COUNTED:
            counted[COUNTED[name]] = counted.get(COUNTED[name], 0) + nc
    blocks = summary.intervals.blocks if summary.intervals is not None else 0
    return {"cpu_s": statistics.median(cpu), "probe_mbu_calls": calls, "blocks": blocks,
            "calls": counted, "mbu": summary.mbu, "flags": summary.flags}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=45.0, help="requests/s (≥ 400 counted)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    WINDOW_S[0] = args.window_s
    with tempfile.TemporaryDirectory() as tmp:
        load = {"expert_load_file": str(_zipf_file(Path(tmp)))}
        ngram = {"speculative": {"method": "ngram", "num_tokens": 3, "acceptance": 0.8}}
        cases = {
            "moe uniform": (_body({}, {}), _body({}, {})),
            "moe measured load": (_body({}, {"routing": "zipf:1.2"}),
                                  _body(load, {"routing": "zipf:1.2"})),
            "moe ngram k=3, measured load": (_body({}, {"routing": "zipf:1.2", **ngram}),
                                             _body(load, {"routing": "zipf:1.2", **ngram})),
        }  # fmt: skip
        for name, (drive, derive_spec) in cases.items():
            run = _probe(parse_spec(drive), args.rate)
            r = _measure(derive_spec, run, args.repeat)
            mbu = "—" if r["mbu"] is None else f"{100 * r['mbu']:.1f} %"
            print(f"{name}: {r['blocks']} blocks, probe_mbu calls {r['probe_mbu_calls']}, "
                  f"MBU CPU {1e3 * r['cpu_s']:.0f} ms per probe "
                  f"({1e3 * r['cpu_s'] / max(1, r['probe_mbu_calls']):.1f} ms a call), "
                  f"MBU {mbu}")  # fmt: skip
            for label, n in sorted(r["calls"].items()):
                print(f"    {label}: {n}")


if __name__ == "__main__":
    main()
