"""What a buyer asks of a prediction: TTFT, the SLO boundary, goodput and $/Mtok on the target.

Each point's measured workload is replayed on the calibrated simulator of the target
(``predict.replay``) three times: with the calibrated stack, and with every step time scaled
to the ends of the TPOT interval, k = exp(∓1.96 σ) (σ of ``predict.transfer``; the low end
held at ``MIN_SCALE``). Each figure's 95 % interval spans what those three replays give: the
figures are monotone in the step time, so the ends of the step-time interval carry to them
through the simulator's queueing rather than through a linear rule. tokens/J adds the power
law's residual RMS and the power transfer errors in quadrature. The boundary belongs to the
workload, not to a point: one search per pair of mean lengths, its interval at the widest σ
of the points sharing them.
$/Mtok is ``metrics.cost`` at the predicted goodput (the GPU price only; a kWh price is the
buyer's own bill).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.cost import cost_figures
from tokenwatt.metrics.slo import Limits
from tokenwatt.predict.calibrate import Calibration
from tokenwatt.predict.points import StepPoint
from tokenwatt.predict.replay import Replayed, ReplayLoad, TargetNode, boundary_rps, replay
from tokenwatt.predict.replay import target_config as _config
from tokenwatt.predict.transfer import interval_factors
from tokenwatt.sim import SimConfig

__all__ = ["MIN_SCALE", "ServedPrediction", "Span", "predict_served", "replay_load"]

MIN_SCALE = 0.2  # the fastest step-time scale replayed for an interval's end


@dataclass(frozen=True, slots=True)
class Span:
    """A predicted figure and its 95 % interval."""

    value: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class ServedPrediction:
    """One point's workload on the target: PREDICTED serving figures with intervals."""

    label: str
    rate_rps: float
    ttft_ms: Span  # median
    ttft_p99_ms: Span
    tpot_ms: Span  # the replay's token-weighted inter-token time
    output_tokens_per_s: Span
    goodput_tok_s: Span
    slo_passed: bool
    boundary_rps: Span
    tokens_per_joule: Span | None
    usd_per_mtok: Span | None


def _span(values: Sequence[float]) -> Span:
    return Span(values[0], min(values), max(values))


def replay_load(point: StepPoint, requests: int) -> ReplayLoad | None:
    """The point's workload, or None when the source did not record its lengths or rate."""
    if point.prompt_tokens is None or point.output_tokens is None or not point.rate_rps:
        return None
    return ReplayLoad(
        max(1, round(point.prompt_tokens)), max(1, round(point.output_tokens)), point.rate_rps,
        requests,
    )  # fmt: skip


def _usd(price: float | None, gpus: int, goodput: Span) -> Span | None:
    """$/Mtok at the goodput and its interval's ends; None without a price or at zero
    goodput (no token is good: no finite cost); an interval end at zero goodput is +inf."""

    def one(g: float) -> float:
        fig = cost_figures(price_per_gpu_hour=price, gpus=gpus, goodput_output_tokens_per_s=g)
        return math.inf if fig is None or fig.usd_per_mtok is None else fig.usd_per_mtok

    if price is None or goodput.value <= 0:
        return None
    return Span(one(goodput.value), one(goodput.high), one(goodput.low))


def _tpj(runs: Sequence[Replayed], power_sigma: float) -> Span | None:
    vals = [r.tokens_per_joule for r in runs]
    if any(v is None for v in vals):
        return None
    span = _span([v for v in vals if v is not None])
    low, high = interval_factors(power_sigma)
    return Span(span.value, span.low * low, span.high * high)


def predict_served(
    cal: Calibration, points: Sequence[StepPoint], node: TargetNode, geometry: ModelGeometry,
    limits: Limits, *, sigmas: Sequence[float], price_per_gpu_hour: float | None = None,
    requests: int = 400, seed: int = 0, power_sigmas: Sequence[float] | None = None,
) -> list[ServedPrediction | None]:  # fmt: skip
    """One prediction per point, ``sigmas`` its step time's relative σ, ``power_sigmas`` the
    power transfer errors its tokens/J adds (None: none), None where the point has no workload
    to replay."""
    longest = max(round((p.prompt_tokens or 0) + (p.output_tokens or 0)) for p in points)
    model_len = max(2, longest + 16)
    loads = [replay_load(p, requests) for p in points]

    def configs(sigma: float) -> list[SimConfig]:
        fast, slow = interval_factors(sigma)
        scales = (1.0, max(MIN_SCALE, fast), slow)
        return [
            _config(cal, node, geometry, scale=k, seed=seed, max_model_len=model_len)
            for k in scales
        ]

    # the boundary belongs to the workload, not to a point: one search per pair of lengths,
    # its interval at the widest σ of the points that share them
    widest: dict[tuple[int, int], float] = {}
    for load, sigma in zip(loads, sigmas, strict=True):
        if load is not None:
            key = (load.prompt_tokens, load.output_tokens)
            widest[key] = max(sigma, widest.get(key, 0.0))
    boundaries = {
        key: _span(
            [
                boundary_rps(c, ReplayLoad(*key, 1.0, requests), limits, seed=seed)
                for c in configs(sigma)
            ]
        )
        for key, sigma in widest.items()
    }
    gpus = node.gpus_per_replica * node.replicas
    power_rms = 0.0 if cal.power is None else cal.power.rms_residual
    moved = [0.0] * len(points) if power_sigmas is None else list(power_sigmas)
    out: list[ServedPrediction | None] = []
    for point, load, sigma, power_moved in zip(points, loads, sigmas, moved, strict=True):
        if load is None:
            out.append(None)
            continue
        key = (load.prompt_tokens, load.output_tokens)
        runs = [replay(c, load, limits, seed=seed) for c in configs(sigma)]
        goodput = _span([r.goodput_tok_s for r in runs])
        out.append(
            ServedPrediction(
                label=point.label,
                rate_rps=load.rate_rps,
                ttft_ms=_span([r.ttft_s * 1e3 for r in runs]),
                ttft_p99_ms=_span([r.ttft_p99_s * 1e3 for r in runs]),
                tpot_ms=_span([r.tpot_s * 1e3 for r in runs]),
                output_tokens_per_s=_span([r.output_tokens_per_s for r in runs]),
                goodput_tok_s=goodput,
                slo_passed=runs[0].slo_passed,
                boundary_rps=boundaries[key],
                tokens_per_joule=_tpj(runs, math.hypot(power_rms, power_moved)),
                usd_per_mtok=_usd(price_per_gpu_hour, gpus, goodput),
            )
        )
    return out
