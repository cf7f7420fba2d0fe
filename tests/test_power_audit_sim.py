"""The energy audit against the simulator's energy truth: bursts of requests with idle pauses
between them, the simulator's counter scraped like any exporter, the window split into busy
and idle time (and prefill-heavy and decode-only time) by the requests' own stamps; each part
checked against the simulator's per-step truth log integrated over the same intervals."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest

from test_power_sim_e2e import truth_in_window
from tokenwatt.clock import now_ns
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.power import open_power
from tokenwatt.power.audit import clip_union, subtract
from tokenwatt.sim import SimConfig, start_sim_thread
from tokenwatt.spec.power import PowerSection

S = 1_000_000_000
H100 = get_accelerator("h100-sxm")


async def bursts(url: str, n: int, streams: int, pause_s: float) -> list[tuple[int, int, int]]:
    """``n`` bursts of ``streams`` concurrent requests, a pause after each; (send, first token,
    end) stamps of every request."""
    out: list[tuple[int, int, int]] = []

    async def one(session: aiohttp.ClientSession, k: int) -> None:
        body = {"prompt": list(range(1500 + 97 * k)), "max_tokens": 24 + 5 * k,
                "ignore_eos": True, "stream": True}  # fmt: skip
        t0 = time.perf_counter_ns()
        first = 0
        async with session.post(url + "/completions", json=body) as resp:
            assert resp.status == 200
            async for raw in resp.content:
                line = raw.strip()
                if line.startswith(b"data: {") and json.loads(line[6:])["choices"] and not first:
                    first = time.perf_counter_ns()
        out.append((t0, first, time.perf_counter_ns()))

    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            await asyncio.gather(*(one(session, k) for k in range(streams)))
            await asyncio.sleep(pause_s)
    return out


def truth_over(log: Path, intervals: list[tuple[int, int]], idle_w: float) -> float:
    return sum(truth_in_window(log, a, b, idle_w)[0] for a, b in intervals)


def test_busy_idle_split_matches_the_simulators_truth(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    config = SimConfig(
        geometry=load_geometry("llama-3.1-8b"),
        accelerator=H100,
        efficiency=0.3,
        prefill_efficiency=0.05,  # slow prefill: prefill-heavy intervals of tens of ms
        prefill_cost=True,
        kv_cache_bytes=8e9,
        max_model_len=4096,
        truth_log=log,
    )
    idle_w = config.derive().idle_w * config.gpus_per_replica
    with start_sim_thread(config) as sim:
        section = PowerSection(sample_interval_s=0.05)
        with open_power(section, gpus=1, accelerator=H100, sim_metrics_url=sim.metrics_url) as mon:
            assert mon.wait_ready(5.0)
            a = now_ns()
            reqs = asyncio.run(bursts(sim.url, n=3, streams=4, pause_s=0.4))
            b = now_ns()
            report = mon.energy(a, b)
            busy = [(s, e) for s, _, e in reqs]
            prefill = [(s, f) for s, f, _ in reqs]
            (x,) = mon.audit(a, b, busy=busy, prefill=prefill, tdp_w=H100.tdp_w)
    true_total, _ = truth_in_window(log, a, b, idle_w)
    assert report.scopes["gpu"].energy_j == pytest.approx(true_total, rel=0.01)
    # a scrape may stall on a loaded machine (the gap check): the other checks must pass
    assert all(c.passed for c in x.checks if c.name != "no_gaps"), x.verdict
    assert x.method == "energy_counter" and x.source == "sim"
    busy_iv = clip_union(busy, a, b)
    idle_iv = subtract([(a, b)], busy_iv)
    assert x.idle_s == pytest.approx(sum(h - lo for lo, h in idle_iv) / S)
    assert x.idle_s > 0.8  # three pauses of 0.4 s
    assert x.busy_energy_j is not None and x.idle_energy_j is not None, x.split_note
    assert x.busy_energy_j == pytest.approx(truth_over(log, busy_iv, idle_w), rel=0.03)
    assert x.idle_energy_j == pytest.approx(truth_over(log, idle_iv, idle_w), rel=0.05)
    # idle time costs the simulator's idle power: the audit sees the floor it was given
    assert x.idle_energy_j / x.idle_s == pytest.approx(idle_w, rel=0.1)
    pre_iv = clip_union(prefill, a, b)
    dec_iv = subtract(busy_iv, pre_iv)
    assert x.prefill_energy_j is not None and x.decode_energy_j is not None, x.split_note
    assert x.prefill_energy_j == pytest.approx(truth_over(log, pre_iv, idle_w), rel=0.1)
    assert x.decode_energy_j == pytest.approx(truth_over(log, dec_iv, idle_w), rel=0.1)
