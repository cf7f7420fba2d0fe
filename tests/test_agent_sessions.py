"""Agent-session figures (``metrics.agent``) worked by hand on built records, and the SLO
boundary in sessions found by a bench over an agent trace against the simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from tokenwatt.cli import app
from tokenwatt.metrics.agent import agent_figures, concurrent_sessions, ttft_by_context
from tokenwatt.records import RequestRecord
from tokenwatt.result import load_result

S = 1_000_000_000  # ns


def _rec(i: int, sched_s: float, done_s: float, prompt: int, ttft_s: float) -> RequestRecord:
    t = round(sched_s * S)
    return RequestRecord(
        request_id=i,
        scheduled_ns=t,
        prompt_tokens_client=prompt,
        max_tokens=4,
        sent_ns=t,
        first_token_ns=t + round(ttft_s * S),
        end_ns=round(done_s * S),
        done_ns=round(done_s * S),
    )


# Window [10 s, 20 s). Conversation 0: requests 0 (11-12 s) and 2 (15-17 s): in flight
# 11-17 s (the tool gap 12-15 s included), 6 s. Conversation 1: requests 1 (8-13 s, sent
# before the window) and 3 (19-23 s, ends after it): 8-23 s clipped to 10-20 s, 10 s.
# Conversation 2: request 4 at 25 s, outside: 0 s. Mean in flight: (6 + 10) / 10 = 1.6.
RECORDS = [
    _rec(0, 11, 12, 1_000, 0.1),
    _rec(1, 8, 13, 9_000, 0.9),
    _rec(2, 15, 17, 40_000, 0.4),
    _rec(3, 19, 23, 200_000, 2.0),
    _rec(4, 25, 26, 500, 0.05),
]
CONVERSATIONS = np.array([0, 1, 0, 1, 2], dtype=np.int64)
W = {"window_start_ns": 10 * S, "window_end_ns": 20 * S}


def test_concurrent_sessions_by_hand() -> None:
    assert concurrent_sessions(RECORDS, CONVERSATIONS, **W) == pytest.approx(1.6)


def test_ttft_split_by_context_length_by_hand() -> None:
    """Counted (scheduled in the window): requests 0, 2, 3. Bins <8k, 8k-32k, 32k-128k, ≥128k:
    request 0 (1k) in the first, 2 (40k) in the third, 3 (200k) in the last; 1 and 4 are
    outside the window, so the 8k-32k bin is empty and left out."""
    bins = ttft_by_context(RECORDS, **W)
    got = [(b.min_tokens, b.max_tokens, b.requests, b.ttft_mean_s) for b in bins]
    assert got == [
        (0, 8192, 1, pytest.approx(0.1)),
        (32768, 131072, 1, pytest.approx(0.4)),
        (131072, None, 1, pytest.approx(2.0)),
    ]


def test_sessions_per_gpu_kw_and_dollar_by_hand() -> None:
    """1.6 sessions on 2 GPUs drawing 1400 W at $2.50 per GPU-hour: 0.8 per GPU, 1.6 / 1.4
    per kW, 1.6 / 5.0 per $/h; without power or price those stay None."""
    a = agent_figures(
        RECORDS, CONVERSATIONS, **W, gpus=2, mean_power_w=1400.0, price_per_gpu_hour=2.5
    )
    assert a is not None
    assert a.concurrent_sessions == pytest.approx(1.6)
    assert a.sessions_per_gpu == pytest.approx(0.8)
    assert a.sessions_per_kw == pytest.approx(1.6 / 1.4)
    assert a.sessions_per_usd_per_hour == pytest.approx(1.6 / 5.0)
    b = agent_figures(
        RECORDS, CONVERSATIONS, **W, gpus=2, mean_power_w=None, price_per_gpu_hour=None
    )
    assert b is not None and b.sessions_per_kw is None and b.sessions_per_usd_per_hour is None
    assert (
        agent_figures(RECORDS, None, **W, gpus=1, mean_power_w=None, price_per_gpu_hour=None)
        is None
    )


BENCH_SPEC = """
name: agent-sessions-bench
endpoint: {{url: sim, api: completions}}
model: {{source: qwen3-8b}}
hardware: {{accelerator: h100-sxm, gpus: 1, price_per_gpu_hour: 2.5}}
sim: {{efficiency: 0.5, prefill_efficiency: 0.2, prefix_caching: true, max_model_len: 8192}}
workload: {{trace: {{path: "{trace}", format: weka}}, seed: 0}}
slo: {{ttft_ms: 300, tpot_ms: 100}}
search:
  start_rate_rps: 3
  precision: 0.25
  max_probes: 7
  single_stream_requests: 2
  sequential: false
  probe: {{warmup_s: 0, min_duration_s: 60, min_requests: 1, max_duration_s: 60}}
server_metrics: {{enabled: false}}
"""


@pytest.mark.slow  # a real-time bench over 40 agent conversations
@pytest.mark.timeout(300)
def test_bench_finds_the_boundary_in_sessions(tmp_path: Path) -> None:
    """40 conversations of 3 turns 0.4 s apart (prompts 1310-1822 tokens, the history resent):
    the search grows the sessions started per second until the SLO fails, and the boundary
    probe states the sessions it held, per GPU and per $/h. A probe replays the whole trace, so
    it lasts 40 ÷ rate seconds: the search starts at 3 sessions/s, below the boundary (about
    4-4.7 sessions/s) with two passing probes under it for Little's law, not at 2, where each
    probe took 20 s."""
    folder = tmp_path / "trace"
    folder.mkdir()
    for c in range(40):
        reqs = [
            {"t": 0.4 * k, "type": "s", "in": 64 * (20 + 4 * k) + 30, "out": 8,
             "hash_ids": list(range(1, 21 + 4 * k))}
            for k in range(3)
        ]  # fmt: skip
        (folder / f"conv{c:02d}.json").write_bytes(orjson.dumps({"requests": reqs}))
    spec = tmp_path / "spec.yaml"
    spec.write_text(BENCH_SPEC.format(trace=folder))
    res = CliRunner().invoke(app, ["bench", str(spec), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    result = load_result(tmp_path / "out" / "result.json")
    assert result.search is not None and result.boundary is not None
    assert result.search.lo_rps is not None and result.search.hi_rps is not None  # bracketed
    b = result.boundary
    assert b.rate_unit == "sessions" and b.slo_passed and b.agent is not None
    sessions = b.agent.concurrent_sessions
    assert sessions is not None and 1.0 < sessions < 40
    assert b.agent.sessions_per_gpu == pytest.approx(sessions)
    assert b.agent.sessions_per_usd_per_hour == pytest.approx(sessions / 2.5)
    failed = [p for p in result.probes if not p.slo_passed and p.rate_rps == result.search.hi_rps]
    assert failed, "the lowest failing rate above the boundary was probed"
    by_rate = sorted(
        (p.rate_rps, p.agent.concurrent_sessions)
        for p in result.probes
        if p.rate_rps and p.agent and p.agent.concurrent_sessions and p.requests_counted
    )
    print(f"boundary {result.search.lo_rps:.3g} sessions/s: {sessions:.2f} concurrent sessions")
    print(by_rate)
    # more sessions started per second hold more in flight (Little's law, durations growing)
    lows = [s for r, s in by_rate if r <= result.search.lo_rps]
    assert max(lows) <= sessions * 1.05
