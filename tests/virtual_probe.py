"""A probe in virtual time: Poisson arrivals into ``VirtualSim``, judged as ``bench`` judges.

No wall clock and no HTTP: the simulator's engines step as fast as the CPU allows, so a search
of many probes, or hundreds of seeded probes for coverage, runs in seconds. The probe follows
the real one's rules in miniature: a warm-up of 1.5 request lifetimes, a window of arrivals
that closes at the sequential decision (``metrics.sequential``) or at the cap, a failure
decided on the requests finished by then, a pass judged over every request sent in the window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.search import ProbeOutcome
from tokenwatt.metrics.boundary import Evidence
from tokenwatt.metrics.sequential import Sprt, decide_probe, miss_counts
from tokenwatt.metrics.slo import Limits, RequestLatency, violation_budget
from tokenwatt.sim import SimConfig, VirtualSim

LIMITS = Limits("percentile", 0.5, 0.05, None, 0.99, 0.9)  # p99 TTFT 500 ms, TPOT 50 ms


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    accelerator: str
    prompt_tokens: int
    output_tokens: int
    prefill_cost: bool = True
    efficiency: float = 0.5


CASES = {
    "dense": Case("dense", "llama-3.1-8b", "h100-sxm", 1024, 256),
    "moe": Case("moe", "qwen3-30b-a3b", "h100-sxm", 512, 128),
    "prefill": Case("prefill", "llama-3.1-8b", "h100-sxm", 2048, 32),
}


def sim_config(case: Case, seed: int) -> SimConfig:
    geom = load_geometry(case.model)
    return SimConfig(
        geometry=geom,
        accelerator=get_accelerator(case.accelerator),
        prefill_cost=case.prefill_cost,
        efficiency=case.efficiency,
        max_model_len=8192,
        seed=seed,
    )


@dataclass(frozen=True)
class VirtualRun:
    """One virtual probe: per-request latencies of the counted window, and its rates."""

    lats: list[RequestLatency]  # counted requests, in send order
    done_s: list[float]  # when each counted request finished
    sent_s: list[float]
    window_s: tuple[float, float]


def run_window(
    case: Case, rate: float, seed: int, *, window_requests: int, warmup_s: float
) -> VirtualRun:
    """Poisson arrivals at ``rate`` for warm-up + ``window_requests``, plus load through the
    drain (as the real probe keeps it), run to completion in virtual time."""
    rng = np.random.default_rng(seed)
    sim = VirtualSim(sim_config(case, seed))
    n_warm = math.ceil(warmup_s * rate)
    total = n_warm + window_requests
    gaps = rng.exponential(1.0 / rate, size=total + window_requests // 4)
    times = np.cumsum(gaps)
    reqs = [sim.submit(float(t), case.prompt_tokens, case.output_tokens) for t in times]
    sim.run()
    counted = reqs[n_warm:total]
    lats, done = [], []
    for r in counted:
        tok = sim.token_ns[r.rid]
        ttft = tok[0] / 1e9 - r.arrival_ns / 1e9
        tpot = (tok[-1] - tok[0]) / 1e9 / (len(tok) - 1) if len(tok) > 1 else None
        lats.append(RequestLatency(True, r.arrival_ns / 1e9, ttft, tpot, None))
        done.append(tok[-1] / 1e9)
    sent = [r.arrival_ns / 1e9 for r in counted]
    return VirtualRun(lats, done, sent, (sent[0], float(times[total])))


def sequential_outcome(
    run: VirtualRun, test: Sprt, limits: Limits = LIMITS
) -> ProbeOutcome[VirtualRun]:
    """The probe's verdict as the sequential test would have reached it, in virtual time."""
    order = sorted(range(len(run.lats)), key=lambda i: run.done_s[i])
    finished: list[RequestLatency] = []
    decision, cut = None, len(run.lats)
    for i in order:
        finished.append(run.lats[i])
        decision = decide_probe(test, miss_counts(limits, finished), len(finished))
        if decision is not None:
            t = run.done_s[i]
            cut = sum(1 for s in run.sent_s if s < t)
            break
    if decision == "fail":
        judged = finished
        w1 = run.done_s[order[len(finished) - 1]]
    else:
        judged = run.lats[:cut]
        w1 = run.sent_s[cut] if cut < len(run.sent_s) else run.window_s[1]
    misses = miss_counts(limits, judged)
    span = max(1e-9, w1 - run.window_s[0])
    achieved = min(cut, len(run.sent_s)) / span
    budget = violation_budget(len(judged), limits.percentile)
    passed = decision == "pass" or (decision is None and all(v <= budget for v in misses.values()))
    ev = Evidence(achieved, len(judged), misses)
    return ProbeOutcome(passed, payload=run, achieved_rps=achieved, requests=cut, evidence=ev)


def reference_boundary(
    case: Case, lo: float, hi: float, *, requests: int = 3000, steps: int = 7, seed: int = 99
) -> float:
    """The long-window boundary: bisection on the rate at which the p99 of TTFT and TPOT over
    ``requests`` requests (after a 30 s warm-up) meets both limits."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        run = run_window(case, mid, seed, window_requests=requests, warmup_s=30)
        ttft = np.percentile([r.ttft_s or 0.0 for r in run.lats], 99)
        tpot = np.percentile([r.tpot_s or 0.0 for r in run.lats], 99)
        ok = ttft <= (LIMITS.ttft_s or 0) and tpot <= (LIMITS.tpot_s or 0)
        lo, hi = (mid, hi) if ok else (lo, mid)
    return (lo + hi) / 2
