"""A server that slows down 10× after the search: the run says so, calls no boundary.

The server is a real HTTP server on 127.0.0.1 (aiohttp, OpenAI completions streaming): four
slots, each token 20 ms, so it holds about 4 ÷ (16 × 20 ms) = 12.5 req/s. The moment the run
starts its drift checks (the first probe of phase ``check``), the server's token time becomes
200 ms: a server that changed between the search and the checks, as a neighbour on the GPU or
throttling would change it. The run must notice, record ``changed`` and call no boundary.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tokenwatt.load.bench import BenchEvent, run_bench
from tokenwatt.metrics.boundary import miss_fraction_upper
from tokenwatt.metrics.drift import (
    binomial_upper,
    changed_against,
    changed_since,
    effective_counts,
)
from tokenwatt.spec import BenchSpec


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
            "slo": {"ttft_ms": 300, "tpot_ms": 60},
            "search": {
                "start_rate_rps": 4,
                "precision": 0.45,
                "max_probes": 8,
                "single_stream_requests": 2,
                "probe": {
                    "warmup_s": 0.5,
                    "min_duration_s": 1.5,
                    "min_requests": 40,  # the checks read 40 as 10 independent (D = 4)
                    "max_duration_s": 6,
                    "drain_timeout_s": 10,
                },
            },
        }
    )


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
    assert r.search.drift and "improbable" in r.search.drift[-1]


def test_the_re_test_rule_by_hand() -> None:
    # Counts are read through the design effect D = 4 (metrics.drift): 200 judged → 50
    # independent, 20 → 5, and a miss count v → round(v / 4), at least 1 when v > 0.
    assert effective_counts(200, 0) == (50, 0)
    assert effective_counts(20, 4) == (5, 1)
    assert effective_counts(20, 12) == (5, 3)
    # 0 misses of 50 before: upper bound (99 %) 1 − 0.01^(1/50) = 8.80 %
    assert binomial_upper(0, 50, 0.99) == pytest.approx(1 - 0.01 ** (1 / 50), rel=1e-6)
    # 12 of 20 after (3 of 5) is improbable at 8.80 %: P(X ≥ 3 | 5, 0.088) = 10·p³q² + 5·p⁴q
    # + p⁵ = 0.594 % < 1 %: changed
    assert changed_since((200, {"tpot_p99": 0}), (20, {"tpot_p99": 12}), "here") is not None
    # 8 of 20 (2 of 5) is not: P(X ≥ 2) = 1 − q⁵ − 5·p·q⁴ = 6.47 %
    assert changed_since((200, {"tpot_p99": 0}), (20, {"tpot_p99": 8}), "here") is None
    # 4 of 20 (1 of 5) is not (P = 1 − q⁵ = 36.9 %)
    assert changed_since((200, {"tpot_p99": 0}), (20, {"tpot_p99": 4}), "here") is None


def test_a_burst_near_the_boundary_is_not_a_change() -> None:
    """README's flag form on a healthy simulator: a pass at 13.9 req/s (0 of 313 over the
    TPOT limit), a fail at 14.6 (6 of 187); the confirmation at 14.4 saw 11 of 172. As
    independent draws that is p ≤ 0.81 % (a false alarm that threw the run away); misses come
    in bursts, and read through the design effect it is an ordinary spread."""
    allowed = 0.01
    evidence = [(13.9, 313, 0), (14.6, 187, 6)]
    upper = miss_fraction_upper(
        allowed, [(r, *effective_counts(n, v)) for r, n, v in evidence], 14.4
    )
    assert changed_against({"tpot_p99": upper}, (172, {"tpot_p99": 11}), "here") is None
    # the 10× slower server of the test above still is one: every request over the limit
    assert changed_against({"tpot_p99": upper}, (172, {"tpot_p99": 172}), "here") is not None
