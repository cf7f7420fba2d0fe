"""Speculative decoding in the simulator over real HTTP: chunks per verify step, the truth log
and vLLM's spec-decode counters, read back by the client's step logic and the engine parser."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from builders import sim8b_config
from tokenwatt.client import StreamClient
from tokenwatt.engine import EngineScraper, clip_samples, compare_client_engine, summarize
from tokenwatt.engine.speculation import spec_counters_from_text
from tokenwatt.errors import SpecError
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.steps import step_figures
from tokenwatt.records import RequestRecord
from tokenwatt.sim import SimConfig, start_sim_thread
from tokenwatt.simsettings import SimSettings
from tokenwatt.spec import parse_spec
from tokenwatt.spec.endpoint import Timeouts

K = 3


def _config(**kw: Any) -> SimConfig:
    return sim8b_config(**kw)


def _stream(url: str, n: int, max_tokens: int) -> list[RequestRecord]:
    async def main() -> list[RequestRecord]:
        timeouts = Timeouts(connect_s=5, first_token_s=20, idle_s=10, total_s=60)
        c = StreamClient(url, api="completions", model="sim-8b", timeouts=timeouts)
        recs = await asyncio.gather(*(
            c.stream(request_id=i, scheduled_ns=0, prompt=list(range(100, 164)),
                     max_tokens=max_tokens, prompt_tokens_client=64)
            for i in range(n)
        ))  # fmt: skip
        await c.aclose()
        return list(recs)

    return asyncio.run(main())


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as resp:
        return str(resp.read().decode())


def test_chunks_truth_log_and_counters_agree(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    spec = {"method": "ngram", "num_tokens": K, "acceptance": [0.9, 0.7, 0.5]}
    with start_sim_thread(_config(speculative=spec, truth_log=log)) as sim:
        records = _stream(sim.url, 8, 61)
        text = _scrape(sim.metrics_url)
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(r.ok and r.completion_tokens == 61 for r in records)
    # one chunk per step: the first (prefill) carries 1 token, each verify step 1 + accepted
    for r in records:
        assert r.chunk_tokens[0] == 1 and sum(r.chunk_tokens) == 61
        assert all(1 <= t <= K + 1 for t in r.chunk_tokens)
    drafts = sum(s.get("spec_drafts", 0) for s in steps)
    emitted = sum(s.get("spec_emitted", 0) for s in steps)
    accepted = sum(s.get("spec_accepted", 0) for s in steps)
    per_pos = [sum(s["spec_accepted_per_pos"][p] for s in steps if "spec_drafts" in s)
               for p in range(K)]  # fmt: skip
    assert sum(s["tokens_emitted"] for s in steps) == 8 * 61
    assert sum(s["spec_proposed"] for s in steps if "spec_drafts" in s) == K * drafts
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
    # the client's steps are the engine's verify steps, its tokens the ones they emitted
    fig = step_figures(records, declared_k=K)
    assert fig.decode_steps == drafts and fig.decode_tokens == emitted
    assert fig.acceptance_length == pytest.approx(emitted / drafts)
    assert fig.speculation == "declared" and not fig.coalesced
    # undeclared: the varying chunk sizes give it away
    assert step_figures(records).speculation == "detected"
    # /metrics: vLLM's counter names, equal to the truth log
    counters = spec_counters_from_text(text)
    assert counters is not None
    assert (counters.drafts, counters.draft_tokens, counters.accepted_tokens) == (
        drafts, K * drafts, accepted)  # fmt: skip
    assert list(counters.accepted_per_pos) == per_pos
    # vLLM's acceptance length counts accepted tokens past the length cap; never below ours
    assert counters.acceptance_length is not None
    assert counters.acceptance_length >= fig.acceptance_length > 1.5
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total{" in text


def test_no_speculation_no_counters_one_token_chunks() -> None:
    with start_sim_thread(_config()) as sim:
        records = _stream(sim.url, 2, 20)
        text = _scrape(sim.metrics_url)
    assert spec_counters_from_text(text) is None
    assert "spec_decode" not in text
    fig = step_figures(records)
    assert fig.speculation == "none" and not fig.coalesced
    assert fig.acceptance_length == 1.0 and fig.decode_steps == 2 * 19


def test_settings_forms_and_errors() -> None:
    s = SimSettings(speculative="mtp:3:0.8").speculative
    assert s is not None and s.profile() == [0.8, 0.8, 0.8]
    assert s.mean_acceptance_length() == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    spec = parse_spec({"model": {"source": "llama-3.1-8b"}, "hardware": {"accelerator": "h100-sxm"},
                       "endpoint": {"url": "sim"},
                       "sim": {"speculative": {"method": "draft", "num_tokens": 2,
                                               "acceptance": [0.9, 0.6],
                                               "draft_model": "qwen3-8b"}}})  # fmt: skip
    assert spec.sim.speculative is not None and spec.sim.speculative.draft_model == "qwen3-8b"
    for bad, says in (
        ({"method": "mtp", "num_tokens": 2, "acceptance": 1.5}, "acceptance must be"),
        ({"method": "mtp", "num_tokens": 2, "acceptance": [0.5]}, "one per proposed token"),
        ({"method": "ngram", "num_tokens": 0, "acceptance": 0.5}, "num_tokens"),
        ({"method": "ngram", "num_tokens": 2, "acceptance": 0.5, "draft_model": "x"}, "draft"),
        ("mtp:3", "METHOD:K:ACCEPTANCE"),
    ):
        with pytest.raises(ValueError, match=says):
            SimSettings(speculative=bad)
    with pytest.raises(SpecError, match="no MTP layers"):
        _config(speculative={"method": "mtp", "num_tokens": 1, "acceptance": 0.5})
    with pytest.raises(SpecError, match="draft_model"):
        _config(speculative={"method": "draft", "num_tokens": 1, "acceptance": 0.5})


def test_config_travels_as_json_with_its_draft_model() -> None:
    cfg = SimConfig.from_settings(
        SimSettings(speculative="draft:2:0.7:llama-3.1-8b"),
        geometry=load_geometry("llama-3.1-70b"), accelerator=get_accelerator("h100-sxm"),
        gpus_per_replica=4,
    )  # fmt: skip
    back = SimConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back.draft_geometry == cfg.draft_geometry and back.draft_geometry is not None
    assert back.derive().speculative == cfg.derive().speculative


def test_engine_witness_agrees_on_acceptance_length_steps_and_batch() -> None:
    """The simulator's /metrics scraped while streams run (``engine`` package, as probes do):
    the engine's acceptance length (1 + accepted ÷ drafts) beside the client's, and B and s
    counted in steps and sequences on both sides."""
    spec = {"method": "ngram", "num_tokens": K, "acceptance": 0.8}
    with start_sim_thread(_config(speculative=spec)) as sim:
        scraper = EngineScraper(sim.metrics_url, "auto", interval_s=0.02)
        scraper.start()
        records = _stream(sim.url, 6, 400)
        whole = scraper.stop()
    assert whole.engine == "vllm" and whole.spec_drafts and whole.acceptance_length
    start = min(r.sent_ns for r in records if r.sent_ns is not None)
    end = max(r.end_ns for r in records if r.end_ns is not None)
    window = summarize(clip_samples(scraper.samples, start, end), engine="vllm", url="sim")
    fig = step_figures(records)
    assert fig.speculation == "detected" and fig.acceptance_length and fig.itl_chunk_s
    tokens = sum(r.output_tokens for r in records)
    decode_ns = sum((r.end_ns or 0) - (r.first_token_ns or 0) for r in records)

    def compare(steps: tuple[float, float] | None) -> dict[str, Any]:
        return {
            a.figure: a
            for a in compare_client_engine(
                client_tokens_per_s=tokens / ((end - start) / 1e9),
                client_tau_s=decode_ns / 1e9 / sum(r.output_tokens - 1 for r in records),
                replicas=1,
                window=window,
                client_steps=steps,
            )
        }

    checks = compare((fig.acceptance_length, fig.itl_chunk_s))
    assert checks["alpha"].ok, checks["alpha"]
    assert checks["T"].ok, checks["T"]
    assert checks["B"].ok, checks["B"]
    # without the steps the client's B and s count tokens: off by about α
    plain = compare(None)
    assert plain["s"].ok is False and "alpha" not in plain
