"""WEKA / kv-cache-tester agent traces: read bounded, replayed so the engine's prefix cache
sees exactly the blocks the trace shares (the simulator over real HTTP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tokenwatt.client import StreamClient
from tokenwatt.errors import SpecError
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.sim import SimConfig, start_sim_thread
from tokenwatt.spec import parse_spec
from tokenwatt.spec.endpoint import Timeouts
from tokenwatt.traffic.traces import TraceReplay, load_agent_trace, load_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src/tokenwatt/examples/traces/weka_sample"
# The sample by hand, in arrival order (conversation 2 starts 1 s after conversation 1):
# (seconds, in, tokens of the leading full 64-token blocks an earlier request sent)
HAND = [
    (0.0, 1310, 0),  # conv 1: system + tools, blocks 1-20
    (1.0, 660, 0),  # conv 2 (its local ids 1-10 are not conv 1's)
    (2.0, 1482, 20 * 64),  # conv 1 turn 2: 1-23, 1-20 sent
    (2.5, 801, 10 * 64),  # conv 2 turn 2
    (4.0, 1320, 20 * 64),  # conv 1's subagent: the parent's 20 blocks
    (4.5, 1748, 23 * 64),  # conv 1 turn 3 (type n)
    (4.5, 961, 12 * 64),  # conv 2 turn 3
    (5.5, 1413, 20 * 64),  # subagent turn 2: its block 101 is new
    (7.0, 1970, 27 * 64),  # conv 1 turn 4
]


def test_sample_reads_in_arrival_order_with_subagents_and_local_ids() -> None:
    trace = load_agent_trace(SAMPLE)
    assert trace.format == "weka"
    assert [r.offset_ns / 1e9 for r in trace.rows] == [h[0] for h in HAND]
    assert [r.input_tokens for r in trace.rows] == [h[1] for h in HAND]
    assert [r.output_tokens for r in trace.rows] == [12, 10, 16, 12, 8, 20, 9, 10, 14]
    # local scope: conversation 2's id 1 is not conversation 1's
    assert trace.rows[0].hash_ids[0] != trace.rows[1].hash_ids[0]
    ideal = sum(h[2] for h in HAND) / sum(h[1] for h in HAND)  # 8448 / 11665
    assert trace.ideal_hit_rate(64) == pytest.approx(ideal) == pytest.approx(0.7242, abs=1e-4)
    # the replay's per-request shared prefix is the same hand count
    plans = list(TraceReplay(trace, prompt_format="token_ids", seed=0, block_tokens=64).plans())
    assert [p.shared_prefix_tokens for p in plans] == [h[2] for h in HAND]
    assert [len(p.prompt) for p in plans] == [h[1] for h in HAND]


def test_global_scope_shares_ids_across_files(tmp_path: Path) -> None:
    for k in range(2):
        conv = {
            "hash_id_scope": "global",
            "requests": [{"t": 0, "type": "s", "in": 130, "out": 2, "hash_ids": [7, 8]}],
        }
        (tmp_path / f"c{k}.json").write_bytes(orjson.dumps(conv))
    trace = load_agent_trace(tmp_path, stagger_s=0.5)
    assert [r.offset_ns for r in trace.rows] == [0, 500_000_000]
    assert trace.ideal_hit_rate(64) == pytest.approx(128 / 260)  # the second's two blocks


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[1, 2]", "needs a 'requests' list"),
        (b"{not json", "is not JSON"),
        (b'{"block_size": 16, "requests": []}', "block_size: is 16"),
        (b'{"requests": [{"t": -1, "in": 5, "out": 1}]}', "requests[0]: t (seconds"),
        (b'{"requests": [{"t": 0, "in": 0, "out": 1}]}', "requests[0]: in must be"),
        (b'{"requests": [{"t": 0, "in": 64, "out": 1, "hash_ids": [1, 2]}]}', "2 hash_ids"),
        (b'{"requests": [{"t": 0, "in": 64, "out": 1, "hash_ids": ["a"]}]}', "hash_ids must"),
        (b'{"requests": [{"type": "subagent", "requests": [7]}]}', "requests[0].requests[0]"),
    ],
)
def test_bad_conversations_are_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "c.json"
    f.write_bytes(content)
    with pytest.raises(SpecError, match=r"workload\.trace\.path") as err:
        load_trace(f, "weka")
    assert message in str(err.value) and str(f) in str(err.value)
    assert "\n" not in str(err.value)


def test_empty_folder_and_block_tokens_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"no \.json conversation files"):
        load_agent_trace(tmp_path)
    raw: dict[str, Any] = {"path": str(SAMPLE), "format": "weka", "block_tokens": 512}
    with pytest.raises(SpecError, match="64-token blocks"):
        parse_spec({"model": {"source": "qwen3-8b"}, "workload": {"trace": raw}})


def _replay(spec: Any, rate: float) -> tuple[ProbeRun, dict[str, Any]]:
    async def main() -> tuple[ProbeRun, dict[str, Any]]:
        async with open_target(spec) as target:
            run = await run_probe(spec, target.client, rate_rps=rate, seed=0)
            assert target.sim is not None
            return run, target.sim.server.snapshot()["engines"][0]

    return asyncio.run(main())


@pytest.mark.timeout(60)
def test_replay_hits_the_ideal_rate_in_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's prefix cache (16-token blocks, large) hits what the hashes promise."""
    monkeypatch.chdir(ROOT)
    raw = yaml.safe_load((ROOT / "examples/sim-weka-agent-trace.yaml").read_text())
    raw["sim"]["efficiency"] = 0.9
    raw["search"]["probe"] = {"warmup_s": 0, "min_duration_s": 60, "max_duration_s": 60}
    # a quarter of the traced 7 s: pace × 0.25, conversations 0.25 s apart (4 sessions/s)
    raw["workload"]["trace"]["time_scale"] = 0.25
    spec = parse_spec(raw)
    trace = load_agent_trace(SAMPLE)
    run, engine = _replay(spec, 4.0)
    recs = run.records
    assert len(recs) == len(HAND) and all(r.ok for r in recs)
    assert [r.prompt_tokens for r in recs] == [h[1] for h in HAND]
    assert [r.cached_tokens for r in recs] == [h[2] for h in HAND]
    ideal = trace.ideal_hit_rate(64)
    measured = engine["prefix_hits"] / engine["prefix_queries"]
    client = sum(r.cached_tokens or 0 for r in recs) / sum(r.prompt_tokens or 0 for r in recs)
    print(f"WEKA sample: ideal {ideal:.4f}, simulator {measured:.4f}, client {client:.4f}")
    assert measured == pytest.approx(ideal, abs=0.02)
    assert client == pytest.approx(ideal, abs=0.02)


