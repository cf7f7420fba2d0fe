"""What one step costs the simulator in Python, apart from its writes: schedule and price it
(``ReplicaEngine.plan``), render its frames (``ReplicaDriver._render``) and account for it
(``ReplicaDriver._after``), per running stream.

No sockets and no clock waits: a simulator (not started) with N streaming requests already
decoding, stepped back to back, so the figures are CPU time and barely move with machine
load. With ~10 ms steps a replica's driver has ~10 ms per step for all of this plus one
``write(2)`` per stream (``benchmarks/sim_write_cost.py``); whatever this takes is not
available for the writes.

    python benchmarks/sim_step_cost.py --streams 256 1000 --steps 400
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from sim_throughput import bench_config

from tokenwatt.sim.server import ReplicaDriver, SimServer, _Sink
from tokenwatt.sim.wire import ChunkRenderer

now_ns = time.perf_counter_ns


def measure(streams: int, steps: int) -> dict[str, list[float]]:
    config, max_tokens = bench_config(streams, 10.0, 0.0, steps / 100)  # > steps tokens
    loop = asyncio.new_event_loop()
    server = SimServer(config)
    engine = server.node.replicas[0]
    driver = ReplicaDriver(server, engine)
    for _ in range(streams):
        renderer = ChunkRenderer(
            chat=False,
            request_id="cmpl-bench",
            created=0,
            model="bench",
            prompt_tokens=64,
            include_usage=False,
            continuous_usage=False,
        )
        sink = _Sink(renderer, True, loop.create_future(), config)
        req = server.node.new_request(64, max_tokens, now_ns(), ignore_eos=True, sink=sink)
        server.node.submit(req)
    out: dict[str, list[float]] = {"plan": [], "render": [], "after": []}
    t = now_ns()
    for i in range(steps):
        t0 = now_ns()
        step = engine.plan(t)
        t1 = now_ns()
        assert step is not None
        stalled = driver._render(step)[-1]
        t2 = now_ns()
        t = step.t_end_ns
        driver._after(step, t, stalled)
        t3 = now_ns()
        if i >= 20:  # past admission and the first tokens
            n = len(step.emits)
            out["plan"].append((t1 - t0) / n / 1e3)
            out["render"].append((t2 - t1) / n / 1e3)
            out["after"].append((t3 - t2) / n / 1e3)
    loop.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="*", default=[256, 1000])
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args()
    for n in args.streams:
        res = measure(n, args.steps)
        parts = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in res.items())
        total = sum(statistics.median(v) for v in res.values())
        print(
            f"{n:5d} streams, µs per stream per step (median of {args.steps - 20} steps): "
            f"{parts}; together {total:.2f} µs = {total * n / 1e3:.2f} ms per step"
        )


if __name__ == "__main__":
    main()
