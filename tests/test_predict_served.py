"""Predicted TTFT, SLO boundary, goodput and $/Mtok against the target simulator's own truth.

The source is a simulated H100 (efficiency 0.55, step overhead 3 ms) measured in closed
batches (``test_predict.sim_run``); the stack calibrated on it is replayed on a B200. The
truth is the B200 simulator started with the true knobs and driven by the same Poisson
stream, read straight from its requests' token times and its steps (no code of
``predict.replay`` computes it), and its boundary found by a plain scan of rates.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from test_predict import BATCHES, EFFICIENCY, FLOOR_S, sim_run
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.slo import Limits
from tokenwatt.predict import calibrate
from tokenwatt.predict.replay import TargetNode
from tokenwatt.predict.served import ServedPrediction, predict_served
from tokenwatt.sim import SimConfig, VirtualSim

MODEL = "llama-3.1-8b"
PROMPT, OUTPUT, RATE, REQUESTS = 256, 64, 8.0, 200
LIMITS = Limits("percentile", 0.2, 0.012, None, 0.9, 0.9)  # p90 TTFT 200 ms, TPOT 12 ms
PRICE = 5.0  # per GPU-hour


def _truth(rate: float) -> dict[str, float]:
    """The true B200 simulator under the same Poisson stream (seed 0), read by hand."""
    acc = get_accelerator("b200")
    cfg = SimConfig(
        load_geometry(MODEL), acc, efficiency=EFFICIENCY, prefill_efficiency=EFFICIENCY,
        step_overhead_ms=FLOOR_S * 1e3, max_model_len=PROMPT + OUTPUT + 16,
    )  # fmt: skip
    sim = VirtualSim(cfg)
    arrivals = np.cumsum(np.random.default_rng(0).exponential(1 / rate, REQUESTS))
    reqs = [sim.submit(float(t), PROMPT, OUTPUT) for t in arrivals]
    sim.run()
    first = REQUESTS // 5
    counted = reqs[first:]
    ttft = np.array([(r.first_token_ns - r.arrival_ns) / 1e9 for r in counted])
    tpot = np.array([(r.last_token_ns - r.first_token_ns) / 1e9 / (OUTPUT - 1) for r in counted])
    k = int(np.ceil(0.9 * len(counted))) - 1  # nearest rank
    passed = np.sort(ttft)[k] <= LIMITS.ttft_s and np.sort(tpot)[k] <= LIMITS.tpot_s
    w0, w1 = arrivals[first], arrivals[-1]
    tokens = sum(1 for st in sim.token_ns.values() for t in st if w0 * 1e9 <= t < w1 * 1e9)
    good = np.mean((ttft <= LIMITS.ttft_s) & (tpot <= LIMITS.tpot_s))
    tput = tokens / (w1 - w0)
    return {"ttft": float(np.median(ttft)), "tput": tput, "goodput": tput * good, "pass": passed}


@pytest.fixture(scope="module")
def served() -> ServedPrediction | None:
    points = [sim_run(MODEL, "h100-sxm", b).point for b in BATCHES]
    cal = calibrate(points)
    source = dataclasses.replace(
        points[0], prompt_tokens=PROMPT, output_tokens=OUTPUT, rate_rps=RATE
    )
    node = TargetNode(get_accelerator("b200"))
    (pred,) = predict_served(
        cal, [source], node, load_geometry(MODEL), LIMITS, sigmas=[0.05],
        price_per_gpu_hour=PRICE, requests=REQUESTS,
    )  # fmt: skip
    return pred


def test_ttft_and_goodput_match_the_b200_truth(served: ServedPrediction | None) -> None:
    truth = _truth(RATE)
    assert served is not None
    assert served.ttft_ms.value == pytest.approx(truth["ttft"] * 1e3, rel=0.03)
    assert served.output_tokens_per_s.value == pytest.approx(truth["tput"], rel=0.03)
    assert served.goodput_tok_s.value == pytest.approx(truth["goodput"], rel=0.03)
    assert served.slo_passed == truth["pass"]
    # step-time bound figures move with the step time; goodput below the boundary is the
    # offered load's, so its interval may close on the value
    for span in (served.ttft_ms, served.boundary_rps, served.tpot_ms):
        assert span.low < span.value < span.high
    assert served.goodput_tok_s.low <= served.goodput_tok_s.value <= served.goodput_tok_s.high


def test_boundary_matches_a_scan_of_the_truth(served: ServedPrediction | None) -> None:
    assert served is not None
    b = served.boundary_rps.value
    assert b > 0
    # the truth passes just below the predicted boundary and fails just above it
    assert _truth(b * 0.97)["pass"]
    assert not _truth(b * 1.05)["pass"]


def test_usd_per_mtok_is_the_price_over_goodput(served: ServedPrediction | None) -> None:
    assert served is not None and served.usd_per_mtok is not None
    expect = PRICE / 3600 / served.goodput_tok_s.value * 1e6
    assert served.usd_per_mtok.value == pytest.approx(expect, rel=1e-9)
    # a higher goodput end is the lower cost end
    assert served.usd_per_mtok.low == pytest.approx(PRICE / 3600 / served.goodput_tok_s.high * 1e6)


@pytest.mark.slow  # three probes, four boundary searches: about half a minute
@pytest.mark.virtual
def test_probes_of_a_simulated_h100_predict_the_b200_simulator() -> None:
    """The result-folder path end to end: three Poisson probes of the simulated H100 as
    ``bench`` summarizes them (their workload read from the probes' own records), calibrated
    and replayed on a B200; against the B200 simulator started with the true knobs and
    driven by the same replay: TTFT, goodput and the boundary within 5 % (the calibration
    itself is within 2 % of the true efficiency)."""
    from tokenwatt.predict import points_from_probes
    from tokenwatt.predict.replay import ReplayLoad, boundary_rps, replay
    from virtual_figures import probe_summary
    from virtual_probe import CASES
    from virtual_probe import LIMITS as PROBE_LIMITS

    case = CASES["dense"]
    probes = [probe_summary(case, rate, 1, 30.0, 10.0) for rate in (2.0, 6.0, 10.0)]
    geom = load_geometry(case.model)
    points = points_from_probes(probes, geom, get_accelerator(case.accelerator))
    assert [(p.prompt_tokens, p.output_tokens, p.rate_rps) for p in points] == [
        (1024.0, 256.0, r) for r in (2.0, 6.0, 10.0)
    ]
    cal = calibrate(points)
    b200 = get_accelerator("b200")
    preds = predict_served(
        cal, points, TargetNode(b200), geom, PROBE_LIMITS, sigmas=[0.1] * 3, requests=REQUESTS
    )
    true_cfg = SimConfig(geom, b200, efficiency=case.efficiency, max_model_len=1024 + 256 + 16)
    load = ReplayLoad(1024, 256, 1.0, REQUESTS)
    true_boundary = boundary_rps(true_cfg, load, PROBE_LIMITS)
    for pred, rate in zip(preds, (2.0, 6.0, 10.0), strict=True):
        assert pred is not None
        truth = replay(true_cfg, load, PROBE_LIMITS, rate_rps=rate)
        assert pred.ttft_ms.value == pytest.approx(truth.ttft_s * 1e3, rel=0.05)
        assert pred.goodput_tok_s.value == pytest.approx(truth.goodput_tok_s, rel=0.05)
        assert pred.boundary_rps.value == pytest.approx(true_boundary, rel=0.05)
