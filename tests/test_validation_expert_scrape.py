"""A live scrape of per-expert counters collapses the routing band onto the truth.

Over HTTP: the simulator in its own process routing by Zipf s (1.2, then 2.0: strong skew),
the real client and probe, and the engine witness scraping ``/metrics`` at the probe's start,
during it and at its end, as ``tokenwatt probe`` and ``bench`` do. Without the scrape the
client gets uniform routing's MBU with a band down to the fewest experts; with it, the
witness's first and last scrape give the expert load (``tokenwatt_sim_expert_tokens_total``'s
increase), the band goes and the figure must lie within 1 pt of the simulator's truth: every
byte its steps read over the same window (its truth log), elapsed-time denominator.

The exposition of vLLM-Ascend's EPLB statistics (``vllm:phy_expert_heat`` per physical
expert, ``vllm:phy2log`` the current map) is read the same way; a page shaped as its logger
writes it, redundant slots included, gives the logical counts worked by hand.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenwatt.engine.expert_counts import expert_counts
from tokenwatt.engine.expert_load import expert_load_from_exposition
from tokenwatt.engine.parse import parse_samples
from tokenwatt.geometry import load_geometry
from tokenwatt.load.derive import summarize_probe
from tokenwatt.load.engine_probe import EngineWitness
from tokenwatt.load.probe import run_probe
from tokenwatt.load.target import open_target, resolve_accelerator
from tokenwatt.result import ProbeSummary
from tokenwatt.spec import parse_spec

MODEL = "qwen3-30b-a3b"


def _truth_mbu(path: Path, w0: int, w1: int, node_bw: float) -> float:
    """Bytes every step read (weights and KV), the part of each step inside [w0, w1), over
    the window's length × the node's bandwidth."""
    read = 0.0
    with path.open("rb") as fh:
        for line in fh:
            s = orjson.loads(line)
            a, b = s["sched_start_ns"], s["deadline_ns"]
            lo, hi = max(a, w0), min(b, w1)
            if hi > lo and b > a and s["batch"] > 0:
                read += (hi - lo) / (b - a) * (s["weight_bytes"] + s["kv_bytes"])
    return read / ((w1 - w0) / 1e9 * node_bw)


def _run(tmp: Path, zipf: float, rate: float) -> tuple[ProbeSummary, ProbeSummary, float]:
    """One probe with the witness on: its summary with the scrape, the same run's summary
    without it (the client alone), and the truth."""
    body: dict[str, Any] = {
        "model": {"source": MODEL},
        "hardware": {"accelerator": "h100-sxm", "gpus": 1},
        "endpoint": {"url": "sim"},
        "sim": {"efficiency": 0.5, "prefill_cost": False, "routing": f"zipf:{zipf:g}"},
        "workload": {"input_tokens": 512, "output_tokens": 64, "seed": 1},
        "search": {"probe": {"warmup_s": 1.5, "min_duration_s": 4, "min_requests": 20,
                             "max_duration_s": 24, "drain_timeout_s": 60}},
    }  # fmt: skip
    log = tmp / "truth.jsonl"
    spec = parse_spec(body)
    warnings: list[str] = []

    async def main() -> tuple[Any, Any]:
        async with open_target(spec, sim_mode="subprocess", truth_log=log) as target:
            witness = EngineWitness(spec.server_metrics, target.base_url, warnings)
            scraper = await witness.start()
            run = await run_probe(spec, target.client, rate_rps=rate, seed=1)
            return run, await witness.stop(scraper, run)

    run, window = asyncio.run(main())
    assert window is not None and len(window.expert_scrapes) == 2, warnings
    acc = resolve_accelerator(spec.hardware)
    g = load_geometry(MODEL)
    scraped = summarize_probe(
        index=1, run=run, spec=spec, geometry=g, accelerator=acc, engine_window=window
    )
    alone = summarize_probe(index=1, run=run, spec=spec, geometry=g, accelerator=acc)
    truth = _truth_mbu(log, run.window_start_ns, run.window_end_ns, acc.bandwidth_bytes_per_s)
    return scraped, alone, truth


@pytest.mark.exclusive
@pytest.mark.timeout(180)
@pytest.mark.parametrize("zipf", [1.2, 2.0])
def test_a_live_scrape_collapses_the_band_onto_the_truth(zipf: float, tmp_path: Path) -> None:
    scraped, alone, truth = _run(tmp_path, zipf, rate=12.0)
    before, after = alone.mbu_detail, scraped.mbu_detail
    assert before is not None and after is not None
    assert before.mbu is not None and after.mbu is not None
    low = before.mbu_lower_bound
    print(f"Zipf {zipf}: client alone MBU {before.mbu:.4f} band [{low:.4f}, {before.mbu:.4f}]"
          f" | scraped {after.mbu:.4f} | truth {truth:.4f} ({100 * (after.mbu - truth):+.2f} pt)"
          f" | B {after.inputs.batch_per_replica:.1f}")  # fmt: skip
    # the client alone: a band, wider than 1 pt, holding the truth
    assert before.flags.routing_unmeasured and low is not None and low <= truth <= before.mbu
    # the scrape: the measured load named, no band, the figure on the truth
    assert not after.flags.routing_unmeasured and after.mbu_lower_bound is None
    assert after.routing_reference is None or "engine /metrics" in after.routing_reference
    assert any("measured expert load (engine /metrics" in n for n in after.notes)
    assert after.mbu == pytest.approx(truth, abs=0.01)
    assert after.mbu < before.mbu - 0.01  # the scrape moved the figure, not a coincidence


# A vLLM-Ascend page as its EPLB statistics logger writes it (prometheus-client's exposition of
# a Counter ``vllm:phy_expert_heat`` and a Gauge ``vllm:phy2log``): 2 ranks × 3 slots for 4
# logical experts, so two experts have a redundant copy; one stale map entry (value 0).
ASCEND_PAGE = """# HELP vllm:phy_expert_heat_total Heat of each physical expert per rank
# TYPE vllm:phy_expert_heat_total counter
vllm:phy_expert_heat_total{layer="3",phy_expert_id="0",rank="0"} 100.0
vllm:phy_expert_heat_total{layer="3",phy_expert_id="1",rank="0"} 40.0
vllm:phy_expert_heat_total{layer="3",phy_expert_id="2",rank="0"} 60.0
vllm:phy_expert_heat_total{layer="3",phy_expert_id="0",rank="1"} 30.0
vllm:phy_expert_heat_total{layer="3",phy_expert_id="1",rank="1"} 70.0
vllm:phy_expert_heat_total{layer="3",phy_expert_id="2",rank="1"} 200.0
# HELP vllm:phy2log physical expert to logical expert per rank
# TYPE vllm:phy2log gauge
vllm:phy2log{layer="3",log_expert_id="0",phy_expert_id="0",rank="0"} 1.0
vllm:phy2log{layer="3",log_expert_id="1",phy_expert_id="1",rank="0"} 1.0
vllm:phy2log{layer="3",log_expert_id="2",phy_expert_id="2",rank="0"} 1.0
vllm:phy2log{layer="3",log_expert_id="3",phy_expert_id="0",rank="1"} 1.0
vllm:phy2log{layer="3",log_expert_id="0",phy_expert_id="1",rank="1"} 1.0
vllm:phy2log{layer="3",log_expert_id="3",phy_expert_id="2",rank="1"} 1.0
vllm:phy2log{layer="3",log_expert_id="1",phy_expert_id="2",rank="1"} 0.0
"""


def test_vllm_ascend_physical_heat_is_summed_onto_logical_experts() -> None:
    counts = expert_counts(parse_samples(ASCEND_PAGE))
    # expert 0: 100 (rank 0 slot 0) + 70 (rank 1 slot 1); 3: 30 + 200; the stale 0.0 ignored
    assert counts == {"3": {0: 170.0, 1: 40.0, 2: 60.0, 3: 230.0}}
    empty = ASCEND_PAGE.replace(" 100.0", " 0.0").replace(" 40.0", " 0.0")
    for v in (" 60.0", " 30.0", " 70.0", " 200.0"):
        empty = empty.replace(v, " 0.0")
    load = expert_load_from_exposition(empty, ASCEND_PAGE, experts=4, k=2)
    assert load.inclusion[0].tolist() == pytest.approx(
        [2 * 170 / 500, 2 * 40 / 500, 2 * 60 / 500, 2 * 230 / 500]
    )


def test_without_the_map_each_slot_is_its_own_expert() -> None:
    page = "\n".join(x for x in ASCEND_PAGE.splitlines() if "phy2log" not in x) + "\n"
    counts = expert_counts(parse_samples(page))
    assert counts == {"3": {0: 100.0, 1: 40.0, 2: 60.0, 3: 30.0, 4: 70.0, 5: 200.0}}
