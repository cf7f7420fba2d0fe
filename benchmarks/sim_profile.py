"""Where a simulator step's time goes while it serves N streams: sections timed inside the child.

Runs the ``benchmarks/sim_throughput.py`` load (N streams, ~10 ms steps, the minimal client)
against a simulator child whose driver is wrapped with ``perf_counter_ns`` timers: scheduling
and pricing (``ReplicaEngine.plan``), rendering (``_render``), the writes (``_write``, of which
the lateness bookkeeping ``Lateness.add_ns``) and the accounting after them (``_after``). At
exit the child prints the totals as one JSON line on stderr; this prints them per step and
per written frame, with the child's CPU time per step. The wrappers add a call each, well
under a microsecond per step.

    python benchmarks/sim_profile.py --streams 256 1000
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sim_throughput import bench_config, drive

PREFIX = "SIM_PROFILE "
now_ns = time.perf_counter_ns


def _timed(owner: Any, name: str, totals: dict[str, int]) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kw: Any) -> Any:
        t = now_ns()
        try:
            return inner(*args, **kw)
        finally:
            totals[name] += now_ns() - t

    setattr(owner, name, wrapper)


def child() -> int:
    """The simulator child (``tokenwatt.sim.child``'s protocol) with its driver timed."""
    from tokenwatt.sim import child as sim_child
    from tokenwatt.sim import server
    from tokenwatt.sim.engine import ReplicaEngine
    from tokenwatt.sim.truth import Lateness

    totals: dict[str, int] = defaultdict(int)
    counts = {"steps": 0, "frames": 0}
    for owner, name in (
        (ReplicaEngine, "plan"),
        (server.ReplicaDriver, "_render"),
        (server.ReplicaDriver, "_write"),
        (server.ReplicaDriver, "_after"),
        (Lateness, "add_ns"),
    ):
        _timed(owner, name, totals)
    write = server.ReplicaDriver._write

    def counted(self: Any, writes: list[Any], deadline: int) -> int:
        counts["steps"] += 1
        counts["frames"] += len(writes)
        return write(self, writes, deadline)

    server.ReplicaDriver._write = counted  # type: ignore[method-assign]
    cpu0 = time.process_time()

    def report() -> None:
        out = {**totals, **counts, "cpu_s": time.process_time() - cpu0}
        print(PREFIX + json.dumps(out), file=sys.stderr, flush=True)

    atexit.register(report)
    return sim_child.main()


def profile(streams: int, warmup_s: float, window_s: float) -> dict[str, Any]:
    config, max_tokens = bench_config(streams, 10.0, warmup_s, window_s)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"config": config.to_dict(), "host": "127.0.0.1", "port": 0}))
    proc.stdin.close()
    proc.stdin = None
    url = str(json.loads(proc.stdout.readline())["url"]).removesuffix("/v1")
    result = asyncio.run(drive(url, streams, max_tokens, warmup_s, window_s))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    lines = [ln for ln in err.splitlines() if ln.startswith(PREFIX)]
    if not lines:
        raise SystemExit(f"the profiled child printed no totals: {err[-500:]}")
    return {"result": result, "totals": json.loads(lines[-1].removeprefix(PREFIX))}


def main() -> None:
    if "--child" in sys.argv:
        sys.exit(child())
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="*", default=[256, 1000])
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--window-s", type=float, default=8.0)
    args = ap.parse_args()
    for n in args.streams:
        out = profile(n, args.warmup_s, args.window_s)
        t, r = out["totals"], out["result"]
        steps, frames = max(t["steps"], 1), max(t["frames"], 1)
        per_step = ", ".join(
            f"{k.strip('_')} {t.get(k, 0) / steps / 1e3:.0f}"
            for k in ("plan", "_render", "_write", "add_ns", "_after")
        )
        writes_ns = t.get("_write", 0) - t.get("add_ns", 0)
        print(
            f"{n:5d} streams, µs per step: {per_step} (add_ns is inside write); "
            f"{writes_ns / frames / 1e3:.2f} µs per frame written; child CPU "
            f"{t['cpu_s'] / steps * 1e3:.2f} ms per step ({steps} steps, whole run); window: "
            f"lateness p50 {r['lateness_p50_ms']:.2f} ms, p99 {r['lateness_p99_ms']:.2f} ms, "
            f"{r['tokens_per_s']:,.0f} tokens/s, client CPU {r['client_cpu_share']:.0%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
