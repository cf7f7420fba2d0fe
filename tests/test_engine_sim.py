"""Client against engine end to end: the simulator's /metrics (vLLM names) scraped over HTTP
while a closed loop of streams runs; the engine's T and B must match the client's within 1%.

The truth for the engine side is exact: the simulator counts every generated token once, so
its generation counter over the window equals the client's Σ completion tokens.
"""

from __future__ import annotations

import asyncio

import pytest

from builders import sim8b_config
from tokenwatt.client import StreamClient
from tokenwatt.clock import now_ns
from tokenwatt.engine import EngineScraper, clip_samples, compare_client_engine, summarize
from tokenwatt.records import RequestRecord
from tokenwatt.sim import RunningSim, start_sim_thread
from tokenwatt.spec.endpoint import Timeouts

pytestmark = [pytest.mark.timeout(180), pytest.mark.exclusive]  # both: T and B over HTTP

# Client B = T·τ counts the few steps a slot sits empty between a request's end and the next
# one's admission (and the first step of the window); the engine's tokens per step does not.
# That gap is about one step per request, so B agrees to ~1/OUT: 400 tokens keep it < 0.5%.
STREAMS, ROUNDS, OUT = 6, 2, 400


async def _closed_loop(url: str, scraper: EngineScraper) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    async with StreamClient(url, api="completions", model="sim-8b", timeouts=Timeouts()) as c:

        async def worker(w: int) -> None:
            for r in range(ROUNDS):
                rec = await c.stream(
                    request_id=w * ROUNDS + r,
                    scheduled_ns=now_ns(),
                    prompt=[1] * 32,
                    max_tokens=OUT,
                    prompt_tokens_client=32,
                )
                records.append(rec)

        scraper.start()  # bracket the streams closely: the scrapes are blocking
        await asyncio.gather(*(worker(w) for w in range(STREAMS)))
    return records


def test_client_and_engine_agree_on_t_and_b(sim: RunningSim) -> None:
    scraper = EngineScraper(sim.metrics_url, "auto", interval_s=0.02)
    records = asyncio.run(_closed_loop(sim.url, scraper))
    whole = scraper.stop()
    assert whole.engine == "vllm" and whole.unavailable is None
    assert all(r.ok for r in records) and len(records) == STREAMS * ROUNDS
    # every request and every token counted on both sides
    assert whole.requests_finished == len(records)
    tokens = sum(r.output_tokens for r in records)
    assert tokens == STREAMS * ROUNDS * OUT
    assert whole.generated_tokens == tokens
    assert whole.prompt_tokens == 32 * len(records)

    start = min(r.sent_ns for r in records if r.sent_ns is not None)
    end = max(r.end_ns for r in records if r.end_ns is not None)
    # the same seconds on both sides: engine counters interpolated to the client's window
    window = summarize(clip_samples(scraper.samples, start, end), engine="vllm", url="sim")
    assert window.duration_s == pytest.approx((end - start) / 1e9)
    t_client = tokens / ((end - start) / 1e9)
    decode_ns = sum((r.end_ns or 0) - (r.first_token_ns or 0) for r in records)
    tau_s = decode_ns / 1e9 / sum(r.output_tokens - 1 for r in records)
    checks = {
        a.figure: a
        for a in compare_client_engine(
            client_tokens_per_s=t_client,
            client_tau_s=tau_s,
            replicas=1,
            window=window,
            tolerances={"T": 0.01, "B": 0.01, "s": 0.05},
        )
    }
    assert checks["T"].ok, checks["T"]
    assert checks["B"].ok, checks["B"]
    # steps: the vLLM iteration histogram counts every engine step, so s agrees as well
    assert checks["s"].ok, checks["s"]


def test_idle_replica_is_flagged_with_its_cause() -> None:
    """Two replicas behind one endpoint, one stream: one replica idles the whole window.
    Client B = T·τ/R halves (R = 2), the engine's tokens per step stays 1: flagged, cause idle."""
    cfg = sim8b_config(replicas=2)
    with start_sim_thread(cfg) as running:
        scraper = EngineScraper(running.metrics_url, "vllm", interval_s=0.05)

        async def one() -> RequestRecord:
            async with StreamClient(
                running.url, api="completions", model="sim-8b", timeouts=Timeouts()
            ) as c:
                scraper.start()
                return await c.stream(
                    request_id=0,
                    scheduled_ns=now_ns(),
                    prompt=[1] * 32,
                    max_tokens=200,
                    prompt_tokens_client=32,
                )

        rec = asyncio.run(one())
        whole = scraper.stop()
    assert rec.ok and whole.generated_tokens == 200
    assert rec.sent_ns is not None and rec.end_ns is not None and rec.first_token_ns is not None
    window = summarize(
        clip_samples(scraper.samples, rec.sent_ns, rec.end_ns), engine="vllm", url=""
    )
    t_client = 200 / ((rec.end_ns - rec.sent_ns) / 1e9)
    tau_s = (rec.end_ns - rec.first_token_ns) / 1e9 / 199
    b = next(
        a
        for a in compare_client_engine(
            client_tokens_per_s=t_client, client_tau_s=tau_s, replicas=2, window=window
        )
        if a.figure == "B"
    )
    # engine: 200 tokens over ~200 steps of one replica → ≈ 1 per step; client ≈ 0.5
    assert b.engine == pytest.approx(1.0, rel=0.02)
    assert b.client == pytest.approx(0.5, rel=0.05)
    assert b.ok is False and "idle replicas" in (b.cause or "")
