"""Benchmark StreamClient against the built-in simulator (a real aiohttp server in a child).

    python benchmarks/client_sim.py --streams 200 --duration 10

The same closed loop as client_fastsse.py's paced mode (``--streams`` slots, requests of
``--max-tokens`` back to back), with continuous usage and ignore_eos on. The simulator's chunks
carry no send stamps, so the timestamp error is not measured here; the simulator reports its own
emit lateness (step deadline → chunk write), printed as server_lateness. Simulator pinned to
--server-core, client to --client-core; on a shared machine others use the same cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from client_fastsse import run_paced

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.sim import SimConfig, start_sim_subprocess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--ramp-s", type=float, default=1.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--model", default="llama-3.1-8b", help="geometry preset")
    ap.add_argument("--accelerator", default="h100-sxm")
    ap.add_argument("--efficiency", type=float, default=0.5)
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--client-core", type=int, default=1)
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args()
    args.stream_usage = True
    args.ignore_eos = True
    args.itl_ms = float("nan")
    cfg = SimConfig(
        geometry=load_geometry(args.model),
        accelerator=get_accelerator(args.accelerator),
        served_model_name="sim",
        efficiency=args.efficiency,
        max_num_seqs=max(256, args.streams),
        prefill_cost=False,
        max_model_len=8192,
    )
    sim = start_sim_subprocess(cfg)
    proc = getattr(sim, "process", None)
    if proc is not None and args.server_core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(proc.pid, {args.server_core})
    if args.client_core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.client_core})
    port = urlsplit(sim.url).port
    assert port is not None
    stats_url = sim.url.rsplit("/v1", 1)[0] + "/tokenwatt/sim/stats"

    def stats(_port: int, reset: bool = False) -> dict[str, Any]:
        with urllib.request.urlopen(stats_url + ("?reset=1" if reset else ""), timeout=20) as r:
            d = json.loads(r.read())
        return {"lateness": d.get("lateness")}

    loop_factory = asyncio.new_event_loop
    if not args.no_uvloop:
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            res = runner.run(run_paced(args, port, stats_fn=stats, model="sim"))
    finally:
        sim.stop()
    print(
        f"# simulator {args.model} on {args.accelerator} (core {args.server_core}), "
        f"client on core {args.client_core}; shared machine"
    )
    for k, v in res.items():
        print(f"  {k:28s} {v:.4g}" if isinstance(v, float) else f"  {k:28s} {v}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
