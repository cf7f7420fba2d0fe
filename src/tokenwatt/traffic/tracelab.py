"""TraceLab coding-agent traces (normalized round JSONL, plain or gzipped) read as agent rows.

TraceLab (University of Washington SyFI lab, dataset CC BY 4.0) publishes one JSON object a
line per LLM round of Claude Code and Codex sessions. The fields read here::

    {"session_id": "...", "round_index": 0, "input_tokens_total": 32272,
     "prefix_tokens": 27217, "output_tokens": 931,
     "timing_events": [{"event_type": "user_message" | "tool_result" | ..., "timestamp":
                        "2026-06-01T05:40:20.151Z"}, ...]}

``input_tokens_total`` = ``prefix_tokens`` (the provider's prompt-cache read) +
``newly_append_tokens``. The trace has no block hashes, so the reader makes them: a round's
prompt is the first ⌊``prefix_tokens`` / 64⌋ 64-token blocks of its session's previous round
(as many as that round had) followed by fresh blocks, so the replay shares exactly the
prefix the provider's cache served, and its ideal hit rate is that prefix's full blocks. A
round is sent when its input was ready: its latest ``user_message`` or ``tool_result``
event (else its first event). Sessions are conversations in order of first appearance;
session k starts ``stagger_s`` × k after the first and keeps its own gaps (tool calls, the
user's pauses). Lines are read one at a time, each at most ``MAX_LINE_CHARS``; only the
previous round's block ids are kept per session.
"""

from __future__ import annotations

import gzip
import io
import math
from array import array
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from tokenwatt.errors import SpecError
from tokenwatt.spec._base import MAX_TOKENS
from tokenwatt.traffic.agent_traces import AGENT_BLOCK_TOKENS, AgentRow

__all__ = ["MAX_LINE_CHARS", "tracelab_rows"]

MAX_LINE_CHARS = 1 << 22  # a sanitized round is a few kB (its tool list); past this: refused
_INPUT_EVENTS = ("user_message", "tool_result")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _fail(path: Path, where: str, what: str) -> SpecError:
    return SpecError(f"workload.trace.path: {path} {where}: {what}")


def _count(row: dict[str, Any], key: str, path: Path, where: str, least: int) -> int:
    v = row.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not least <= v <= MAX_TOKENS:
        raise _fail(
            path, where, f"{key} must be a whole number in [{least}, {MAX_TOKENS}], got {v!r}"
        )
    return v


def _sent_ns(row: dict[str, Any], path: Path, where: str) -> int:
    events = row.get("timing_events")
    if not isinstance(events, list) or not events:
        raise _fail(path, where, "needs timing_events (when the round's input was ready)")
    inputs = [e for e in events if isinstance(e, dict) and e.get("event_type") in _INPUT_EVENTS]
    event = inputs[-1] if inputs else events[0]
    stamp = event.get("timestamp") if isinstance(event, dict) else None
    try:
        t = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        raise _fail(path, where, f"timestamp {stamp!r} is not ISO 8601") from None
    if t.tzinfo is None:
        raise _fail(path, where, f"timestamp {stamp!r} has no time zone")
    d = t - _EPOCH  # exact: a float of seconds since 1970 loses the microseconds
    return ((d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds) * 1_000


def _open(path: Path) -> IO[str]:
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
        return path.open(encoding="utf-8")
    except OSError as exc:
        raise SpecError(
            f"workload.trace.path: cannot read {path} ({exc.strerror or exc})"
        ) from None


def _lines(f: IO[str], path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    lineno = 0
    while True:
        lineno += 1
        try:
            line = f.readline(MAX_LINE_CHARS + 1)
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise _fail(path, f"line {lineno}", f"cannot be read ({exc})") from None
        if not line:
            return
        where = f"line {lineno}"
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            raise _fail(path, where, f"longer than {MAX_LINE_CHARS:,} characters")
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _fail(path, where, "is not JSON (one TraceLab round a line)") from None
        if not isinstance(row, dict) or not isinstance(row.get("session_id"), str):
            raise _fail(path, where, "needs a session_id (TraceLab normalized rounds)")
        yield where, row


class _Sessions:
    """Each session's index, first send time and previous round's block ids."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.start_ns: dict[str, int] = {}
        self.blocks: dict[str, array[int]] = {}
        self.next_id = 1

    def prompt(self, sid: str, n_in: int, prefix: int) -> list[int]:
        """Block ids of a round: the previous round's first ⌊prefix / 64⌋, then fresh ones."""
        prev = self.blocks.get(sid, array("q"))
        full = n_in // AGENT_BLOCK_TOKENS
        keep = min(prefix // AGENT_BLOCK_TOKENS, len(prev), full)
        ids = array("q", prev[:keep])
        ids.extend(range(self.next_id, self.next_id + full - keep))
        self.next_id += full - keep
        self.blocks[sid] = ids
        return ids.tolist()


def tracelab_rows(path: Path, *, stagger_s: float = 1.0) -> Iterator[AgentRow]:
    """The rounds of a TraceLab file as agent rows (see module); problems are one-line
    ``SpecError``s naming the file and line."""
    if not (math.isfinite(stagger_s) and 0 <= stagger_s < 1e6):
        raise SpecError(f"agent trace stagger must be >= 0 seconds, got {stagger_s}")
    s = _Sessions()
    with _open(path) as f:
        for where, row in _lines(f, path):
            sid = row["session_id"]
            n_in = _count(row, "input_tokens_total", path, where, 1)
            prefix = _count(row, "prefix_tokens", path, where, 0)
            if prefix > n_in:
                raise _fail(path, where, f"prefix_tokens {prefix} > input_tokens_total {n_in}")
            n_out = max(1, _count(row, "output_tokens", path, where, 0))  # 0: one token sent
            t = _sent_ns(row, path, where)
            k = s.index.setdefault(sid, len(s.index))
            t0 = s.start_ns.setdefault(sid, t)
            offset = round(k * stagger_s * 1e9) + max(0, t - t0)
            yield f"{path.name} {where}", offset, n_in, n_out, s.prompt(sid, n_in, prefix), k
