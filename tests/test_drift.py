"""A server that slows down 10× after the search: the run says so, calls no boundary.

The server is a real HTTP server on 127.0.0.1 (aiohttp, OpenAI completions streaming): four
slots, each token 20 ms, so it holds about 4 ÷ (16 × 20 ms) = 12.5 req/s. The moment the run
starts its drift checks (the first probe of phase ``check``), the server's token time becomes
200 ms: a server that changed between the search and the checks, as a neighbour on the GPU or
throttling would change it. The run must notice, record ``changed`` and call no boundary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tokenwatt.load.bench import WARMUP_LIFETIMES, BenchEvent, run_bench
from tokenwatt.load.search import BoundarySearch, drift_check_plan
from tokenwatt.metrics.drift import Level, neighbours, slower_than_search
from tokenwatt.spec import BenchSpec
from virtual_probe import CASES, VirtualProbe, drift_checks


class SlowingServer:
    """Completions streaming with ``slots`` concurrent requests and ``token_s`` per token,
    times ``factor`` (set to 10 to slow it down)."""

    def __init__(self, slots: int = 4, token_s: float = 0.02) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.token_s = token_s
        self.factor = 1.0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "toy", "object": "model"}]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        n = int(body.get("max_tokens", 16))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        async with self.slots:
            for i in range(n):
                await asyncio.sleep(self.token_s * self.factor)
                choice = {
                    "index": 0,
                    "text": "x",
                    "finish_reason": "length" if i == n - 1 else None,
                }
                chunk = {"id": "c", "object": "text_completion", "created": int(time.time()),
                         "model": "toy", "choices": [choice]}  # fmt: skip
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            usage = {"prompt_tokens": 32, "completion_tokens": n, "total_tokens": 32 + n}
            tail = {"id": "c", "object": "text_completion", "model": "toy", "choices": [],
                    "usage": usage}  # fmt: skip
            await resp.write(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def __aenter__(self) -> SlowingServer:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _spec(url: str) -> BenchSpec:
    return BenchSpec.model_validate(
        {
            "name": "drift",
            "endpoint": {"url": url, "model": "toy"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {
                "accelerator": None,
                "custom": {
                    "bandwidth_bytes_per_s": 1e12,
                    "memory_bytes": 80e9,
                    "bf16_dense_flops": 1e15,
                    "tdp_w": 700,
                },
            },
            "power": {"sources": []},
            "workload": {
                "input_tokens": 32,
                "output_tokens": 16,
                "seed": 5,
                "arrival": {"kind": "constant"},
            },
            # p90: the two-sided search's low end needs ~100 clean requests (p99: ~1000)
            "slo": {"ttft_ms": 300, "tpot_ms": 60, "percentile": 0.9},
            "search": {
                "start_rate_rps": 4,
                "precision": 0.45,
                "max_probes": 12,
                "single_stream_requests": 2,
                "probe": {
                    "warmup_s": 0.5,
                    "min_duration_s": 1.5,
                    "min_requests": 40,
                    "max_duration_s": 6,
                    "drain_timeout_s": 10,
                },
            },
        }
    )


@pytest.mark.slow  # a real-time bench (~45 s); quick: the same rules in virtual time below
@pytest.mark.timeout(240)
def test_a_server_that_slows_down_after_the_search_gets_no_boundary(tmp_path: Path) -> None:
    async def main() -> Any:
        async with SlowingServer() as srv:

            def on_event(ev: BenchEvent) -> None:
                if ev.kind == "probe_start" and ev.phase == "check":
                    srv.factor = 10.0

            return await run_bench(_spec(srv.url), tmp_path / "out", on_event=on_event)

    r = asyncio.run(main())
    assert r.search is not None
    assert r.search.stop_reason == "changed", (r.search.stop_reason, r.warnings)
    assert r.boundary is None
    assert any("the server changed during the run" in w for w in r.warnings)
    checks = [p for p in r.probes if p.phase == "check"]
    assert checks and not checks[0].slo_passed  # the re-test at the old passing rate failed
    # the re-test already met a server 10× slower: its median TTFT or TPOT left the search's
    # envelope (or over half its requests failed, their median beyond any), whichever came first
    assert r.search.drift and "median" in r.search.drift[-1], r.search.drift
    assert len(r.search.drift) == 1 and "re-test" in r.search.drift[0]


def test_the_neighbours_rule_by_hand() -> None:
    """The search measured median TPOTs of 30 ms at 10 req/s, 40 at 13, 50 at 14 and 90 at 20
    (an overloaded first guess). A check is compared with the higher median of its nearest
    probes at or below and at or above its rate, at the factor 2.5."""
    search = [Level(10.0, 0.03), Level(13.0, 0.04), Level(14.0, 0.05), Level(20.0, 0.09)]
    # a confirmation at 13.5 sits between 13 and 14: max(40, 50) = 50 ms, so 124 ms is
    # within 2.5 × 50 and 126 ms is not; the line names the figure, the ratio, the neighbours
    assert neighbours(search, 13.5) == 0.05
    assert slower_than_search(Level(13.5, 0.124), search, "here", 2.5) is None
    line = slower_than_search(Level(13.5, 0.126), search, "here", 2.5)
    assert line is not None and line.startswith("median TPOT 126 ms here, 2.52× the 50 ms")
    # the probe at 20 req/s is not a neighbour: 2.5 × its 90 ms would have let 200 ms through
    assert slower_than_search(Level(13.5, 0.2), search, "here", 2.5) is not None
    # a re-test at 13 has the earlier probe at 13 on both sides: 40 ms, so 101 ms is a change
    # although 2.5 × the 50 ms measured at 14 would have covered it
    assert neighbours(search, 13.0) == 0.04
    assert slower_than_search(Level(13.0, 0.101), search, "here", 2.5) is not None
    # a rate measured twice counts both: the higher one bounds
    twice = [*search, Level(13.0, 0.045)]
    assert neighbours(twice, 13.0) == 0.045
    assert slower_than_search(Level(13.0, 0.101), twice, "here", 2.5) is None
    # above every probe only the nearest below bounds it; below every probe, the nearest above
    assert neighbours(search, 25.0) == 0.09
    assert neighbours(search, 5.0) == 0.03
    # nothing judged on either side is skipped; a zero median (one-token outputs) is no bound
    assert slower_than_search(Level(13.0, None), search, "here", 2.5) is None
    assert neighbours([Level(14.0, None), Level(14.0, 0.0)], 13.0) is None
    # over half the check's requests failed (+inf): a change, said in those words
    line = slower_than_search(Level(13.0, math.inf), search, "here", 2.5)
    assert line is not None and line.startswith("over half of the requests here failed")
    # a neighbour whose own requests mostly failed (+inf) bounds nothing
    assert slower_than_search(Level(13.0, 9.0), [Level(13.0, math.inf)], "x", 2.5) is None
    # judged_medians' record: a median on a failure (None) is +inf, no key is nothing judged
    assert Level.of(13.0, {"ttft": None, "tpot": None}).tpot_p50_s == math.inf
    assert Level.of(13.0, {"ttft": 0.2, "tpot": 0.0}).tpot_p50_s == 0.0
    assert Level.of(13.0, {}).tpot_p50_s is None


def test_a_burst_near_the_boundary_is_not_a_change() -> None:
    """The false alarm of the binomial rule this replaced, replayed in virtual time: dense
    seed 1010 (Llama-3.1-8B 1024 → 256 on a simulated H100, p99 TTFT 500 ms / TPOT 50 ms).
    Its confirmation judged 194 requests with 64 over the TPOT limit, which the miss count
    read as a changed server (exit 3). The server did not change, and read by latency level
    both checks agree; against the same simulator made 10× slower both call the change."""
    c = CASES["dense"]
    probe = VirtualProbe(c, lifetimes=WARMUP_LIFETIMES)
    s = BoundarySearch(probe, start_rate_rps=2.0, allowed=0.01, seed=1010, max_probes=30)
    out = asyncio.run(s.run())
    healthy = drift_checks(probe, out, 1010)
    assert [x.kind for x in healthy] == ["re-test", "confirmation"]
    assert not healthy[1].passed  # the confirmation still fails its p99 verdict ...
    assert all(x.changed is None for x in healthy)  # ... and is no change
    slowed = drift_checks(probe, out, 1010, dataclasses.replace(c, efficiency=c.efficiency / 10))
    assert all(x.changed is not None and "median" in x.changed for x in slowed)


def test_the_confirmation_is_left_out_when_it_would_repeat_the_re_test_by_hand() -> None:
    """Two checks read by their median TPOT against the same neighbours measure one level
    twice when the re-test's rate lies inside the reported interval's stated half width
    around the fitted point: only the re-test runs there. The flag form's run over 5 min
    (±10 %): a re-test at 12.79 req/s, the fitted point at 13.54, 5.5 % apart (ln 1.057 =
    0.057, beyond the 5 % in log rate the old rule used, so it ran a second check); within
    ±10 % of the point: one check."""
    assert drift_check_plan(12.79, 13.54, 0.10) == [(12.79, "re-test")]  # 0.75 < 1.354
    assert drift_check_plan(12.45, 12.86, 0.10) == [(12.45, "re-test")]
    assert drift_check_plan(14.33, 14.33, 0.05) == [(14.33, "re-test")]
    # at ±5 % the same pair is two positions: both run (0.75 ≥ 0.677)
    assert drift_check_plan(12.79, 13.54, 0.05) == [(12.79, "re-test"), (13.54, "confirmation")]
    # 12.3 and 15.0: 18 % of the point apart, two levels at ±10 %: both run
    assert drift_check_plan(12.27, 14.98, 0.10) == [(12.27, "re-test"), (14.98, "confirmation")]
    # the edge: |re-test − point| ≥ precision · point keeps it, below or above the point
    point = 10.0
    assert [k for _, k in drift_check_plan(8.9999, point, 0.10)] == ["re-test", "confirmation"]
    assert [k for _, k in drift_check_plan(11.0001, point, 0.10)] == ["re-test", "confirmation"]
    assert [k for _, k in drift_check_plan(9.0001, point, 0.10)] == ["re-test"]
    assert [k for _, k in drift_check_plan(10.9999, point, 0.10)] == ["re-test"]


def test_a_check_warms_up_for_one_lifetime_a_search_probe_for_three() -> None:
    """``_Run.settings_for`` at 13 req/s with a probe measured at 12 req/s whose requests
    lived 8 s (median E2E): a search probe warms up 3 × 8 = 24 s, a drift check 1 × 8 s,
    raised to the spec's 10 s minimum; with 15 s lifetimes the check's is 15 s."""
    from types import SimpleNamespace

    from tokenwatt.load.bench import CHECK_WARMUP_LIFETIMES, _Run
    from tokenwatt.spec import SearchSettings

    assert (WARMUP_LIFETIMES, CHECK_WARMUP_LIFETIMES) == (3.0, 1.0)

    def run(e2e_s: float) -> Any:
        done = SimpleNamespace(rate_rps=12.0, e2e_s=SimpleNamespace(p50=e2e_s))
        return SimpleNamespace(
            spec=SimpleNamespace(search=SearchSettings()),  # warm-up ≥ 10 s
            summaries={1: done},
            result=SimpleNamespace(single_stream=None),
            stages=[],
        )

    assert _Run.settings_for(run(8.0), 13.0).warmup_s == 24.0
    assert _Run.settings_for(run(8.0), 13.0, "fit").warmup_s == 24.0
    assert _Run.settings_for(run(8.0), 13.0, "check").warmup_s == 10.0
    assert _Run.settings_for(run(15.0), 13.0, "check").warmup_s == 15.0
