"""Servers that write a late second answer (a copy of the answer, 50 ms after it): a request
sent at once on the kept-alive connection reads that copy before its own answer. With answer
ids that differ, the copy repeats the previous id; with one constant id (some proxies) or no
id, nothing in the copy tells it apart, but its connection then carries one answer more than
requests, which shows when the real answer arrives after it. No request may take a copy as
its own answer (before: 1 of 7 with unique ids, 7 of 21 with a constant id)."""

from __future__ import annotations

import asyncio

import pytest

from faultserver import LATE_TOKENS, FaultServer
from tokenwatt.client import StreamClient
from tokenwatt.load.derive import summarize_probe
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.records import RequestRecord
from tokenwatt.spec import ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts

N_OUT = 8


async def _probe(mode: str, n: int) -> tuple[ProbeRun, object]:
    async with FaultServer(modes=[mode]) as srv:
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
        client = StreamClient(srv.url, api="completions", model="m", timeouts=Timeouts(total_s=10))
        try:
            run = await run_probe(
                spec,
                client,
                rate_rps=None,
                concurrency=1,  # the next request goes out the moment an answer ends
                seed=1,
                max_requests=n,
                settings=ProbeSettings(
                    warmup_s=0, min_duration_s=1, max_duration_s=30, early_stop=False
                ),
            )
        finally:
            await client.aclose()
    return run, spec


@pytest.mark.parametrize("mode", ["late_second_response", "late_second_constant",
                                  "late_second_no_id"])  # fmt: skip
def test_no_request_takes_a_late_copy_as_its_answer(mode: str) -> None:
    run, spec = asyncio.run(asyncio.wait_for(_probe(mode, 12), 60))
    sm = summarize_probe(index=1, run=run, spec=spec, geometry=None, accelerator=None)  # type: ignore[arg-type]
    assert LATE_TOKENS != N_OUT  # a copy taken as an answer shows as a short answer
    ok = [r for r in run.records if r.ok]
    misread = [r.request_id for r in ok if r.output_tokens != N_OUT]
    assert misread == [], misread
    failed = [r for r in run.records if r.failed]
    assert all(r.error_kind == "protocol" for r in failed), [r.error_message for r in failed]
    assert all("stale answer" in (r.error_message or "") for r in failed)
    # the copy is taken once at most: after the first answer nobody asked for, no
    # connection is reused, so later copies reach no request
    assert len(failed) <= 2 and len(ok) >= len(run.records) - 2
    assert all(r.output_tokens == 0 for r in failed)  # a refused answer is no figure
    assert run.stray_answers >= 1
    assert sm.stray_answers == run.stray_answers and "stray_answers" in sm.flags


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


async def _in_turn(modes: list[str], pause_s: float) -> tuple[list[RequestRecord], int]:
    """One request per mode, each sent ``pause_s`` after the previous ended (a late copy then
    arrives while its connection is idle)."""
    async with FaultServer(modes=modes) as srv:
        client = StreamClient(srv.url, api="completions", model="m", timeouts=Timeouts(total_s=10))
        recs = []
        try:
            for i in range(len(modes)):
                recs.append(
                    await client.stream(
                        request_id=i, scheduled_ns=0, prompt=[1] * 16, max_tokens=N_OUT,
                        prompt_tokens_client=16,
                    )
                )  # fmt: skip
                await asyncio.sleep(pause_s)
        finally:
            await client.aclose()
        return recs, client.stray_answers


def test_a_late_copy_of_the_last_answer_clears_the_answers_before_it() -> None:
    """Ids that differ: the copy repeats the last answer's id, so nothing on that connection
    was shifted, and the answers taken there (one of them unverified: before two ids were
    seen) stay each request's own."""
    recs, stray = asyncio.run(_in_turn(["ok", "ok", "late_second_response", "ok"], 0.2))
    assert stray == 1
    assert [(r.status, r.output_tokens) for r in recs] == [("ok", N_OUT)] * 4
    assert [r.connection_reused for r in recs] == [False, True, True, False]


def test_with_one_constant_id_a_late_copy_fails_the_answers_it_cannot_clear() -> None:
    """One constant id: the copy cannot show which answer it copies, so the answer taken on
    the reused connection before it fails (conservative: here it was the request's own)."""
    recs, stray = asyncio.run(_in_turn(["constant_id", "late_second_constant", "ok"], 0.2))
    assert stray == 1
    got = [(r.status, r.error_kind) for r in recs]
    assert got == [("ok", None), ("error", "protocol"), ("ok", None)]
    assert "stale answer possible" in (recs[1].error_message or "")
    assert recs[1].output_tokens == 0
