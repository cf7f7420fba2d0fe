"""TraceLab coding-agent rounds read as agent conversations: send times from the input
events, prompts that share exactly the provider-cached prefix's full 64-token blocks, bounded
and one-line refusals; the bundled sample (four real rounds) worked by hand."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from tokenwatt.errors import SpecError
from tokenwatt.traffic.traces import TraceReplay, load_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src/tokenwatt/examples/traces/tracelab_sample/rounds.jsonl"


def test_sample_by_hand() -> None:
    """Round k is sent at its latest tool_result/user_message: 05:40:20.151, :50.938,
    05:41:17.550, 05:42:05.482. Its prompt keeps min(⌊prefix / 64⌋, the previous round's
    blocks) blocks: 0, 459 (29380 // 64), 558 (all of round 1's ⌊35740 / 64⌋), 602 (38590 //
    64 of round 2's 603); so the ideal hit rate is 64 × (459 + 558 + 602) ÷ Σ in =
    103,616 ÷ 147,735."""
    trace = load_trace(SAMPLE, "tracelab")
    assert trace.offsets_ns.tolist() == [0, 30_787_000_000, 57_399_000_000, 105_331_000_000]
    assert trace.input_tokens.tolist() == [32272, 35740, 38592, 41131]
    assert trace.output_tokens.tolist() == [931, 1016, 2475, 117]
    assert trace.shared_tokens(64).tolist() == [0, 459 * 64, 558 * 64, 602 * 64]
    assert trace.ideal_hit_rate(64) == pytest.approx(103_616 / 147_735)
    assert trace.conversations is not None and trace.conversations.tolist() == [0, 0, 0, 0]


def _rounds(path: Path, rows: list[dict[str, object]], *, gz: bool = False) -> Path:
    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _row(sid: str, t: str, n_in: int, prefix: int, out: int = 4) -> dict[str, object]:
    events = [{"event_type": "user_message", "timestamp": f"2026-06-01T00:00:{t}Z"}]
    return {"session_id": sid, "input_tokens_total": n_in, "prefix_tokens": prefix,
            "output_tokens": out, "timing_events": events}  # fmt: skip


def test_interleaved_sessions_gzip_and_a_session_rate(tmp_path: Path) -> None:
    """Two sessions interleaved in the file, gzipped: each is its own conversation, starting
    1 s apart, its rounds at their own gaps; a round shares blocks only with its own
    session's previous round. At 4 sessions/s the second starts 0.25 s after the first."""
    path = _rounds(
        tmp_path / "r.jsonl.gz",
        [
            _row("a", "00.0", 640, 0),
            _row("b", "30.0", 256, 0),
            _row("a", "05.0", 704, 640),  # a's 10 blocks again, then one more
            _row("b", "32.0", 320, 200),  # 3 of b's 4 blocks
        ],
        gz=True,
    )
    trace = load_trace(path, "tracelab")
    assert trace.offsets_ns.tolist() == [0, 1_000_000_000, 3_000_000_000, 5_000_000_000]
    assert trace.conversations is not None
    assert trace.conversations.tolist() == [0, 1, 1, 0]
    assert trace.shared_tokens(64).tolist() == [0, 0, 192, 640]
    replay = TraceReplay(trace, prompt_format="token_ids", seed=0, block_tokens=64)
    replay.agent_path = path
    assert replay.at_session_rate(4.0).first(4) == [0, 250_000_000, 2_250_000_000, 5_000_000_000]


def _line(**over: object) -> bytes:
    return orjson.dumps({**_row("a", "00.0", 10, 0), **over}) + b"\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json\n", "line 1: is not JSON"),
        (b'{"input_tokens_total": 5}\n', "line 1: needs a session_id"),
        (_line(prefix_tokens=11), "prefix_tokens 11 > input_tokens_total 10"),
        (_line(timing_events=[]), "needs timing_events"),
        (_line(timing_events=[{"timestamp": "soon"}]), "timestamp 'soon' is not ISO 8601"),
        (_line(input_tokens_total=0), "input_tokens_total must be a whole number"),
    ],
)
def test_bad_rounds_are_one_line(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(line)
    with pytest.raises(SpecError) as err:
        load_trace(path, "tracelab")
    text = str(err.value)
    assert message in text and "\n" not in text and str(path) in text


def test_an_endless_line_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenwatt.traffic import tracelab

    monkeypatch.setattr(tracelab, "MAX_LINE_CHARS", 100)
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"{" + b" " * 500 + b"}\n")
    with pytest.raises(SpecError, match="line 1: longer than 100 characters"):
        load_trace(path, "tracelab")
