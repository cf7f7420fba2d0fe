"""A hostile server against the client: lying token counts, stale answers with and without
ids, an endpoint that never answers, streams that stall, and the whole fault matrix. Each case
runs against the scripted fault server on 127.0.0.1 (``tests/faultserver.py``), through the
``tokenwatt probe`` command where the user would meet it, in-process otherwise. Prints one
line per case; ``run()`` returns them as (case, outcome).

    PYTHONPATH=src python benchmarks/hostile_client.py

Run it against another tree (PYTHONPATH=/other/src) for a before/after; the fault server is
always this tree's. T is the probe's output tokens/s, acceptance its tokens per decode step.
Measured on a shared 2-core machine (before: one run of the tree these checks were added to;
after: two runs with them, ranges where they differ):

usage 100,000 past max
    before  rc 0, T 11,333,754 tok/s, acceptance 393.16, SLO pass, 0 failed
    after   rc 3, T 0-25 tok/s, acceptance -, SLO fail, 25-32 failed (error probe: protocol)
final usage 10^9
    before  rc 0, T 452,450,403,518 tok/s, acceptance 3,921,568.62, SLO pass, 0 failed
    after   rc 3, T 0-470 tok/s, acceptance -, SLO fail, 66-85 failed
negative usage
    before  rc 1 TRACEBACK (the Benchmark Report export), T 95,529 tok/s, SLO pass
    after   rc 3, T 0-31 tok/s, acceptance -, SLO fail, 52-101 failed
text chunks, no tokens (truth: 2 tokens a step)
    before  rc 0, T 28,236 tok/s, acceptance 1.00, SLO pass, 0 failed
    after   rc 3, T 0 tok/s, acceptance -, SLO fail, 67-171 failed
honest 2 tokens/chunk
    before  rc 0, T 162,300 tok/s, acceptance 2.00, SLO pass, 0 failed
    after   rc 0, T 59,200 tok/s, acceptance 2.00, SLO pass, 0 failed
stale, unique ids     before  1 of 21 took a late copy as their answer, 9 refused, 10 stray
                      after   0 of 21 took a late copy as their answer, 1 refused, 1 stray
stale, constant id    before  10 of 21 took a late copy, 0 refused, 10 stray
                      after   0 of 21 took a late copy, 1 refused, 1 stray
stale, no ids         before  10 of 21 took a late copy, 0 refused, 10 stray
                      after   0 of 21 took a late copy, 1 refused, 1 stray
fault matrix (30 modes, 96 requests)
    before  0 lost, 0 doubled, 76 classified right (the 5 lying-count modes wrong)
    after   0 lost, 0 doubled, 96 classified right
unresponsive endpoint (5 s probe, TTFT limit 500 ms)
    before  still running at the 90 s cap (first_token_s 600 s: about 10 minutes)
    after   rc 3 after 18.3-19.6 s, named "endpoint unresponsive"
stall after first token
    before  rc 0, not named
    after   rc 3, named "endpoint stalls every stream"

The after-T of the lying cases is tokens of requests cancelled mid-stream at the probe's
early stop while their counts still agreed (real deliveries), and the failed count is where
the error stop fell; the honest case's T differs between runs with the machine's load, not
by the checks (its figures are the same).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from faultserver import (  # noqa: E402
    EXPECTED,
    LATE_MODES,
    LATE_TOKENS,
    MODES,
    FaultServer,
    threaded,
)

UNRESPONSIVE_CAP_S = 90  # the never-answering case is cut here (it once ran 10 minutes)
N_OUT = 8


def _cli(mode: str, out: Path, *args: str, timeout_s: float = 300) -> tuple[int | None, str, float]:
    """``tokenwatt probe`` against the fault server in ``mode``: exit status (None: cut at
    ``timeout_s``), its output, wall seconds."""
    with threaded(FaultServer(modes=[mode])) as srv:
        cmd = [
            *(sys.executable, "-m", "tokenwatt", "probe"),
            *("--base-url", f"http://127.0.0.1:{srv.port}", "-m", "llama-3.1-8b"),
            *("--set", "endpoint.model=m", "--set", "hardware.accelerator=h100-sxm"),
            *("--set", "server_metrics.enabled=false"),
            *("--slo-ttft-ms", "500", "--slo-tpot-ms", "100", "--out", str(out), *args),
        ]
        t0 = time.monotonic()
        env = {**os.environ, "COLUMNS": "200"}
        try:
            p = subprocess.run(
                cmd, check=False, capture_output=True, text=True, timeout=timeout_s, env=env
            )
        except subprocess.TimeoutExpired:
            return None, "", time.monotonic() - t0
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


def _probe_json(out: Path) -> dict[str, Any] | None:
    f = out / "result.json"
    if not f.exists():
        return None
    probes = json.loads(f.read_text()).get("probes") or [None]
    return probes[0]


def _counts_case(mode: str, tmp: Path) -> str:
    out = tmp / mode
    rc, text, _ = _cli(mode, out, "--concurrency", "2", "--max-requests", "12")
    tb = " TRACEBACK" if "Traceback" in text else ""
    p = _probe_json(out)
    if p is None:
        return f"rc {rc}{tb}, no result.json"
    t = p.get("output_tokens_per_s")
    acc = (p.get("steps") or {}).get("acceptance_length")
    verdict = "SLO pass" if p.get("slo_passed") else "SLO fail"
    kinds = p.get("requests_failed")
    acc_s = "-" if acc is None else f"{acc:,.2f}"
    t_s = "-" if t is None else f"{t:,.0f}"
    return f"rc {rc}{tb}, T {t_s} tok/s, acceptance {acc_s}, {verdict}, {kinds} failed"


async def _stale(mode: str, n: int) -> str:
    from tokenwatt.client import StreamClient
    from tokenwatt.load.probe import run_probe
    from tokenwatt.spec import ProbeSettings, parse_spec
    from tokenwatt.spec.endpoint import Timeouts

    async with FaultServer(modes=[mode]) as srv:
        spec = parse_spec(
            {
                "name": "stale",
                "endpoint": {"url": srv.url, "model": "m", "prompt_format": "token_ids"},
                "model": {"source": "llama-3.1-8b"},
                "hardware": {"accelerator": "h100-sxm"},
                "workload": {"input_tokens": 16, "output_tokens": N_OUT, "seed": 1},
                "slo": {"ttft_ms": 500, "tpot_ms": 200},
            }
        )
        client = StreamClient(srv.url, api="completions", model="m", timeouts=Timeouts(total_s=10))
        try:
            run = await run_probe(
                spec,
                client,
                rate_rps=None,
                concurrency=1,
                seed=1,
                max_requests=n,
                settings=ProbeSettings(
                    warmup_s=0, min_duration_s=1, max_duration_s=60, early_stop=False
                ),
            )
        finally:
            await client.aclose()
    took = sum(1 for r in run.records if r.ok and r.output_tokens == LATE_TOKENS)
    refused = sum(1 for r in run.records if "stale" in (r.error_message or ""))
    return (
        f"{took} of {len(run.records)} took a late copy as their answer, {refused} refused, "
        f"{run.stray_answers} stray"
    )


async def _matrix() -> str:
    """Every mode by prompt, closed loop: records lost/doubled, classification vs EXPECTED
    (a request after a late-copy mode may be refused as stale: right, not a miss)."""
    from tokenwatt.client import StreamClient
    from tokenwatt.load.probe import run_probe
    from tokenwatt.spec import ProbeSettings, parse_spec
    from tokenwatt.spec.endpoint import Timeouts
    from tokenwatt.traffic.workload import WorkloadGenerator

    n = 3 * len(MODES)
    fast = {"connect_s": 2, "first_token_s": 0.6, "idle_s": 0.3, "total_s": 10}
    async with FaultServer(by_prompt=True) as srv:
        spec = parse_spec(
            {
                "name": "matrix",
                "endpoint": {"url": srv.url, "model": "m", "prompt_format": "token_ids",
                             "timeouts": fast},
                "model": {"source": "llama-3.1-8b"},
                "hardware": {"accelerator": "h100-sxm"},
                "workload": {"input_tokens": 16, "output_tokens": N_OUT, "seed": 1},
                "slo": {"ttft_ms": 500, "max_error_rate": 1},
            }
        )  # fmt: skip
        client = StreamClient(srv.url, api="completions", model="m", timeouts=Timeouts(**fast))
        try:
            run = await run_probe(
                spec, client, rate_rps=None, concurrency=1, max_requests=n, seed=1,
                settings=ProbeSettings(warmup_s=0, min_duration_s=0.1, min_requests=1,
                                       max_duration_s=120, drain_timeout_s=5, early_stop=False),
            )  # fmt: skip
        finally:
            await client.aclose()
    plans = iter(WorkloadGenerator(spec.workload, prompt_format=run.prompt_format, seed=1))
    modes = [MODES[int(next(plans).prompt[0]) % len(MODES)] for _ in range(n)]  # type: ignore[index]
    ids = [r.request_id for r in run.records]
    lost, doubled = len(set(range(n)) - set(ids)), len(ids) - len(set(ids))
    wrong = []
    for r in run.records:
        mode = modes[r.request_id]
        got = (r.status, r.error_kind)
        after_late = r.request_id > 0 and modes[r.request_id - 1] in LATE_MODES
        stale_ok = (
            after_late and got == ("error", "protocol") and "stale" in (r.error_message or "")
        )
        if got != EXPECTED[mode] and not stale_ok:
            wrong.append(mode)
    right = len(run.records) - len(wrong)
    return (
        f"{len(set(modes))} modes, {len(ids)} of {n} records, {lost} lost, {doubled} doubled, "
        f"{right} classified right"
        + (f" (wrong: {', '.join(sorted(set(wrong)))})" if wrong else "")
    )


def _unresponsive(tmp: Path) -> str:
    out = tmp / "unresponsive"
    rc, text, wall = _cli(
        "no_first_token", out, "--rate", "2", "--duration", "5", "--warmup", "0",
        timeout_s=UNRESPONSIVE_CAP_S,
    )  # fmt: skip
    if rc is None:
        return f"still running at the {UNRESPONSIVE_CAP_S} s cap (5 s probe)"
    named = "named unresponsive" if "endpoint unresponsive" in text else "not named"
    return f"rc {rc} after {wall:.1f} s (5 s probe), {named}"


def _stalls(tmp: Path) -> str:
    out = tmp / "stall"
    rc, text, _ = _cli(
        "stall", out, "--rate", "2", "--duration", "3", "--warmup", "0",
        "--set", "endpoint.timeouts.idle_s=2",
    )  # fmt: skip
    flat = " ".join(text.split())
    named = "named 'endpoint stalls'" if "endpoint stalls" in flat else "not named"
    advice = ", advises a lower rate" if "lower" in flat and "rate" in flat else ""
    return f"rc {rc}, {named}{advice}"


def run() -> list[tuple[str, str]]:
    """Every case, (name, outcome), in a fixed order."""
    with tempfile.TemporaryDirectory(prefix="tw-hostile-") as d, ThreadPoolExecutor(3) as pool:
        tmp = Path(d)
        slow = {"unresponsive endpoint": pool.submit(_unresponsive, tmp)}
        slow["stall after first token"] = pool.submit(_stalls, tmp)
        rows = [
            ("usage 100,000 past max", _counts_case("usage_past_max", tmp)),
            ("final usage 10^9", _counts_case("usage_huge_final", tmp)),
            ("negative usage", _counts_case("usage_negative", tmp)),
            ("text chunks, no tokens", _counts_case("text_without_tokens", tmp)),
            ("honest 2 tokens/chunk", _counts_case("usage_multi_token", tmp)),
            ("stale, unique ids", asyncio.run(_stale("late_second_response", 21))),
            ("stale, constant id", asyncio.run(_stale("late_second_constant", 21))),
            ("stale, no ids", asyncio.run(_stale("late_second_no_id", 21))),
            ("fault matrix", asyncio.run(_matrix())),
        ]
        rows += [(name, fut.result()) for name, fut in slow.items()]
    return rows


def main() -> None:
    print(f"tree: {os.environ.get('PYTHONPATH', '(installed)')}")
    rows = run()
    width = max(len(name) for name, _ in rows)
    for name, outcome in rows:
        print(f"{name:<{width}}  {outcome}")


if __name__ == "__main__":
    main()
