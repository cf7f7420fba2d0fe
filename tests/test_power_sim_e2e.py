"""End to end: tokens per joule read through the simulator's /metrics energy counter, against
the simulator's own ground truth for the same window.

The simulator serves streaming completions under a closed loop of clients while the power
monitor scrapes ``tokenwatt_sim_energy_joules_total`` like any exporter. Truth comes from the
simulator's per-step log, independently of the scrape: each step's energy is spread evenly
over its scheduled span (the counter is linear inside a step), idle gaps at idle power, and
the tokens a step emitted are counted at its emission time.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest

from tokenwatt.clock import now_ns
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.energy import energy_metrics
from tokenwatt.power import open_power
from tokenwatt.sim import SimConfig, start_sim_thread
from tokenwatt.spec.power import PowerSection

pytestmark = pytest.mark.exclusive  # every test: tokens/J over HTTP against the simulator's truth

S = 1_000_000_000
H100 = get_accelerator("h100-sxm")


async def closed_loop(url: str, streams: int, duration_s: float) -> list[int]:
    """``streams`` clients streaming completions back to back; the arrival stamp of every
    content chunk (one token each)."""
    stamps: list[int] = []
    stop_at = time.monotonic() + duration_s

    async def worker(i: int, session: aiohttp.ClientSession) -> None:
        j = 0
        while time.monotonic() < stop_at:
            body = {
                "prompt": list(range(100 + 61 * ((i + j) % 7))),
                "max_tokens": 40 + 17 * ((3 * i + j) % 5),
                "ignore_eos": True,
                "stream": True,
            }
            async with session.post(url + "/completions", json=body) as resp:
                assert resp.status == 200
                async for raw in resp.content:
                    t = time.perf_counter_ns()
                    line = raw.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    if json.loads(line[6:])["choices"]:
                        stamps.append(t)
            j += 1

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(i, session) for i in range(streams)))
    return stamps


def truth_in_window(log: Path, a: int, b: int, idle_w: float) -> tuple[float, int]:
    """(energy J, tokens emitted) over [a, b] from the simulator's step log."""
    energy = 0.0
    tokens = 0
    covered = 0
    for line in log.read_text().splitlines():
        r = json.loads(line)
        if a <= r["t_end_ns"] <= b:
            tokens += r["tokens_emitted"]
        s0, s1 = r["sched_start_ns"], r["deadline_ns"]
        i0 = s0 - round(r["idle_before_s"] * S)
        for lo, hi, joules in ((i0, s0, r["idle_energy_j"]), (s0, s1, r["energy_j"])):
            o = min(hi, b) - max(lo, a)
            if hi > lo and o > 0:
                energy += joules * o / (hi - lo)
                covered += o
    energy += idle_w * max(0, (b - a) - covered) / S  # time no record spans was idle
    return energy, tokens


def test_tokens_per_joule_matches_the_simulators_truth(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    config = SimConfig(
        geometry=load_geometry("llama-3.1-8b"),
        accelerator=H100,
        efficiency=0.5,
        prefill_cost=True,
        kv_cache_gib=8e9 / 2**30,
        max_model_len=4096,
        truth_log=log,
    )
    idle_w = config.derive().idle_w * config.gpus_per_replica
    with start_sim_thread(config) as sim:
        section = PowerSection(sample_interval_s=0.05)
        with open_power(section, gpus=1, accelerator=H100, sim_metrics_url=sim.metrics_url) as mon:
            assert mon.wait_ready(5.0)
            t0 = now_ns()
            stamps = asyncio.run(closed_loop(sim.url, streams=8, duration_s=4.5))
            a, b = t0 + S, t0 + 4 * S  # steady state, away from ramp-up and drain
            report = mon.energy(a, b)
            series = mon.samples(a, b, max_points=50)
    measured_tokens = sum(1 for t in stamps if a <= t <= b)
    metrics = energy_metrics(report, measured_tokens)
    true_j, true_tokens = truth_in_window(log, a, b, idle_w)

    g = report.scopes["gpu"]
    assert g.source == "sim" and g.valid, g.flags
    assert true_tokens > 1000  # enough tokens that edge effects are small
    assert g.energy_j == pytest.approx(true_j, rel=0.01)
    # a step's tokens (≤ 8) may land on the other side of an edge at the client
    assert measured_tokens == pytest.approx(true_tokens, rel=0.015)
    assert metrics.tokens_per_joule == pytest.approx(true_tokens / true_j, rel=0.02)
    # the power series averages to the window's mean power
    pts = series.primary_points()
    assert len(pts) == 50
    assert sum(p for _, p in pts) / len(pts) == pytest.approx(g.mean_power_w, rel=0.01)
    assert idle_w < g.mean_power_w <= H100.tdp_w  # type: ignore[operator]