def _conversations(tmp_path: Path) -> Path:
    """A: 20 blocks, then B: one 2040-token prompt with 8 tokens out (all 128 blocks of the
    capped cache), then A's second turn: its first 20 blocks again and one more."""
    a = [
        {"t": 0.0, "type": "s", "in": 1280, "out": 2, "hash_ids": list(range(1, 21))},
        {"t": 2.0, "type": "s", "in": 1354, "out": 2, "hash_ids": list(range(1, 22))},
    ]
    b = [{"t": 0.0, "type": "s", "in": 2040, "out": 8, "hash_ids": list(range(1, 32))}]
    for name, reqs in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_bytes(orjson.dumps({"requests": reqs}))
    return tmp_path


def _sequential(trace_dir: Path, kv_cache_blocks: int | None) -> list[int]:
    """Each request of the replay sent after the previous ended; their cached tokens."""
    trace = load_agent_trace(trace_dir)
    plans = list(TraceReplay(trace, prompt_format="token_ids", seed=0, block_tokens=64).plans())
    cfg = SimConfig(
        geometry=load_geometry("llama-3.1-8b"),
        accelerator=get_accelerator("h100-sxm"),
        served_model_name="sim",
        max_model_len=2048,
        prefill_cost=False,
        prefix_caching=True,
        kv_cache_blocks=kv_cache_blocks,
    )
    timeouts = Timeouts(connect_s=5, first_token_s=20, idle_s=10, total_s=60)

    async def main(url: str) -> list[int]:
        c = StreamClient(url, api="completions", model="sim", timeouts=timeouts)
        out = []
        for p in plans:
            rec = await c.stream(
                request_id=p.index,
                scheduled_ns=0,
                prompt=p.prompt,
                max_tokens=p.max_tokens,
                prompt_tokens_client=p.prompt_tokens_client,
            )
            assert rec.ok, rec.error_message
            out.append(rec.cached_tokens or 0)
        await c.aclose()
        return out

    with start_sim_thread(cfg) as sim:
        return asyncio.run(main(sim.url))


def test_a_capped_cache_falls_below_the_ideal_as_worked_by_hand(tmp_path: Path) -> None:
    """Ideal: A's second turn finds its 20 blocks, 1280 of 4674 tokens (0.274). With the cache
    capped at 128 16-token blocks (2048 tokens), B's 2048 tokens take every block, so A's
    blocks are evicted before A returns: the measured rate falls to 0. Large cache: the ideal."""
    folder = _conversations(tmp_path)
    trace = load_agent_trace(folder)
    assert [r.input_tokens for r in trace.rows] == [1280, 2040, 1354]  # A, B (t = 1 s), A
    assert trace.ideal_hit_rate(64) == pytest.approx(1280 / 4674)
    assert _sequential(folder, None) == [0, 0, 1280]
    assert _sequential(folder, 128) == [0, 0, 0]


def test_bounds_refuse_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file over the size bound is refused before it is parsed; past the row bound, the
    request that crosses it is named."""
    import tokenwatt.traffic.agent_traces as agent
    from tokenwatt.traffic import traces

    monkeypatch.setattr(agent, "MAX_CONVERSATION_BYTES", 100)
    big = tmp_path / "big"
    big.mkdir()
    (big / "c.json").write_bytes(b'{"requests": []}' + b" " * 100)
    with pytest.raises(SpecError, match="over 100 a file"):
        load_agent_trace(big)
    monkeypatch.setattr(agent, "MAX_CONVERSATION_BYTES", 1 << 20)
    monkeypatch.setattr(traces, "MAX_TRACE_ROWS", 5)
    with pytest.raises(SpecError, match=r"conversation_1\.json requests\[4\]: more than 5"):
        load_agent_trace(SAMPLE)  # conversation 1's sixth request, its subagent's counted
