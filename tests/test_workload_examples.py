"""The production-workload example specs build what a probe will send: shared-prefix plans,
conversations, trace replays (the trace and session examples run end to end against the
simulator in tests/test_workload_e2e.py)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
import yaml

from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.spec import load_spec, parse_spec
from tokenwatt.traffic.arrivals import OpenLoopSchedule
from tokenwatt.traffic.sessions import SessionPlanner, session_rate_rps
from tokenwatt.traffic.traces import TraceReplay
from tokenwatt.traffic.workload import WorkloadGenerator, resolve_prompt_format

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_shared_prefix_example() -> None:
    spec = load_spec(EXAMPLES / "sim-shared-prefix.yaml")
    fmt = resolve_prompt_format(spec)
    assert fmt == "token_ids"
    ps = list(itertools.islice(WorkloadGenerator(spec.workload, prompt_format=fmt, seed=0), 500))
    assert all(p.prompt_tokens_client == 2200 == len(p.prompt) for p in ps)
    share0 = sum(p.prefix_id == 0 for p in ps) / len(ps)
    assert share0 == pytest.approx(0.4, abs=0.07)  # weight 2 of 5; binomial sd ≈ 0.022


def test_chat_sessions_example() -> None:
    spec = load_spec(EXAMPLES / "sim-chat-sessions.yaml")
    assert resolve_prompt_format(spec) == "text" and spec.workload.sessions is not None
    s = spec.workload.sessions
    assert session_rate_rps(1.0, s.rate_unit, s.turns) == 1.0
    starts = OpenLoopSchedule("poisson", 1.0, 0).offsets_ns()
    conv = next(iter(SessionPlanner(spec.workload, seed=0, starts_ns=starts)))
    turn = conv.first_turn()
    assert [m.role for m in turn.messages] == ["system", "user"]
    assert turn.history_tokens_client == 500


@pytest.mark.parametrize(
    ("name", "rows"), [("sim-azure-trace.yaml", 40), ("sim-mooncake-trace.yaml", 30)]
)
def test_trace_examples(name: str, rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the examples name the bundled traces from the repository root
    spec = load_spec(EXAMPLES / name)
    assert spec.workload.trace is not None
    rep = TraceReplay.from_spec(spec.workload.trace, prompt_format="token_ids", seed=0)
    offs = list(rep.offsets_ns())
    plans = list(rep.plans())
    assert len(offs) == len(plans) == rows and offs[0] == 0
    assert offs == sorted(offs)
    assert all(len(p.prompt) == p.prompt_tokens_client for p in plans)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("prompt_format", ["token_ids", "text"])
def test_shared_prefix_example_against_the_simulator(prompt_format: str) -> None:
    """End to end over HTTP: every prompt is prefix + unique part, and the simulator's
    ``usage.prompt_tokens`` (its count of what it received) equals the client's count."""
    raw = yaml.safe_load((EXAMPLES / "sim-shared-prefix.yaml").read_text())
    raw["endpoint"]["prompt_format"] = prompt_format
    raw["workload"]["output_tokens"] = 8
    raw["search"]["probe"] = {
        "warmup_s": 0.2,
        "min_duration_s": 1.0,
        "min_requests": 10,
        "max_duration_s": 10,
    }
    spec = parse_spec(raw)

    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            return await run_probe(spec, target.client, rate_rps=10.0, seed=2)

    run = asyncio.run(main())
    ok = [r for r in run.counted if r.ok]  # requests sent after the window may be cut off
    assert len(ok) >= 10 and len(ok) == len(run.counted)
    for r in ok:
        assert r.prompt_tokens_client == 2200
        assert r.usage_source == "server" and r.prompt_tokens == 2200
        assert r.output_tokens == 8
