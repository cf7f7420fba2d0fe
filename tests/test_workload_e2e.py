"""Production workloads in a real probe against the simulator over HTTP: trace
replay (Azure and Mooncake) and conversations, plus the session schedule in virtual time.

Truths used: the trace file's own timestamps (scaled by hand), the spec's fixed think time,
the simulator's prompt-token count of what it received, and its 16-token prefix-cache blocks.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenwatt.errors import SpecError
from tokenwatt.load.derive import summarize_probe
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.metrics.latency import sent_late
from tokenwatt.records import RequestRecord
from tokenwatt.spec import parse_spec
from tokenwatt.traffic.schedule import SessionSource, TraceSource, make_source
from tokenwatt.traffic.sessions import SessionPlanner
from tokenwatt.traffic.traces import TraceReplay, load_trace

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
_NS = 1_000_000_000
_FAST_PROBE = {"warmup_s": 0.0, "min_duration_s": 60, "min_requests": 1000, "max_duration_s": 60}


def _spec(name: str, **workload: Any) -> Any:
    raw = yaml.safe_load((EXAMPLES / name).read_text())
    raw["workload"].update(workload)
    raw["search"]["probe"] = dict(_FAST_PROBE)
    raw["sim"]["efficiency"] = 0.9  # answers fast: the test's wall time is the trace's span
    return parse_spec(raw)


def _probe(spec: Any, rate: float | None, seed: int = 0) -> ProbeRun:
    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            return await run_probe(spec, target.client, rate_rps=rate, seed=seed)

    return asyncio.run(main())


@pytest.mark.exclusive
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "fmt", "trace_file"),
    [
        ("sim-azure-trace.yaml", "azure", "azure_sample.csv"),
        ("sim-mooncake-trace.yaml", "mooncake", "mooncake_sample.jsonl"),
    ],
)
def test_trace_replay_in_a_probe(
    name: str, fmt: str, trace_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row is sent once, at the trace's own offset × the scale (the rate's knob), with
    the row's lengths; arrival error (sent − traced time) is the send-lateness figure and
    stays under the one lateness rule; the window closes when the trace runs out."""
    monkeypatch.chdir(ROOT)
    trace = load_trace(ROOT / "src/tokenwatt/examples/traces" / trace_file, fmt)  # type: ignore[arg-type]
    rate = trace.native_rate_rps * 4  # a quarter of the traced time: 3-4 s
    scale = trace.native_rate_rps / rate
    spec = _spec(name)
    run = _probe(spec, rate)
    assert run.arrival == f"trace-{fmt}" and run.rate_unit == "requests"
    assert run.rate_rps == pytest.approx(rate)
    recs = run.records
    assert len(recs) == len(trace.rows) and not run.interrupted
    assert all(r.ok for r in recs), [r.error_message for r in recs if not r.ok][:3]
    lateness = []
    for rec, row in zip(recs, trace.rows, strict=True):
        traced_ns = run.started_ns + round(row.offset_ns * scale)
        assert rec.scheduled_ns == traced_ns
        assert rec.sent_ns is not None
        lateness.append((rec.sent_ns - traced_ns) / _NS)
        assert rec.prompt_tokens == row.input_tokens  # the server's count
        assert rec.output_tokens == row.output_tokens
    assert min(lateness) >= 0
    assert run.metrics.send_lateness_s.max == pytest.approx(max(lateness), abs=1e-9)
    assert not sent_late(run.metrics.send_lateness_s.p99, rate)
    # the trace ran out first: the window is the traced span plus one mean gap
    span_s = (trace.rows[-1].offset_ns - trace.rows[0].offset_ns) * scale / _NS
    assert run.window_dict()["window_s"] == pytest.approx(span_s + 1 / rate, abs=1e-6)
    assert len(run.counted) == len(trace.rows)
    if fmt == "mooncake":
        # the simulator's prefix cache (16-token blocks) hit exactly the leading 512-token
        # blocks an earlier row had sent: the client's shared_prefix_tokens, hand-worked in
        # tests/test_load_traces.py; the first rows share nothing
        assert spec.workload.trace is not None
        plans = TraceReplay.from_spec(
            spec.workload.trace, prompt_format="token_ids", seed=0
        ).plans()
        expected = [p.shared_prefix_tokens for p in plans]
        assert [r.cached_tokens for r in recs] == expected
        assert expected[0] == 0 and sum(expected) > 0


