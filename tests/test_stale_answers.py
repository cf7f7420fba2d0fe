"""A server that writes a late second answer (the same answer id again, 50 ms after the first):
a request sent at once on the kept-alive connection reads that duplicate before its own
answer. Before: it was taken as the request's answer (15 of 47 window records, TTFT p99
280 ms against 50 ms true, SLO "pass"), and the stray-answer count was written nowhere."""

from __future__ import annotations

import asyncio

from faultserver import LATE_TOKENS, FaultServer
from tokenwatt.client import StreamClient
from tokenwatt.load.derive import summarize_probe
from tokenwatt.load.probe import run_probe
from tokenwatt.spec import ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts

N_OUT = 8


def test_stale_answers_are_refused_counted_and_flagged() -> None:
    async def main() -> None:
        async with FaultServer(modes=["late_second_response"]) as srv:
            spec = parse_spec(
                {
                    "name": "stale",
                    "endpoint": {"url": srv.url, "api": "completions", "model": "m",
                                 "prompt_format": "token_ids"},
                    "model": {"source": "llama-3.1-8b"},
                    "hardware": {"accelerator": None, "custom": {
                        "bandwidth_bytes_per_s": 1e12, "memory_bytes": 80e9, "tdp_w": 700}},
                    "workload": {"input_tokens": 16, "output_tokens": N_OUT, "seed": 1},
                    "slo": {"ttft_ms": 500, "tpot_ms": 200},
                }
            )  # fmt: skip
            client = StreamClient(
                srv.url, api="completions", model="m", timeouts=Timeouts(total_s=10)
            )
            try:
                run = await run_probe(
                    spec,
                    client,
                    rate_rps=None,
                    concurrency=1,  # the next request goes out the moment an answer ends
                    seed=1,
                    max_requests=12,
                    settings=ProbeSettings(
                        warmup_s=0, min_duration_s=1, max_duration_s=30, early_stop=False
                    ),
                )
            finally:
                await client.aclose()
        sm = summarize_probe(index=1, run=run, spec=spec, geometry=None, accelerator=None)
        ok = [r for r in run.records if r.ok]
        stale = [r for r in run.records if "stale answer" in (r.error_message or "")]
        # A repeated id is refused only once the server's ids are seen to differ (a server
        # with one constant id would otherwise fail every answer): the first repeat, before
        # a second id was ever seen, cannot be told from such a server. After it, no request
        # took the duplicate (LATE_TOKENS tokens) as its own answer.
        misread = [r for r in ok if r.output_tokens != N_OUT]
        assert ok and len(misread) <= 1
        assert all(
            m.request_id < s.request_id
            for m in misread
            for s in run.records
            if "stale answer" in (s.error_message or "")
        )
        assert stale and all(r.error_kind == "protocol" for r in stale)
        assert LATE_TOKENS != N_OUT
        assert run.stray_answers >= len(stale)
        assert sm.stray_answers == run.stray_answers and "stray_answers" in sm.flags

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_server_with_one_constant_id_is_not_refused() -> None:
    """Some servers and proxies put the same id on every answer: each answer then repeats the
    previous one's id on a kept-alive connection, and none of them is stale."""

    async def main() -> None:
        async with FaultServer(modes=["constant_id"]) as srv:
            client = StreamClient(
                srv.url, api="completions", model="m", timeouts=Timeouts(total_s=10)
            )
            try:
                recs = [
                    await client.stream(
                        request_id=i,
                        scheduled_ns=0,
                        prompt=[1] * 16,
                        max_tokens=N_OUT,
                        prompt_tokens_client=16,
                    )
                    for i in range(6)
                ]
            finally:
                await client.aclose()
        assert all(r.ok and r.output_tokens == N_OUT for r in recs), [r.error_message for r in recs]
        assert sum(r.connection_reused for r in recs) >= 4

    asyncio.run(main())
