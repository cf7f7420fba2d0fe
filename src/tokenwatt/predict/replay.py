"""The measured workload replayed on the calibrated simulator of the target, in virtual time.

The calibration's two constants are the simulator's own knobs: ``efficiency`` (decode and
prompt, one figure as the fit has it) and ``step_overhead_ms`` (the floor); the power law
becomes the simulator's idle and dynamic power (idle = idle share × TDP', and the dynamic
part chosen so that power per GPU = TDP' × (idle share + slope × busy share), the law's own
shape). The target's accelerator, GPUs per replica, replicas and batch cap are the
simulator's node. A fitted efficiency above 1 (fewer bytes read than W(B) + KV assumes) is
carried by scaling the target's rated figures, since the simulator's knob stops at 1.

One replay is a Poisson stream of requests of the point's mean prompt and output lengths at
its offered rate (``ReplayLoad``): TTFT, TPOT, throughput, goodput and tokens/J are read from
the simulator's token times and steps over the arrivals after a warm-up, judged against the
spec's SLO by the one SLO judge (``metrics.slo``). The SLO boundary is the highest Poisson
rate whose replay passes, found by bisection. Deterministic for a seed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.metrics.slo import Limits, RequestLatency, evaluate_slo
from tokenwatt.metrics.stats import interpolated_quantile
from tokenwatt.predict.calibrate import Calibration
from tokenwatt.predict.points import PredictError
from tokenwatt.sim import SimConfig, VirtualSim

__all__ = ["ReplayLoad", "Replayed", "TargetNode", "boundary_rps", "replay", "target_config"]

WARMUP_SHARE = 0.2  # the first arrivals fill the batch and are not counted
BOUNDARY_REL_TOL = 0.02  # bisection stops when the bracket is this narrow (relative)
MAX_BISECTIONS = 24
# a search replay lasts at least this many TTFT limits (an overload must have time to show
# as queueing), in at most MAX_SEARCH_REQUESTS requests
SEARCH_TTFT_LIMITS = 4.0
MAX_SEARCH_REQUESTS = 4000


@dataclass(frozen=True, slots=True)
class ReplayLoad:
    """The measured workload of one point: mean lengths and the offered Poisson rate."""

    prompt_tokens: int
    output_tokens: int
    rate_rps: float
    requests: int = 400


@dataclass(frozen=True, slots=True)
class TargetNode:
    """The simulated target: accelerator, GPUs per replica, replicas, batch cap."""

    accelerator: Accelerator
    gpus_per_replica: int = 1
    replicas: int = 1
    max_batch: int | None = None


@dataclass(frozen=True, slots=True)
class Replayed:
    """What one replay measured, as a client and a power meter would."""

    ttft_s: float  # median over the counted requests
    ttft_p99_s: float
    tpot_s: float  # token-weighted mean inter-token time
    output_tokens_per_s: float
    goodput_tok_s: float
    slo_passed: bool
    tokens_per_joule: float | None
    power_w_per_gpu: float | None


def target_config(
    cal: Calibration, node: TargetNode, geometry: ModelGeometry, *, scale: float = 1.0,
    seed: int = 0, max_model_len: int = 32768,
) -> SimConfig:  # fmt: skip
    """The simulator of ``node`` with the calibrated stack; ``scale`` multiplies every step
    time (floor × scale, efficiency ÷ scale): the interval's ends are replays at its bounds."""
    eff = cal.efficiency / scale
    acc = node.accelerator
    if eff > 1.0:
        acc = dataclasses.replace(
            acc,
            bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s * eff,
            bf16_dense_flops=None if acc.bf16_dense_flops is None else acc.bf16_dense_flops * eff,
            fp8_dense_flops=None if acc.fp8_dense_flops is None else acc.fp8_dense_flops * eff,
        )
        eff = 1.0
    knobs: dict[str, Any] = {
        "efficiency": eff,
        "prefill_efficiency": eff,
        "step_overhead_ms": cal.floor_s * scale * 1e3,
        "max_model_len": max_model_len,
        "seed": seed,
    }
    if node.max_batch is not None:
        knobs["max_num_seqs"] = node.max_batch
    tdp = node.accelerator.tdp_w
    if cal.power is not None and tdp:
        idle = max(0.0, cal.power.idle_share) * tdp
        knobs["idle_w"] = idle
        knobs["tdp_w"] = max(idle + max(0.0, cal.power.slope) * tdp / eff, idle + 1e-6)
    return SimConfig(
        geometry, acc, gpus_per_replica=node.gpus_per_replica, replicas=node.replicas, **knobs
    )


def _submit(sim: VirtualSim, load: ReplayLoad, rate_rps: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, load.requests))
    for t in arrivals:
        sim.submit(float(t), load.prompt_tokens, load.output_tokens)
    return [float(t) for t in arrivals]


