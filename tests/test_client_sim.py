"""StreamClient against the built-in simulator over real HTTP (its wire-format test knobs)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from builders import sim8b_config
from tokenwatt.client import StreamClient
from tokenwatt.records import RequestRecord
from tokenwatt.sim import RunningSim, start_sim_thread
from tokenwatt.spec.endpoint import Timeouts


def _sim(**kw: Any) -> Iterator[RunningSim]:
    with start_sim_thread(sim8b_config(**kw)) as running:
        yield running


def _run(url: str, n: int = 1, api: str = "completions", **kw: Any) -> list[RequestRecord]:
    timeouts = kw.pop("timeouts", Timeouts(connect_s=5, first_token_s=20, idle_s=10, total_s=60))

    async def main() -> list[RequestRecord]:
        c = StreamClient(url, api=api, model="sim-8b", timeouts=timeouts)  # type: ignore[arg-type]
        assert await c.list_models() == ["sim-8b"]
        prompt: str | list[int] = "hello " * 30 if api == "chat" else list(range(100, 164))
        recs = await asyncio.gather(
            *(
                c.stream(
                    request_id=i,
                    scheduled_ns=0,
                    prompt=prompt,
                    max_tokens=kw.get("max_tokens", 20),
                    prompt_tokens_client=64,
                )
                for i in range(n)
            )
        )
        await c.aclose()
        return list(recs)

    return asyncio.run(main())


def test_completions_exact_lengths_and_usage(sim: RunningSim) -> None:
    recs = _run(sim.url, n=20)
    for r in recs:
        assert r.ok, r
        assert r.completion_tokens == 20 and sum(r.chunk_tokens) == 20
        assert r.chunk_tokens_source == "usage" and r.usage_source == "server"
        assert r.prompt_tokens == 64 and r.finish_reason == "length" and r.saw_done
        assert r.sent_ns is not None and r.done_ns is not None
        assert r.sent_ns <= r.chunk_ns[0] <= r.chunk_ns[-1] <= r.done_ns


def test_chat(sim: RunningSim) -> None:
    (r,) = _run(sim.url, api="chat", max_tokens=12)
    assert r.ok and r.completion_tokens == 12 and sum(r.chunk_tokens) == 12


def test_multi_token_chunks_counted_from_usage() -> None:
    for running in _sim(tokens_per_chunk=3):
        (r,) = _run(running.url, max_tokens=12)
        assert r.ok and list(r.chunk_tokens) == [3, 3, 3, 3] and r.completion_tokens == 12


def test_in_band_error_after_some_tokens() -> None:
    for running in _sim(error_after_tokens=5):
        (r,) = _run(running.url)
        assert r.status == "error" and r.error_kind == "stream_error", r
        assert r.http_status == 200 and 1 <= len(r.chunk_ns) <= 5


def test_stall() -> None:
    for running in _sim(stall_after_tokens=3):
        t = Timeouts(connect_s=5, first_token_s=20, idle_s=0.5, total_s=60)
        (r,) = _run(running.url, timeouts=t)
        assert r.status == "error" and r.error_kind == "stall", r
        assert len(r.chunk_ns) == 3


def test_keepalive_comments_are_ignored() -> None:
    for running in _sim(keepalive_s=0.002):
        recs = _run(running.url, n=3)
        assert all(r.ok and r.completion_tokens == 20 and len(r.chunk_ns) == 20 for r in recs)
