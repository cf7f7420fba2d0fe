"""Per-request measurement records: the hot-path data shared by client, load and metrics.

Every timestamp is ``time.perf_counter_ns`` (monotonic) nanoseconds; see ``tokenwatt.clock``.
A record is filled by the client while the stream runs and is immutable in spirit afterwards.
Failures are data: ``status == "error"`` with an ``error_kind``, never an exception.
Cancellation is not failure: a request still running when a probe ends (early stop, Ctrl-C,
drain-time load) is ``status == "cancelled"``; it says nothing about the server, so it is
neither a failure nor an attainment miss.

``write_requests``/``read_requests`` are the one format of ``requests-NN.jsonl``: what is
written reads back into equal records, each with the probe phase it was scheduled in.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import orjson

__all__ = [
    "STAMP_TYPECODE",
    "TOKENS_TYPECODE",
    "ErrorKind",
    "RequestPhase",
    "RequestRecord",
    "RequestStatus",
    "read_requests",
    "write_requests",
]

ErrorKind = Literal[
    "connect",  # could not connect or write the request
    "http_status",  # non-2xx status
    "reset",  # connection closed or reset before the stream ended
    "timeout_first_token",  # no content chunk within timeouts.first_token_s
    "stall",  # no bytes for timeouts.idle_s mid-stream
    "timeout_total",  # whole request over timeouts.total_s
    "protocol",  # malformed HTTP or SSE, undecodable JSON
    "stream_error",  # a JSON error object inside a 200 stream
    "truncated",  # a 200 stream that ended (framing end or clean close) without a proper end
    "cancelled",  # ended by the client (probe end, early stop, Ctrl-C) while in flight
    "worker_lost",  # the worker process sending it died before reporting it (send)
]
RequestStatus = Literal["ok", "error", "cancelled"]
STAMP_TYPECODE = "q"  # int64: monotonic nanoseconds
TOKENS_TYPECODE = "i"  # int32: tokens in one chunk
# When a request was scheduled relative to its probe's measurement window.
RequestPhase = Literal["warmup", "window", "after"]


@dataclass(slots=True)
class RequestRecord:
    """One request's lifecycle as the client saw it."""

    request_id: int
    scheduled_ns: int  # when the arrival schedule said to send it
    prompt_tokens_client: int  # prompt length the client built (tokens)
    max_tokens: int
    sent_ns: int | None = None  # request bytes handed to the kernel
    first_token_ns: int | None = None  # arrival of the first content chunk
    end_ns: int | None = None  # arrival of the last content chunk
    # reasoning models: arrival of the first chunk carrying reasoning text, and of the first
    # carrying answer text (content, tool calls); first_token_ns is the earlier of the two
    first_reasoning_ns: int | None = None
    first_answer_ns: int | None = None
    done_ns: int | None = None  # stream finished ([DONE] / close) or failed
    # arrival of each content chunk, and the tokens in it: flat machine-integer arrays (8 and
    # 4 bytes an entry), not lists of Python ints (40 and 8): a probe keeps every record of
    # its window in memory, 13.8 KB against 3.5 KB per 256-token request
    chunk_ns: array[int] = field(default_factory=lambda: array(STAMP_TYPECODE))
    chunk_tokens: array[int] = field(default_factory=lambda: array(TOKENS_TYPECODE))
    prompt_tokens: int | None = None  # the server's usage.prompt_tokens, else client count
    completion_tokens: int | None = None  # the server's usage.completion_tokens, else fallback
    # of the output tokens, those in chunks that carried only reasoning text (by the same
    # count as chunk_tokens); they are output tokens all the same
    reasoning_tokens: int = 0
    usage_source: Literal["server", "fallback"] = "server"
    status: RequestStatus = "ok"
    http_status: int | None = None
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    coalesced_reads: int = 0  # reads that returned more than one content event
    timestamp_source: Literal["kernel", "user"] = "kernel"
    # how chunk_tokens was counted: running usage deltas from the server, or 1 per content chunk
    chunk_tokens_source: Literal["usage", "fallback"] = "fallback"
    saw_done: bool = False  # the stream ended with `data: [DONE]` (else by end of body / close)
    connection_reused: bool | None = None  # sent on a kept-alive connection (None: never sent)
    # ok, but fewer tokens than max_tokens arrived although ignore_eos asked for exactly that many
    short_output: bool = False
    # the server's usage.prompt_tokens_details.cached_tokens: prompt tokens its prefix cache
    # served (None: the server did not say). Feeds MBU's step regime and the cache figures.
    cached_tokens: int | None = None
    session_id: int | None = None  # the conversation this turn belongs to (sessions only)
    turn: int | None = None  # 0-based turn within its session (sessions only)
    # graded requests only (traffic.graded): the task's kind, and whether the answer was right
    # (None: not graded, or the stream failed before an answer could be judged)
    task: str | None = None
    correct: bool | None = None
    # The answer's text, kept only where a conversation must resend it; never written to
    # result files (it is the server's output, possibly sensitive, and large).
    answer_text: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # callers (tests, readers of older files) may hand lists: stored as arrays all the same
        if not isinstance(self.chunk_ns, array):
            self.chunk_ns = array(STAMP_TYPECODE, self.chunk_ns)
        if not isinstance(self.chunk_tokens, array):
            self.chunk_tokens = array(TOKENS_TYPECODE, self.chunk_tokens)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def cancelled(self) -> bool:
        """Ended by the client, not the server: excluded from failures and attainment."""
        return self.status == "cancelled"

    @property
    def failed(self) -> bool:
        return self.status == "error"

    @property
    def output_tokens(self) -> int:
        if self.completion_tokens is not None:
            return self.completion_tokens
        return sum(self.chunk_tokens)

    @property
    def answer_tokens(self) -> int:
        """Output tokens that are not reasoning tokens."""
        return max(0, self.output_tokens - self.reasoning_tokens)

    def to_dict(self) -> dict[str, Any]:
        """Every field but ``answer_text`` (never persisted)."""
        d = asdict(self)
        del d["answer_text"]
        d["chunk_ns"] = self.chunk_ns.tolist()
        d["chunk_tokens"] = self.chunk_tokens.tolist()
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)


_FIELDS = frozenset(f.name for f in fields(RequestRecord))


def write_requests(path: str | Path, rows: Iterable[tuple[RequestPhase, RequestRecord]]) -> Path:
    """One JSON line per record: its fields plus ``phase``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("wb") as fh:
        for phase, rec in rows:
            fh.write(orjson.dumps({"phase": phase, **rec.to_dict()}))
            fh.write(b"\n")
    return p


def read_requests(path: str | Path) -> list[tuple[RequestPhase, RequestRecord]]:
    """Read what ``write_requests`` wrote. A line with unknown keys is an error naming them
    (a file from a newer tokenwatt), not silently dropped data."""
    out: list[tuple[RequestPhase, RequestRecord]] = []
    with Path(path).open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            data = orjson.loads(line)
            phase = data.pop("phase", "window")
            unknown = sorted(set(data) - _FIELDS)
            if unknown:
                raise ValueError(f"{path}:{lineno}: unknown request fields {unknown}")
            out.append((phase, RequestRecord.from_dict(data)))
    return out