def _virtual_source(think_s: float, turns: int) -> SessionSource:
    raw = yaml.safe_load((EXAMPLES / "sim-chat-sessions.yaml").read_text())
    raw["workload"]["sessions"] = {
        "turns": turns,
        "think_time_s": {"kind": "fixed", "value_s": think_s},
    }
    spec = parse_spec(raw)
    starts = iter([0, 1 * _NS, 2 * _NS, 3 * _NS])
    return SessionSource(SessionPlanner(spec.workload, seed=0, starts_ns=starts))


def _answer(plan_index: int, words: int) -> RequestRecord:
    rec = RequestRecord(plan_index, 0, 0, words, completion_tokens=words)
    rec.answer_text = " ".join(["ok"] * words)
    return rec


def test_session_source_in_virtual_time() -> None:
    """Turn k+1 is due exactly at turn k's answer end + think time (never before the answer),
    other sessions' turns interleave in due order, and each turn resends the history."""
    src = _virtual_source(think_s=0.5, turns=3)
    assert src.peek() == 0
    off, p0 = src.pop()  # session 0, turn 0 at 0 s
    assert off == 0 and [m["role"] for m in p0.prompt] == ["system", "user"]  # type: ignore[index]
    assert src.peek() == 1 * _NS  # session 1 starts at 1 s; session 0 waits for its answer
    off, p1 = src.pop()
    rec0 = _answer(p0.index, 7)
    assert src.finished(rec0, 1_300_000_000)  # session 0's answer ended at 1.3 s
    assert (rec0.session_id, rec0.turn, rec0.answer_text) == (0, 0, None)
    assert src.peek() == 1_800_000_000  # 1.3 s + 0.5 s think, before session 2 at 2 s
    _, p2 = src.pop()
    msgs = p2.prompt
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]  # type: ignore[index]
    assert msgs[2]["content"] == " ".join(["ok"] * 7)  # type: ignore[index]
    assert p2.shared_prefix_tokens == p0.prompt_tokens_client + 7
    assert p2.prompt_tokens_client == p0.prompt_tokens_client + 7 + (
        p2.prompt_tokens_client - p2.shared_prefix_tokens
    )
    assert src.peek() == 2 * _NS
    # a failed turn ends its session: nothing more becomes due for it
    failed = RequestRecord(p1.index, 0, 0, 5, status="error", error_kind="reset")
    assert not src.finished(failed, 2_100_000_000) and failed.session_id == 1


@pytest.mark.timeout(120)
def test_sessions_in_a_probe_against_the_simulator() -> None:
    """Real time over HTTP: each next turn is sent no earlier than the previous response's end
    plus the fixed think time (and about then), resends the history (the server's prompt count
    grows by the previous answer and the new message), and prefix caching hits the history."""
    think_s = 0.3
    spec = _spec(
        "sim-chat-sessions.yaml",
        sessions={"turns": 3, "think_time_s": {"kind": "fixed", "value_s": think_s}},
        output_tokens=16,
        input_tokens=30,
    )
    raw = spec.model_dump(mode="json")
    raw["sim"]["prefix_caching"] = True
    raw["search"]["probe"] = {
        "warmup_s": 0.0,
        "min_duration_s": 2.0,
        "min_requests": 5,
        "max_duration_s": 20,
    }
    spec = parse_spec(raw)
    run = _probe(spec, rate=3.0, seed=1)
    assert run.arrival == "sessions" and run.rate_unit == "sessions"
    by_session: dict[int, list[RequestRecord]] = {}
    for r in run.records:
        if r.session_id is not None and r.ok:
            by_session.setdefault(r.session_id, []).append(r)
    full = [sorted(v, key=lambda r: r.turn or 0) for v in by_session.values() if len(v) == 3]
    assert len(full) >= 2
    for turns in full:
        assert [t.turn for t in turns] == [0, 1, 2]
        for prev, nxt in itertools.pairwise(turns):
            assert prev.done_ns is not None and nxt.sent_ns is not None
            gap_s = (nxt.scheduled_ns - prev.done_ns) / _NS
            assert gap_s == pytest.approx(think_s, abs=2e-3)  # due = end + think, to the ns
            assert nxt.sent_ns >= prev.done_ns + round(think_s * _NS)
            assert prev.prompt_tokens is not None and nxt.prompt_tokens is not None
            # the history grew by the previous answer (16 words) and a 30-word message
            # (+ 3 template tokens for each of the two new messages)
            assert nxt.prompt_tokens == prev.prompt_tokens + 16 + 30 + 2 * 3
            assert nxt.cached_tokens is not None and nxt.cached_tokens >= 500
    assert all(r.answer_text is None for r in run.records)
    _check_session_figures(run, spec)


