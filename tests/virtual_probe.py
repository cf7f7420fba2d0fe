"""A probe in virtual time: Poisson arrivals into ``VirtualSim``, judged as ``bench`` judges.

No wall clock and no HTTP: the simulator's engines step as fast as the CPU allows, so a search
of many probes, or hundreds of seeded probes for coverage, runs in seconds. The probe follows
the real one's rules in miniature: a warm-up of 1.5 request lifetimes, a window of arrivals
that closes at the sequential decision (``metrics.sequential``) or at the cap, a failure
decided on the requests finished by then, a pass judged over every request sent in the window.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.search import (
    BoundarySearch,
    ProbeOutcome,
    SearchOutcome,
    drift_check_plan,
    probe_seed,
)
from tokenwatt.metrics.boundary import Evidence
from tokenwatt.metrics.drift import Level, level_rate, slower_than_search
from tokenwatt.metrics.sequential import Sprt, decide_probe, miss_counts
from tokenwatt.metrics.slo import Limits, RequestLatency, judged_medians, violation_budget
from tokenwatt.sim import SimConfig, VirtualSim

LIMITS = Limits("percentile", 0.5, 0.05, None, 0.99, 0.9)  # p99 TTFT 500 ms, TPOT 50 ms
DRAIN_CHUNK_S = 5.0  # the drain's arrivals are drawn this many seconds at a time


_CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    accelerator: str
    prompt_tokens: int
    output_tokens: int
    prefill_cost: bool = True
    efficiency: float = 0.5
    gpus: int = 1  # per replica (tensor parallel): the node's bandwidth is gpus × the part's


CASES = {
    "dense": Case("dense", "llama-3.1-8b", "h100-sxm", 1024, 256),
    "moe": Case("moe", "qwen3-30b-a3b", "h100-sxm", 512, 128),
    "prefill": Case("prefill", "llama-3.1-8b", "h100-sxm", 2048, 32),
}
# Cases no setting was tuned on: where a threshold measured on CASES is validated.
HOLDOUT_CASES = {
    "gpt-oss": Case("gpt-oss", "gpt-oss-20b", "h200", 1024, 128),
    "qwen3-8b-prefill": Case("qwen3-8b-prefill", "qwen3-8b", "h100-sxm", 3072, 64),
    # the intervals' coverage is held to these (never used to choose a setting)
    "qwen3-32b-prefill": Case(
        "qwen3-32b-prefill", str(_CONFIGS / "qwen3-32b.json"), "h100-sxm", 2048, 32
    ),
    "llama-70b-tp4": Case("llama-70b-tp4", "llama-3.1-70b", "h100-sxm", 1024, 256, gpus=4),
}
# Short outputs as README's first look (1024 → 32) and the demo's node (512 → 32) run them:
# where the boundary interval's coverage is measured for the workloads users start with.
SHORT_OUTPUT_CASES = {
    "dense-short": Case("dense-short", "llama-3.1-8b", "h100-sxm", 1024, 32),
    "demo-node": Case("demo-node", "qwen3-30b-a3b", "h100-sxm", 512, 32),
}


def sim_config(case: Case, seed: int) -> SimConfig:
    geom = load_geometry(case.model)
    return SimConfig(
        geometry=geom,
        accelerator=get_accelerator(case.accelerator),
        prefill_cost=case.prefill_cost,
        efficiency=case.efficiency,
        gpus_per_replica=case.gpus,
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
    """Poisson arrivals at ``rate`` for warm-up + ``window_requests``, then load through the
    drain until every counted request has ended (as the real probe keeps it: stopping the
    arrivals at the window's end let its last requests finish on an emptying server, which
    made short windows read low near saturation), in virtual time."""
    rng = np.random.default_rng(seed)
    sim = VirtualSim(sim_config(case, seed))
    n_warm = math.ceil(warmup_s * rate)
    total = n_warm + window_requests
    times = np.cumsum(rng.exponential(1.0 / rate, size=total + 1))  # + the drain's first
    reqs = [sim.submit(float(t), case.prompt_tokens, case.output_tokens) for t in times]
    counted = reqs[n_warm:total]
    last = float(times[-1])
    chunk = max(16, math.ceil(rate * DRAIN_CHUNK_S))
    while True:  # the drain: more arrivals, a chunk at a time, until the counted have ended
        sim.run(until_s=last)
        if all(r.finished for r in counted):
            break
        for t in last + np.cumsum(rng.exponential(1.0 / rate, size=chunk)):
            sim.submit(float(t), case.prompt_tokens, case.output_tokens)
            last = float(t)
    lats, done = [], []
    for r in counted:
        tok = sim.token_ns[r.rid]
        ttft = tok[0] / 1e9 - r.arrival_ns / 1e9
        tpot = (tok[-1] - tok[0]) / 1e9 / (len(tok) - 1) if len(tok) > 1 else None
        lats.append(RequestLatency(True, r.arrival_ns / 1e9, ttft, tpot, None))
        done.append(tok[-1] / 1e9)
    sent = [r.arrival_ns / 1e9 for r in counted]
    return VirtualRun(lats, done, sent, (sent[0], float(times[total])))


def _decision_point(
    run: VirtualRun, test: Sprt, limits: Limits, min_fail: int = 0, min_pass: int = 0
) -> tuple[str | None, int, int]:
    """(decision, requests finished, send-order prefix) at the first decided moment, as the
    real probe polls it: a failure from every finished request, a pass from the requests
    sent before the oldest one still running (``load.probe``'s send-order prefix), once that
    prefix decides it; a failure once ``min_fail``
    have finished (``min_fail_judged``: the drift checks); a pass once the prefix holds at
    least ``min_pass`` (the two-sided low end's long window, ``BoundarySearch.want_judged``)."""
    order = sorted(range(len(run.lats)), key=lambda i: run.done_s[i])
    flags = [miss_counts(limits, [r]) for r in run.lats]
    names = list(flags[0]) if flags else []
    done = [False] * len(run.lats)
    seen = {k: 0 for k in names}
    pre = {k: 0 for k in names}
    prefix = 0
    for n, i in enumerate(order, start=1):
        done[i] = True
        for k in names:
            seen[k] += flags[i][k]
        while prefix < len(done) and done[prefix]:
            for k in names:
                pre[k] += flags[prefix][k]
            prefix += 1
        if n >= min_fail and decide_probe(test, seen, n) == "fail":
            return "fail", n, prefix
        if prefix >= min_pass and decide_probe(test, pre, prefix) == "pass":
            return "pass", n, prefix
    return None, len(order), prefix


def sequential_outcome(
    run: VirtualRun, test: Sprt, limits: Limits = LIMITS, min_fail: int = 0, min_pass: int = 0
) -> ProbeOutcome[VirtualRun]:
    """The probe's verdict as the sequential test would have reached it, in virtual time: a
    decided failure stops at once (judged: the finished requests); a decided pass closes the
    window and every counted request sent before then drains and is judged (nearest rank)."""
    order = sorted(range(len(run.lats)), key=lambda i: run.done_s[i])
    decision, n_done, _ = _decision_point(run, test, limits, min_fail, min_pass)
    cut = len(run.lats)
    if decision is not None:
        t = run.done_s[order[n_done - 1]]
        cut = sum(1 for s in run.sent_s if s < t)
    if decision == "fail":
        judged = [run.lats[i] for i in order[:n_done]]
        w1 = run.done_s[order[n_done - 1]]
    else:
        judged = run.lats[:cut]
        w1 = run.sent_s[cut] if cut < len(run.sent_s) else run.window_s[1]
    misses = miss_counts(limits, judged)
    span = max(1e-9, w1 - run.window_s[0])
    achieved = min(cut, len(run.sent_s)) / span
    budget = violation_budget(len(judged), limits.percentile)
    passed = decision != "fail" and all(v <= budget for v in misses.values())
    ev = Evidence(achieved, len(judged), misses)
    return ProbeOutcome(passed, payload=run, counted_rps=achieved, requests=cut, evidence=ev)


def reference_boundary(
    case: Case,
    lo: float,
    hi: float,
    *,
    requests: int = 3000,
    steps: int = 8,
    seeds: int = 6,
    warmup_s: float = 60.0,
) -> float:
    """The long-run boundary: bisection on the rate at which each limit's miss fraction,
    pooled over ``seeds`` windows of ``requests`` requests after ``warmup_s`` (the same seeds
    at every rate), reaches α = 1 %: the rate where p(r) crosses α, which is what the search's
    interval estimates. One window is not enough: misses come in bursts lasting many request
    lifetimes, and single 3000-request windows at one rate read 4 % to 22 % misses."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        runs = [
            run_window(case, mid, 9000 + k, window_requests=requests, warmup_s=warmup_s)
            for k in range(seeds)
        ]
        lats = [r for run in runs for r in run.lats]
        ok = all(v <= LIMITS.allowed_violation_fraction * len(lats) for v in
                 miss_counts(LIMITS, lats).values())  # fmt: skip
        lo, hi = (mid, hi) if ok else (lo, mid)
    return (lo + hi) / 2


@dataclass
class VirtualProbe:
    """The search's probe callable in virtual time, with the bench's warm-up rule: at least
    ``warmup_s`` and ``lifetimes`` request lifetimes (median E2E at the nearest lower rate
    measured so far, as ``load.bench`` stretches it). With ``search`` set, the judged
    requests the search wants of the probe in flight (``BoundarySearch.want_judged``) hold its
    pass and lengthen its window, as ``load.bench`` does."""

    case: Case
    lifetimes: float
    warmup_s: float = 10.0
    test: Sprt = field(default_factory=lambda: Sprt(0.01))
    e2e_s: dict[float, float] | None = None
    min_fail_judged: int = 0  # the drift checks: a failure only on as many as a pass needs
    search: BoundarySearch[VirtualRun] | None = None

    async def __call__(self, rate: float, seed: int) -> ProbeOutcome[VirtualRun]:
        known = self.e2e_s if self.e2e_s is not None else {}
        lower = [r for r in known if r <= rate]
        life = known[max(lower)] if lower else 0.0
        warm = max(self.warmup_s, self.lifetimes * life)
        want = (self.search.want_judged if self.search is not None else None) or 0
        run = run_window(self.case, rate, seed, window_requests=max(200, int(rate * 60), want),
                         warmup_s=warm)  # fmt: skip
        out = sequential_outcome(run, self.test, min_fail=self.min_fail_judged, min_pass=want)
        known[rate] = float(np.median(np.subtract(run.done_s, run.sent_s)))
        self.e2e_s = known
        return out


def lifetime_at(case: Case, rate: float) -> float:
    """The median E2E (s) of a virtual window at ``rate`` after 60 s: what the bench's
    staircase (``load.capacity.lifetime_at``) gives a search started near the boundary to
    warm its first probes up for."""
    run = run_window(case, rate, 1, window_requests=max(300, int(rate * 30)), warmup_s=60.0)
    return float(np.median(np.subtract(run.done_s, run.sent_s)))


def virtual_level(o: ProbeOutcome[VirtualRun], rate: float) -> Level:
    """A virtual probe's latency level as ``load.bench.level_of`` reads a probe: the load its
    window held (``metrics.drift.level_rate``), and the judged requests' median TPOT
    (``metrics.slo.judged_medians``)."""
    assert o.payload is not None and o.evidence is not None
    lats = o.payload.lats[: o.evidence.judged]
    return Level.of(level_rate(rate, o.counted_rps), judged_medians(lats))


@dataclass(frozen=True)
class VirtualCheck:
    """One drift check replayed in virtual time: its kind, level, verdict, and the line
    ``metrics.drift.slower_than_search`` gave (None: latency as searched)."""

    kind: str
    level: Level
    passed: bool
    changed: str | None


def drift_checks(
    probe: VirtualProbe,
    out: SearchOutcome[VirtualRun],
    seed: int,
    case: Case | None = None,
    precision: float | None = None,
) -> list[VirtualCheck]:
    """``load.bench._drift_checks`` after a converged search, in virtual time: a re-test at
    the boundary probe's rate, a confirmation at the fitted point (each failing only on as many
    judged requests as a pass needs), each judged against its neighbours on the search's curve.
    ``case``: the server the checks meet (a slowed one, to measure what the checks catch).
    ``precision``: the bench's plan (``load.search.drift_check_plan``: the confirmation left
    out when the re-test lies within it of the fitted point); None: both checks run, so a
    caller can count either or apply a plan itself (each check's seed is the one the bench
    would give it). Empty when the search did not converge."""
    fit, b = out.fit, out.boundary
    if out.stop_reason != "converged" or fit is None or fit.rate_rps is None or b is None:
        return []
    levels = [
        virtual_level(st.outcome, st.rate_rps)
        for st in out.steps
        if st.outcome.payload is not None and st.outcome.evidence is not None
    ]
    probe.min_fail_judged = Sprt(0.01).clean_pass_n
    healthy = probe.case
    probe.case = case if case is not None else healthy
    plan = (
        drift_check_plan(b.rate_rps, fit.rate_rps, precision)
        if precision is not None
        else [(b.rate_rps, "re-test"), (fit.rate_rps, "confirmation")]
    )
    found = []
    for i, (rate, kind) in enumerate(plan):
        o = asyncio.run(probe(rate, probe_seed(seed, len(out.steps) + 1 + i)))
        assert o.payload is not None and o.evidence is not None
        level = virtual_level(o, rate)
        found.append(VirtualCheck(kind, level, o.passed, slower_than_search(level, levels, kind)))
    probe.case = healthy
    return found
