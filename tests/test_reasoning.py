"""Reasoning models: ``reasoning_content``/``reasoning`` deltas are output tokens, counted apart
from the answer, with a time to first token of each kind; the simulator's reasoning phase is
the truth over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenwatt.client.openai import interpret
from tokenwatt.geometry import load_geometry
from tokenwatt.load.derive import probe_mbu
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target, resolve_accelerator
from tokenwatt.metrics.request import ttft_answer_s, ttft_reasoning_s, ttft_s
from tokenwatt.records import RequestRecord
from tokenwatt.sim.wire import ChunkRenderer
from tokenwatt.simsettings import SimSettings, parse_reasoning, reasoning_tokens
from tokenwatt.spec import parse_spec


def _chunk(delta: dict[str, Any], usage: int | None = None) -> bytes:
    obj: dict[str, Any] = {"id": "c1", "choices": [{"index": 0, "delta": delta}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": usage}
    return orjson.dumps(obj)


def _interpret(payloads: list[bytes], max_tokens: int = 50) -> RequestRecord:
    rec = RequestRecord(request_id=0, scheduled_ns=0, prompt_tokens_client=5, max_tokens=50)
    rec.sent_ns = 1_000
    stamps = [1_000 + 10 * (i + 1) for i in range(len(payloads))]
    interpret(payloads, stamps, list(range(len(payloads))), "chat", rec, max_tokens=max_tokens)
    return rec


def test_reasoning_and_answer_counted_apart_from_running_usage() -> None:
    rec = _interpret(
        [
            _chunk({"role": "assistant", "content": ""}, 0),  # role only: not a token
            _chunk({"reasoning_content": "Let"}, 2),  # 2 tokens
            _chunk({"reasoning_content": " me"}, 3),  # 1
            _chunk({"content": "Yes"}, 6),  # 3 answer tokens
            _chunk({"content": "."}, 7),  # 1
        ]
    )
    assert rec.status == "ok" and rec.chunk_tokens_source == "usage"
    assert rec.output_tokens == 7 and rec.reasoning_tokens == 3 and rec.answer_tokens == 4
    # stamps: event i arrives at 1000 + 10(i+1); the role chunk (i=0) is no token
    assert rec.first_token_ns == rec.first_reasoning_ns == 1_020
    assert rec.first_answer_ns == 1_040
    assert ttft_s(rec) == pytest.approx(20e-9) and ttft_reasoning_s(rec) == pytest.approx(20e-9)
    assert ttft_answer_s(rec) == pytest.approx(40e-9)


def test_reasoning_key_counts_and_fallback_counts_chunks() -> None:
    """vLLM's newer ``reasoning`` key, and a server without running usage: one token per chunk."""
    rec = _interpret(
        [_chunk({"reasoning": "a"}), _chunk({"reasoning": "b"}), _chunk({"content": "c"})]
    )
    assert rec.chunk_tokens_source == "fallback"
    assert rec.output_tokens == 3 and rec.reasoning_tokens == 2 and rec.answer_tokens == 1
    assert rec.first_reasoning_ns == 1_010 and rec.first_answer_ns == 1_030


def test_no_reasoning_leaves_no_reasoning_figures() -> None:
    rec = _interpret([_chunk({"content": "a"}, 1), _chunk({"content": "b"}, 2)])
    assert rec.reasoning_tokens == 0 and rec.first_reasoning_ns is None
    assert rec.first_answer_ns == rec.first_token_ns == 1_010
    assert ttft_reasoning_s(rec) is None


def test_all_reasoning_has_no_answer_time_and_trailing_usage_goes_to_reasoning() -> None:
    """max_tokens spent thinking: no answer began; tokens the usage-only tail adds belong to the
    last content chunk, a reasoning one."""
    tail = orjson.dumps({"id": "c1", "choices": [], "usage": {"completion_tokens": 5}})
    rec = _interpret(
        [_chunk({"reasoning_content": "x"}, 2), _chunk({"reasoning_content": "y"}, 3), tail]
    )
    assert rec.output_tokens == 5 and rec.reasoning_tokens == 5 and rec.answer_tokens == 0
    assert rec.first_answer_ns is None and ttft_answer_s(rec) is None


def test_a_chunk_with_both_kinds_is_an_answer_chunk_stamped_for_both() -> None:
    rec = _interpret([_chunk({"reasoning_content": "x", "content": "y"}, 2)])
    assert rec.reasoning_tokens == 0 and rec.answer_tokens == 2
    assert rec.first_reasoning_ns == rec.first_answer_ns == 1_010


def test_untrusted_counts_drop_reasoning_too() -> None:
    """A count that falls is a protocol failure: no count of it enters a figure."""
    rec = _interpret([_chunk({"reasoning_content": "x"}, 3), _chunk({"content": "y"}, 2)])
    assert rec.status == "error" and rec.error_kind == "protocol"
    assert rec.output_tokens == 0 and rec.reasoning_tokens == 0


# ------------------------------------------------------------------------ the simulator's knob
def test_reasoning_rule_parses_and_counts() -> None:
    assert reasoning_tokens(parse_reasoning("off"), 10) == 0
    assert reasoning_tokens(parse_reasoning("tokens:4"), 10) == 4
    assert reasoning_tokens(parse_reasoning("tokens:40"), 10) == 10
    assert reasoning_tokens(parse_reasoning("fraction:0.25"), 10) == 2  # ⌊2.5⌋
    for bad in ("tokens:0", "fraction:0", "fraction:1.5", "half", "tokens:x"):
        with pytest.raises(ValueError, match="off, tokens:N"):
            parse_reasoning(bad)
    with pytest.raises(ValueError, match="reasoning"):
        SimSettings(reasoning="fraction:2")


