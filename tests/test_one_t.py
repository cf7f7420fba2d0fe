"""One T: the headline throughput (and MBU's T) is the tokens received inside the window ÷
the window, checked against the simulator's own truth log of the tokens it emitted there.

The old definition (tokens of the requests *scheduled* in the window ÷ window) undercounts a
lock-step closed loop: every stream starts together, so the requests scheduled in the window
are a whole number of generations that need not match the tokens delivered inside it. The
truth is independent of the client: the simulator logs each step's emission time
(``t_end_ns``, when its frames were written) and how many tokens it emitted, on the same
monotonic clock, from its own process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.spec import BenchSpec, parse_spec

pytestmark = pytest.mark.exclusive  # every test: T over HTTP against the simulator's tokens


def truth_tokens(path: Path, w0: int, w1: int) -> int:
    """Tokens the simulator emitted in steps whose frames were written in [w0, w1)."""
    total = 0
    with path.open("rb") as fh:
        for line in fh:
            s = orjson.loads(line)
            if w0 <= s["t_end_ns"] < w1:
                total += s["tokens_emitted"]
    return total


def spec(n_out: int, **probe: Any) -> BenchSpec:
    return parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm", "gpus": 1},
            "endpoint": {"url": "sim"},
            "sim": {"efficiency": 0.5, "prefill_cost": False},
            "workload": {"input_tokens": 128, "output_tokens": n_out, "seed": 3},
            "search": {
                "probe": {
                    "warmup_s": 0.5,
                    "min_duration_s": 3.0,
                    "min_requests": 1,
                    "max_duration_s": 8.0,
                    "drain_timeout_s": 30,
                    **probe,
                }
            },
        }
    )


async def _probe(
    s: BenchSpec, log: Path, *, rate_rps: float | None, concurrency: int | None
) -> ProbeRun:
    async with open_target(s, sim_mode="subprocess", truth_log=log) as target:
        return await run_probe(s, target.client, rate_rps=rate_rps, concurrency=concurrency, seed=3)


def _check(run: ProbeRun, log: Path) -> tuple[float, float]:
    truth = truth_tokens(log, run.window_start_ns, run.window_end_ns)
    window_s = (run.window_end_ns - run.window_start_ns) / 1e9
    t = run.metrics.output_tokens_per_s
    assert t is not None and truth > 0
    return t, truth / window_s


def test_lock_step_closed_loop_t_matches_the_simulators_tokens(tmp_path: Path) -> None:
    log = tmp_path / "truth-closed.jsonl"
    run = asyncio.run(_probe(spec(200), log, rate_rps=None, concurrency=64))
    asyncio.run(asyncio.sleep(0.3))  # the child flushes its log on exit
    t, truth = _check(run, log)
    print(f"closed loop: T {t:.1f} tok/s, truth {truth:.1f} tok/s")
    assert t == pytest.approx(truth, rel=0.01)


def test_poisson_probe_t_matches_the_simulators_tokens(tmp_path: Path) -> None:
    log = tmp_path / "truth-poisson.jsonl"
    run = asyncio.run(_probe(spec(128), log, rate_rps=20.0, concurrency=None))
    asyncio.run(asyncio.sleep(0.3))
    t, truth = _check(run, log)
    print(f"poisson: T {t:.1f} tok/s, truth {truth:.1f} tok/s")
    assert t == pytest.approx(truth, rel=0.01)