def _energy_j(sim: VirtualSim, cfg: SimConfig, w0_ns: int, w1_ns: int) -> float:
    """Step energy of the steps starting in the window plus idle power over the idle rest."""
    steps = [s for s in sim.steps if w0_ns <= s.t_start_ns < w1_ns]
    busy_s = sum(s.duration_s for s in steps)
    idle_s = max(0.0, cfg.replicas * (w1_ns - w0_ns) / 1e9 - busy_s)
    idle_w = cfg.derive().idle_w * cfg.gpus_per_replica
    return sum(s.energy_j for s in steps) + idle_s * idle_w


def _quantile(values: list[float], q: float) -> float:
    """The interpolated quantile every view uses (``metrics.stats``); NaN for no values."""
    found = interpolated_quantile(values, q)
    return math.nan if found is None else found


def replay(
    cfg: SimConfig, load: ReplayLoad, limits: Limits, *, rate_rps: float | None = None,
    seed: int = 0,
) -> Replayed:  # fmt: skip
    """One Poisson replay of ``load`` (at ``rate_rps`` if given) on ``cfg``, judged."""
    rate = load.rate_rps if rate_rps is None else rate_rps
    if not (rate > 0 and math.isfinite(rate)):
        raise PredictError(f"replay rate {rate} req/s: give a positive rate")
    sim = VirtualSim(cfg)
    arrivals = _submit(sim, load, rate, seed)
    sim.run()
    first = int(len(arrivals) * WARMUP_SHARE)
    w0_ns, w1_ns = round(arrivals[first] * 1e9), round(arrivals[-1] * 1e9)
    window_s = (w1_ns - w0_ns) / 1e9
    counted = [sim.requests[rid] for rid in sorted(sim.requests)][first:]
    lat, gaps_s, gap_n = [], 0.0, 0
    for req in counted:
        n = req.generated
        ttft = (req.first_token_ns - req.arrival_ns) / 1e9
        tpot = (req.last_token_ns - req.first_token_ns) / 1e9 / (n - 1) if n > 1 else None
        if n > 1:
            gaps_s += (req.last_token_ns - req.first_token_ns) / 1e9
            gap_n += n - 1
        lat.append(RequestLatency(True, req.arrival_ns / 1e9, ttft, tpot, None))
    verdict = evaluate_slo(limits, lat)
    tokens = sum(1 for st in sim.token_ns.values() for t in st if w0_ns <= t < w1_ns)
    tput = tokens / window_s
    good = sum(r.generated for r, x in zip(counted, lat, strict=True) if x.meets(limits))
    good_share = good / max(1, sum(r.generated for r in counted))
    tpj = power = None
    if cfg.derive().tdp_w is not None:
        energy = _energy_j(sim, cfg, w0_ns, w1_ns)
        if energy > 0:
            tpj = tokens / energy
            power = energy / window_s / (cfg.replicas * cfg.gpus_per_replica)
    ttfts = [x.ttft_s for x in lat if x.ttft_s is not None]
    return Replayed(
        ttft_s=_quantile(ttfts, 0.5),
        ttft_p99_s=_quantile(ttfts, 0.99),
        tpot_s=gaps_s / gap_n if gap_n else math.nan,
        output_tokens_per_s=tput,
        goodput_tok_s=tput * good_share,
        slo_passed=verdict.passed,
        tokens_per_joule=tpj,
        power_w_per_gpu=power,
    )


def _passes(cfg: SimConfig, load: ReplayLoad, limits: Limits, rate: float, seed: int) -> bool:
    """One search replay, long enough for an overload to show (see SEARCH_TTFT_LIMITS)."""
    span_s = SEARCH_TTFT_LIMITS * (limits.ttft_s or limits.e2e_s or 1.0)
    n = min(MAX_SEARCH_REQUESTS, max(load.requests, math.ceil(rate * span_s)))
    longer = dataclasses.replace(load, requests=n)
    return replay(cfg, longer, limits, rate_rps=rate, seed=seed).slo_passed


def boundary_rps(cfg: SimConfig, load: ReplayLoad, limits: Limits, *, seed: int = 0) -> float:
    """The highest Poisson rate whose replay passes the SLO (bisection, same seed at every
    rate); 0 when even the lowest tried rate fails. A rate whose replay would need more than
    MAX_SEARCH_REQUESTS requests ends the search at the last rate that passed (a lower bound)."""
    probe = replay(cfg, load, limits, rate_rps=0.01, seed=seed)
    if not probe.slo_passed:
        return 0.0
    one_request_s = max(1e-6, probe.ttft_s + probe.tpot_s * max(0, load.output_tokens - 1))
    span_s = SEARCH_TTFT_LIMITS * (limits.ttft_s or limits.e2e_s or 1.0)
    lo, hi = 0.01, 2.0 / one_request_s
    while _passes(cfg, load, limits, hi, seed):
        lo, hi = hi, hi * 2.0
        if hi * span_s > MAX_SEARCH_REQUESTS:
            return lo
    for _ in range(MAX_BISECTIONS):
        if hi - lo <= BOUNDARY_REL_TOL * lo:
            break
        mid = math.sqrt(lo * hi)
        if _passes(cfg, load, limits, mid, seed):
            lo = mid
        else:
            hi = mid
    return lo