def _check_session_figures(run: ProbeRun, spec: Any) -> None:
    """The probe summary's session figures, recounted by hand from the records."""
    s = summarize_probe(index=1, run=run, spec=spec, geometry=None, accelerator=None)
    assert s.rate_unit == "sessions" and s.rate_rps == 3.0 and s.sessions is not None
    counted = run.counted
    started = {r.session_id for r in counted if r.turn == 0}
    assert s.sessions.sessions_started == len(started) > 0
    by_s = {sid: [r for r in run.records if r.session_id == sid and r.ok] for sid in started}
    done = sum(1 for v in by_s.values() if len(v) == 3)
    assert s.sessions.sessions_completed == done
    assert s.sessions.turns_per_session_mean == pytest.approx(
        sum(len(v) for v in by_s.values()) / len(started)
    )
    firsts = [r for r in counted if r.ok and r.turn == 0]
    assert s.sessions.ttft_first_turn_mean_s == pytest.approx(
        sum((r.first_token_ns or 0) - (r.sent_ns or 0) for r in firsts) / len(firsts) / _NS
    )
    ok = [r for r in counted if r.ok]
    cached = sum(r.cached_tokens or 0 for r in ok)
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    assert s.cached_prompt_fraction == pytest.approx(cached / prompt)
    assert 0 < cached < prompt


def test_trace_source_is_finite_and_scaled() -> None:
    trace = load_trace(ROOT / "src/tokenwatt/examples/traces/azure_sample.csv", "azure")
    rep = TraceReplay(trace, prompt_format="token_ids", seed=0).at_rate(trace.native_rate_rps * 2)
    src = TraceSource(rep)
    offs = []
    while src.peek() is not None:
        offs.append(src.pop()[0])
    assert src.exhausted
    assert offs == [round(r.offset_ns * 0.5) for r in trace.rows]


def test_trace_with_sessions_is_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    raw = yaml.safe_load((EXAMPLES / "sim-azure-trace.yaml").read_text())
    raw["endpoint"]["api"] = "chat"
    raw["workload"]["sessions"] = {"turns": 2}
    spec = parse_spec(raw)
    with pytest.raises(SpecError, match=r"^workload\.sessions: .*drop workload\.trace"):
        make_source(spec, rate_rps=1.0, seed=0, concurrency=None, prompt_format="text")


@pytest.mark.timeout(120)
def test_single_stream_of_a_trace_and_of_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed loop (the bench's single-stream point) over a trace sends its rows' lengths in
    order; over sessions, each session's first turn (no history, no think time)."""
    monkeypatch.chdir(ROOT)
    trace = load_trace(ROOT / "src/tokenwatt/examples/traces/azure_sample.csv", "azure")
    spec = _spec("sim-azure-trace.yaml")

    async def main(spec: Any) -> ProbeRun:
        async with open_target(spec) as target:
            return await run_probe(
                spec, target.client, rate_rps=None, seed=0, concurrency=1, max_requests=3
            )

    run = asyncio.run(main(spec))
    ok = [r for r in run.counted if r.ok]
    assert run.arrival == "concurrency" and len(ok) == 3
    assert [r.prompt_tokens for r in ok] == [row.input_tokens for row in trace.rows[:3]]
    sessions = asyncio.run(main(_spec("sim-chat-sessions.yaml")))
    first = [r for r in sessions.counted if r.ok]
    assert len(first) == 3
    # system prompt (500 words) + one user message + the template: 3 per message, 3 for reply
    for r in first:
        assert r.prompt_tokens == r.prompt_tokens_client + 3 * 2 + 3
        assert r.prompt_tokens_client > 500
