"""Prefix caching in the simulator, in virtual time, against hand calculations: which 16-token
blocks are reused, what prefill they skip, which are evicted (least recently released first),
and what the truth log, /metrics and the usage say."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import openai
import pytest

from test_sim_support import H100, config, geometry
from tokenwatt.sim import VirtualSim, start_sim_thread
from tokenwatt.sim.engine import Step
from tokenwatt.sim.prefix import block_hashes


def toks(tag: str, n: int) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def first_step_of(sim: VirtualSim, rid: int) -> Step:
    return next(s for s in sim.steps if any(r.rid == rid for r in s.admitted))


def test_block_names_chain_on_the_whole_prefix() -> None:
    a = block_hashes(toks("a", 40))
    assert len(a) == 2  # full blocks only
    b = block_hashes(toks("a", 16) + toks("b", 16))
    assert a[0] == b[0] and a[1] != b[1]
    # the same 16 tokens after a different first block get a different name
    c = block_hashes(toks("x", 16) + toks("a", 32)[16:])
    assert c[1] != a[1]


def test_hits_skip_prefill_and_decode_still_reads_the_whole_context() -> None:
    geom = geometry()
    c = config(geom, prefix_caching=True, prefill_cost=True, prefill_efficiency=0.5)
    sim = VirtualSim(c)
    p = toks("p", 100)  # 6 full blocks
    a = sim.submit(0.0, 100, 2, prompt=p)
    b = sim.submit(1.0, 100, 2, prompt=p[:80] + toks("q", 20))  # shares 5 blocks
    same = sim.submit(2.0, 100, 2, prompt=p)  # all 6 blocks, but at most (100-1)//16 = 6
    short = sim.submit(3.0, 32, 2, prompt=p[:32])  # 2 blocks, at most (32-1)//16 = 1
    sim.run()
    assert (a.cached_tokens, b.cached_tokens, same.cached_tokens, short.cached_tokens) == (
        0, 80, 96, 16,
    )  # fmt: skip
    s_tok = 2 * geom.active_params / (H100.peak_flops("bf16") * 0.5)
    for req, prefilled in ((a, 100), (b, 20), (same, 4), (short, 16)):
        step = first_step_of(sim, req.rid)
        assert step.prefill_tokens == prefilled
        assert step.prefill_s == pytest.approx(prefilled * s_tok)
    # the decode step of b reads the KV of all 100 + 1 tokens, cached or not
    decode = next(s for s in sim.steps if s.batch and b in s.emits)
    assert decode.kv_bytes == 65536 * 101
    e = sim.node.replicas[0]
    assert e.prefix is not None
    assert e.prefix.queries == 100 + 100 + 100 + 32
    assert e.prefix.hits == 80 + 96 + 16
    assert e.free_blocks == e.num_blocks  # every block came back


def test_lru_eviction_by_hand(tmp_path: Path) -> None:
    """8 blocks; five 48-token prompts (3 blocks each) one after another, max_tokens 1.

    After A, B: free named blocks oldest first [a3 a2 a1 b3 b2 b1], 2 unnamed.
    C needs 3 fresh: 2 unnamed + evict a3.          → [a2 a1 b3 b2 b1 c3 c2 c1]
    D = A's prompt: hits a1 a2 (at most (48-1)//16 = 2), 1 fresh: evict b3, names a3 again.
    E = B's prompt: hits b1 b2, 1 fresh: evict c3, names b3 again.  Three evictions in all;
    the 8 blocks end free and named a1 a2 a3 b1 b2 b3 c1 c2."""
    log = tmp_path / "truth.jsonl"
    sim = VirtualSim(config(kv_cache_blocks=8, max_model_len=64, prefix_caching=True), log)
    prompts = {k: toks(k, 48) for k in "abc"}
    order = [("a", 0), ("b", 0), ("c", 0), ("a", 32), ("b", 32)]
    reqs = [sim.submit(float(i), 48, 1, prompt=prompts[k]) for i, (k, _) in enumerate(order)]
    sim.run()
    sim.close()
    assert [r.cached_tokens for r in reqs] == [hit for _, hit in order]
    evicted = [first_step_of(sim, r.rid).evicted_blocks for r in reqs]
    assert evicted == [0, 0, 1, 1, 1]
    e = sim.node.replicas[0]
    assert e.prefix is not None and e.prefix.evictions == 3
    a, b, cc = (block_hashes(prompts[k]) for k in "abc")
    assert set(e.prefix.refs) == {*a, *b, cc[0], cc[1]}
    assert all(v == 0 for v in e.prefix.refs.values()) and e.free_blocks == 8
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["cached"] for r in recs] == [[[q.rid, q.cached_tokens]] for q in reqs]
    assert sum(r["evicted_blocks"] for r in recs) == 3
    assert [r["prefill_tokens"] for r in recs] == [48, 48, 48, 16, 16]


def test_twins_in_one_step_share_blocks() -> None:
    """Two identical 48-token prompts at once: the second reuses the first's 2 blocks in the
    same step (named when allocated, as vLLM does); 3 + 1 blocks are in use, not 6."""
    sim = VirtualSim(config(kv_cache_blocks=8, max_model_len=64, prefix_caching=True))
    p = toks("t", 48)
    first = sim.submit(0.0, 48, 3, prompt=p)
    twin = sim.submit(0.0, 48, 3, prompt=p)
    sim.run(until_s=0.0)
    step = sim.steps[0] if sim.steps else sim._current[0]
    assert step is not None
    assert (first.cached_tokens, twin.cached_tokens) == (0, 32)
    assert step.prefill_tokens == 48 + 16
    e = sim.node.replicas[0]
    assert e.num_blocks - e.free_blocks == 4
    sim.run()
    assert e.free_blocks == 8


def test_off_by_default_nothing_is_cached() -> None:
    sim = VirtualSim(config())
    p = toks("p", 64)
    reqs = [sim.submit(float(i), 64, 2, prompt=p) for i in range(2)]
    sim.run()
    assert [first_step_of(sim, r.rid).prefill_tokens for r in reqs] == [64, 64]
    assert sim.node.replicas[0].prefix is None


def test_usage_and_metrics_report_cached_tokens() -> None:
    c = config(geometry(name="toy"), prefix_caching=True)
    text = " ".join(toks("w", 40))  # 40 words: 2 full blocks, (40-1)//16 = 2 reusable
    with start_sim_thread(c) as sim:
        client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0, timeout=20)
        outs = [client.completions.create(model="toy", prompt=text, max_tokens=2) for _ in range(2)]
        chat = [
            client.chat.completions.create(
                model="toy",
                max_tokens=2,
                stream=True,
                stream_options={"include_usage": True},
                messages=[{"role": "user", "content": text}],
            )
            for _ in range(2)
        ]
        chat_usage = [[ch.usage for ch in s if ch.usage is not None][-1] for s in chat]
        with urllib.request.urlopen(sim.metrics_url, timeout=20) as resp:
            metrics = resp.read().decode()
    details = [o.usage.prompt_tokens_details for o in outs if o.usage is not None]
    assert [d.cached_tokens for d in details if d is not None] == [0, 32]
    # chat: 3 template tokens + 40 words + 3 reply tokens = 46 tokens, 2 blocks reusable
    assert [u.prompt_tokens for u in chat_usage] == [46, 46]
    cached = [u.prompt_tokens_details.cached_tokens for u in chat_usage if u.prompt_tokens_details]
    assert cached == [0, 32]
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="toy"} 64.0' in metrics
    queries = 'vllm:prefix_cache_queries_total{engine="0",model_name="toy"} 172.0'
    assert queries in metrics  # 40 + 40 + 46 + 46
    assert 'enable_prefix_caching="True"' in metrics