def _events(frame: bytes) -> list[dict[str, Any]]:
    body = frame.split(b"\r\n", 1)[1]
    return [orjson.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: {")]


def test_renderer_splits_a_chunk_at_the_reasoning_boundary() -> None:
    """Three tokens with two of them reasoning: two events, running usage exact in each."""
    r = ChunkRenderer(
        chat=True, request_id="x", created=0, model="m", prompt_tokens=4,
        include_usage=True, continuous_usage=True,
    )  # fmt: skip
    r.reasoning = 2
    events = _events(r.tokens(0, 3, None))
    deltas = [e["choices"][0]["delta"] for e in events]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert set(deltas[1]) == {"reasoning_content"} and set(deltas[2]) == {"content"}
    assert [e["usage"]["completion_tokens"] for e in events] == [0, 2, 3]
    last = _events(r.tokens(3, 1, "length"))
    assert last[0]["choices"][0]["finish_reason"] == "length"
    assert set(last[0]["choices"][0]["delta"]) == {"content"}
    body = r.response(5, "length")["choices"][0]["message"]
    assert len(body["reasoning_content"].split()) == 2 and len(body["content"].split()) == 3


# ------------------------------------------------------------------------- over real HTTP
OUT_TOKENS, FRACTION = 24, 0.25


def _truth_mbu(path: Path, w0: int, w1: int, node_bw: float) -> float:
    """Bytes the simulator's decode steps read inside the window ÷ (window × bandwidth)."""
    read = 0.0
    with path.open("rb") as fh:
        for line in fh:
            s = orjson.loads(line)
            a, b = s["sched_start_ns"], s["deadline_ns"]
            lo, hi = max(a, w0), min(b, w1)
            if hi > lo and b > a and s["batch"] > 0:
                read += (hi - lo) / (b - a) * (s["weight_bytes"] + s["kv_bytes"])
    return read / ((w1 - w0) / 1e9 * node_bw)


@pytest.mark.exclusive
@pytest.mark.timeout(60)
def test_simulated_reasoning_stream_counts_both_in_t_tau_and_mbu(tmp_path: Path) -> None:
    spec = parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm", "gpus": 1},
            "endpoint": {"url": "sim", "api": "chat"},
            "sim": {"efficiency": 0.5, "prefill_cost": False, "reasoning": f"fraction:{FRACTION}"},
            "workload": {"input_tokens": 256, "output_tokens": OUT_TOKENS, "seed": 2},
            "search": {"probe": {"warmup_s": 0.2, "min_duration_s": 1, "max_duration_s": 30}},
        }
    )
    log = tmp_path / "truth.jsonl"

    async def go() -> tuple[ProbeRun, int]:
        async with open_target(spec, truth_log=log) as target:
            run = await run_probe(
                spec, target.client, rate_rps=None, seed=2, concurrency=1, max_requests=12
            )
            assert target.sim is not None
            return run, target.sim.server.reasoning_tokens

    run, truth_reasoning = asyncio.run(go())
    m = run.metrics
    assert m.requests_failed == 0 and run.counted
    thinking = int(FRACTION * OUT_TOKENS)  # the simulator's rule: ⌊F × n⌋ of n = max_tokens
    for r in run.records:
        assert (r.output_tokens, r.reasoning_tokens) == (OUT_TOKENS, thinking)
        assert r.first_token_ns == r.first_reasoning_ns
        assert r.first_answer_ns is not None and r.first_answer_ns > r.first_reasoning_ns
        # the answer starts `thinking` decode steps after the first token
        assert r.chunk_ns[thinking] == r.first_answer_ns
    assert sum(r.reasoning_tokens for r in run.records) == truth_reasoning
    # the probe's figures: reasoning tokens apart, and the two first-token times
    assert m.reasoning_output_tokens == thinking * len(run.counted)
    assert m.ttft_reasoning_s is not None and m.ttft_answer_s is not None
    assert m.ttft_reasoning_s.count == m.ttft_answer_s.count == m.requests_ok
    assert m.ttft_reasoning_s.p50 == pytest.approx(m.ttft_s.p50)
    assert m.ttft_answer_s.p50 is not None and m.ttft_reasoning_s.p50 is not None
    gap_s = m.ttft_answer_s.p50 - m.ttft_reasoning_s.p50  # `thinking` decode steps
    # T and τ count reasoning tokens: every counted request delivered all n of them
    assert m.counted_output_tokens == OUT_TOKENS * len(run.counted)
    geo = load_geometry("llama-3.1-8b")
    acc = resolve_accelerator(spec.hardware)
    step_s = geo.dense_weight_bytes / (acc.bandwidth_bytes_per_s * 0.5)
    assert m.itl_token_weighted_s is not None
    assert step_s * 0.97 < m.itl_token_weighted_s < step_s * 1.3  # answer-only n would be 4/3×
    assert gap_s == pytest.approx(thinking * m.itl_token_weighted_s, rel=0.2)
    mbu = probe_mbu(run, geo, spec.hardware, acc)
    assert mbu is not None and mbu.mbu is not None
    truth = _truth_mbu(log, run.window_start_ns, run.window_end_ns, acc.bandwidth_bytes_per_s)
    print(f"reasoning stream: MBU {mbu.mbu:.4f} truth {truth:.4f}, τ {m.itl_token_weighted_s}")
    assert mbu.mbu == pytest.approx(truth, abs=0.01)
