"""StreamClient reads the server's cached-token count and sends chat histories.

Against the built-in simulator over real HTTP with prefix caching on: its 16-token blocks make
the expected counts a hand calculation (see tests/test_sim_prefix.py for the block rule).
"""

from __future__ import annotations

import asyncio

from builders import sim8b_config
from tokenwatt.client import StreamClient
from tokenwatt.client.openai import Prompt
from tokenwatt.records import RequestRecord, read_requests, write_requests
from tokenwatt.sim import SimConfig, start_sim_thread
from tokenwatt.spec.endpoint import Timeouts


def _config(prefix_caching: bool) -> SimConfig:
    return sim8b_config(prefix_caching=prefix_caching)


def _send(url: str, api: str, prompts: list[Prompt], max_tokens: int = 5) -> list[RequestRecord]:
    timeouts = Timeouts(connect_s=5, first_token_s=20, idle_s=10, total_s=60)

    async def main() -> list[RequestRecord]:
        c = StreamClient(url, api=api, model="sim-8b", timeouts=timeouts)  # type: ignore[arg-type]
        out = []
        for i, p in enumerate(prompts):  # one after another: the second can hit the first
            out.append(
                await c.stream(
                    request_id=i,
                    scheduled_ns=0,
                    prompt=p,
                    max_tokens=max_tokens,
                    prompt_tokens_client=40,
                )
            )
        await c.aclose()
        return out

    return asyncio.run(main())


def test_cached_tokens_per_request_from_usage() -> None:
    text = " ".join(f"w{i}" for i in range(40))  # 40 words: (40-1)//16 = 2 reusable blocks
    with start_sim_thread(_config(True)) as sim:
        recs = _send(sim.url, "completions", [text, text])
    assert [r.status for r in recs] == ["ok", "ok"]
    assert [r.cached_tokens for r in recs] == [0, 32]
    assert all(r.answer_text is None for r in recs)  # only conversations keep the text


def test_cached_tokens_none_when_the_server_does_not_say() -> None:
    with start_sim_thread(_config(False)) as sim:
        recs = _send(sim.url, "completions", ["a b c d"])
    assert recs[0].status == "ok"
    assert recs[0].cached_tokens in (None, 0)


def test_chat_history_is_sent_and_answer_text_kept_but_not_written(tmp_path: object) -> None:
    history: Prompt = [
        {"role": "system", "content": " ".join(f"s{i}" for i in range(40))},
        {"role": "user", "content": "hello there"},
    ]
    with start_sim_thread(_config(True)) as sim:
        recs = _send(sim.url, "chat", [history, history], max_tokens=7)
    first, second = recs
    assert first.status == "ok" and second.status == "ok"
    # the simulator's chat count: words + 3 per message + 3 for the reply
    assert first.prompt_tokens == 40 + 2 + 3 * 2 + 3
    assert first.answer_text is not None and len(first.answer_text.split()) == 7
    assert second.cached_tokens is not None and second.cached_tokens > 0
    from pathlib import Path

    path = write_requests(Path(str(tmp_path)) / "r.jsonl", [("window", first)])
    assert b"answer_text" not in path.read_bytes()
    ((_, back),) = read_requests(path)
    assert back.cached_tokens == first.cached_tokens and back.answer_text is None
