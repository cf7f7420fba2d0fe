"""Per-expert load from an engine, parsed from real exposition text into ``ExpertLoad``.

The simulator's ``/metrics`` over HTTP (two scrapes around a load, Zipf 1.2 routing): the
window's counts give back the routing law the simulator was configured with, and its
``tokenwatt_sim_expert_tokens_total`` sum equals the tokens it routed (its own
iteration-token counter). SGLang's recorder CSV in the format its dump writes (header and rows
as in its test suite and its users' reports), summed over ranks. Bad text: one-line errors.
"""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest

from test_sim_metrics import drive, wait_idle
from test_sim_support import config, geometry
from tokenwatt.engine.expert_load import (
    ExpertLoadError,
    expert_load_from_exposition,
    expert_load_from_sglang_csv,
)
from tokenwatt.engine.parse import parse_samples
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.sim import start_sim_thread

E, K = 16, 2


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as resp:
        return str(resp.read().decode())


@pytest.mark.timeout(120)
def test_simulator_expert_counters_over_http_give_back_its_routing() -> None:
    g = geometry(moe_layers=4, experts=E, experts_per_token=K, expert_bytes=10_000_000)
    with start_sim_thread(config(g, routing="zipf:1.2", served_model_name="toy")) as sim:
        drive(sim, [(64, 8)] * 3)  # before the window: counters already non-zero
        wait_idle(sim)
        before = _text(sim.metrics_url)
        requests = [(200, 40), (300, 20), (120, 60), (90, 30)]
        drive(sim, requests)
        wait_idle(sim)
        after = _text(sim.metrics_url)
    load = expert_load_from_exposition(before, after, experts=E, k=K, source="sim /metrics")
    want = ExpertLoad.zipf(E, K, 1.2).inclusion[0]
    assert load.inclusion.shape == (1, E)
    assert load.inclusion[0] == pytest.approx(want, rel=1e-9)
    assert load.source == "sim /metrics"
    # the counters split exactly the tokens the engine routed: its iteration-token counter
    s_before, s_after = parse_samples(before), parse_samples(after)

    def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
        return sum(v for _, v in samples.get(name, []))

    routed = total(s_after, "vllm:iteration_tokens_total_sum") - total(
        s_before, "vllm:iteration_tokens_total_sum"
    )
    counted = total(s_after, "tokenwatt_sim_expert_tokens_total") - total(
        s_before, "tokenwatt_sim_expert_tokens_total"
    )
    assert routed == sum(a + b for a, b in requests) - len(requests)  # first token: prefill
    assert counted == pytest.approx(K * routed, rel=1e-9)  # each token picks k experts


SGLANG_RANK0 = """layer_id,expert_id,count
3,0,24990
3,1,39249
3,2,13378
3,3,13874
4,0,100
4,3,300
"""
SGLANG_RANK1 = """layer_id,expert_id,count
3,1,33056
3,2,14053
3,3,14732
4,1,100
"""


def test_sglang_csv_summed_over_ranks() -> None:
    load = expert_load_from_sglang_csv([SGLANG_RANK0, SGLANG_RANK1], experts=4, k=1)
    # layer 3: 24990, 72305, 27431, 28606 of 153332; layer 4: 100, 100, 0, 300 of 500
    assert load.inclusion.shape == (2, 4)
    assert load.inclusion[0] == pytest.approx(
        np.array([24990, 72305, 27431, 28606]) / 153332, rel=1e-12
    )
    assert load.inclusion[1].tolist() == pytest.approx([0.2, 0.2, 0.0, 0.6])


def test_bad_engine_text_is_one_line() -> None:
    with pytest.raises(ExpertLoadError, match="header layer_id,expert_id,count"):
        expert_load_from_sglang_csv(["a,b\n1,2\n"], experts=4, k=1)
    with pytest.raises(ExpertLoadError, match="expert id 9 in layer 3, the model has 4"):
        expert_load_from_sglang_csv(["layer_id,expert_id,count\n3,9,1\n"], experts=4, k=1)
    with pytest.raises(ExpertLoadError, match="no per-expert counts"):
        expert_load_from_exposition("", "# nothing\n", experts=4, k=1)
