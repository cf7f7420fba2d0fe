"""The server's token counts are checked, never taken as given: a count above ``max_tokens``,
a huge or negative final count, a running count that falls, or content chunks that add no
token make the request a protocol failure naming the disagreement, and its counts enter no
figure. Before these checks, a stream whose usage jumped 100,000 past max_tokens gave
T = 350,108 tok/s and "SLO pass"; a final count of 10⁹ gave T = 3.2×10⁹ tok/s."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from faultserver import EXPECTED, FaultServer
from tokenwatt.client import StreamClient
from tokenwatt.client.openai import interpret, sent_token_limit
from tokenwatt.load.derive import summarize_probe
from tokenwatt.load.probe import run_probe
from tokenwatt.records import RequestRecord
from tokenwatt.spec import ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts

N = 8
LIES = {
    "usage_past_max": "above the max_tokens 8 sent",
    "usage_huge_final": "1000000000 is above the max_tokens 8 sent",
    "usage_negative": "-5 is negative",
    "usage_falls": "fell from 4 to 1",
    "text_without_tokens": "a content chunk added no token",
}


async def _stream_all(mode: str, k: int) -> list[RequestRecord]:
    async with FaultServer(modes=[mode]) as srv:
        c = StreamClient(srv.url, api="completions", model="m", timeouts=Timeouts(total_s=10))
        try:
            return [
                await c.stream(
                    request_id=i, scheduled_ns=0, prompt=[1] * 16, max_tokens=N,
                    prompt_tokens_client=16,
                )
                for i in range(k)
            ]  # fmt: skip
        finally:
            await c.aclose()


@pytest.mark.parametrize("mode", sorted(LIES))
def test_a_lying_count_is_a_protocol_failure_whose_tokens_enter_no_figure(mode: str) -> None:
    recs = asyncio.run(_stream_all(mode, 2))
    assert EXPECTED[mode] == ("error", "protocol")
    for r in recs:
        assert (r.status, r.error_kind) == ("error", "protocol"), r.error_message
        assert LIES[mode] in (r.error_message or ""), r.error_message
        assert r.output_tokens == 0 and sum(r.chunk_tokens) == 0
        assert len(r.chunk_tokens) == len(r.chunk_ns) > 0  # the chunks' arrival is kept


def test_an_honest_multi_token_stream_passes_every_check() -> None:
    """Speculative decoding: 2 tokens a chunk, the running count rising by 2 (N = 8)."""
    recs = asyncio.run(_stream_all("usage_multi_token", 2))
    for r in recs:
        assert r.ok, r.error_message
        assert list(r.chunk_tokens) == [2, 2, 2, 2] and r.chunk_tokens_source == "usage"
        assert r.completion_tokens == N and r.usage_source == "server"


def _spec(url: str) -> object:
    return parse_spec(
        {
            "name": "counts",
            "endpoint": {"url": url, "api": "completions", "model": "m",
                         "prompt_format": "token_ids"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": None, "custom": {
                "bandwidth_bytes_per_s": 1e12, "memory_bytes": 80e9, "tdp_w": 700}},
            "workload": {"input_tokens": 16, "output_tokens": N, "seed": 1},
            "slo": {"ttft_ms": 500, "tpot_ms": 200},
        }
    )  # fmt: skip


@pytest.mark.parametrize("lie", ["usage_past_max", "usage_huge_final"])
def test_a_probe_counts_only_honest_tokens_and_fails_on_the_lies(lie: str) -> None:
    """Every other request lies. T counts N tokens per honest request (each answer is N
    one-token chunks), the liars are protocol failures, and the probe does not pass."""

    async def main() -> None:
        async with FaultServer(modes=["ok", lie]) as srv:
            spec = _spec(srv.url)
            client = StreamClient(srv.url, api="completions", model="m",
                                  timeouts=Timeouts(total_s=10))  # fmt: skip
            try:
                run = await run_probe(
                    spec,  # type: ignore[arg-type]
                    client,
                    rate_rps=None,
                    concurrency=1,
                    seed=1,
                    max_requests=10,
                    settings=ProbeSettings(warmup_s=0, min_duration_s=0.1, max_duration_s=30,
                                           early_stop=False),
                )  # fmt: skip
            finally:
                await client.aclose()
        m = run.metrics
        ok = [r for r in run.records if r.ok]
        liars = [r for r in run.records if r.failed]
        assert ok and liars and len(ok) + len(liars) == len(run.records)
        assert all(r.error_kind == "protocol" for r in liars)
        assert m.errors_by_kind == {"protocol": m.requests_failed}
        # T's numerator: only honest tokens, at most N per honest request
        assert m.output_tokens <= N * len(ok)
        assert m.counted_output_tokens == N * sum(1 for r in run.counted if r.ok)
        sm = summarize_probe(index=1, run=run, spec=spec, geometry=None, accelerator=None)  # type: ignore[arg-type]
        assert not sm.slo_passed

    asyncio.run(asyncio.wait_for(main(), 60))


def _rec() -> RequestRecord:
    return RequestRecord(request_id=1, scheduled_ns=0, prompt_tokens_client=11, max_tokens=4)


def _chunk(cum: object, prompt: object = 11) -> bytes:
    return orjson.dumps(
        {"choices": [{"text": "x"}], "usage": {"prompt_tokens": prompt, "completion_tokens": cum}}
    )


@pytest.mark.parametrize(
    ("payloads", "limit", "why"),
    [
        ([_chunk(1), _chunk(2, prompt=-3)], 4, "prompt_tokens -3 is out of range"),
        ([_chunk(1), _chunk(2), _chunk(3), _chunk(4), _chunk(5)], 4, "above the max_tokens 4"),
        ([orjson.dumps({"choices": [{"text": "x"}]})] * 5, 4, "5 content chunks for max_tokens 4"),
        ([_chunk(1), _chunk(2), _chunk(2)], 4, "added no token"),
        ([_chunk(2**40)], None, "above the max_tokens 2147483647"),
    ],
)
def test_the_rules_one_by_one(payloads: list[bytes], limit: int | None, why: str) -> None:
    r = _rec()
    interpret(payloads, list(range(1, len(payloads) + 1)), list(range(len(payloads))),
              "completions", r, max_tokens=limit)  # fmt: skip
    assert r.error_kind == "protocol" and why in (r.error_message or ""), r.error_message
    assert r.output_tokens == 0 and r.prompt_tokens == 11  # the client's count stands in


def test_a_boolean_count_is_no_count_and_a_stated_limit_is_read_from_the_body() -> None:
    r = _rec()
    interpret([_chunk(True), _chunk(True)], [1, 2], [0, 1], "completions", r, max_tokens=4)
    assert r.ok and list(r.chunk_tokens) == [1, 1] and r.usage_source == "fallback"
    assert sent_token_limit({"max_tokens": 8, "max_completion_tokens": 9}) == 9
    assert sent_token_limit({"max_tokens": True}) is None and sent_token_limit({}) is None
