"""Trace replay: arrival times and per-request lengths read from a production trace.

Two public formats:

* Azure LLM inference trace (CSV, header ``TIMESTAMP,ContextTokens,GeneratedTokens``):
  TIMESTAMP is a date-time (``2023-11-16 18:15:46.6805900``, any number of fractional
  digits) or a number of seconds. No prompt content: each prompt is random, ContextTokens long.
* Mooncake trace (JSONL, one object a line: ``timestamp`` in ms, ``input_length``,
  ``output_length``, ``hash_ids``): hash id h stands for one block of ``block_tokens`` tokens
  (512 in the published traces), the same block wherever h appears, so requests that share
  leading hash ids share a prompt prefix, as the traced requests did. A block is a pure
  function of (seed, h); tokens past the last block are random per request.

Arrival offsets are the trace's, relative to its first row, times ``time_scale``: 0.5 replays
at twice the traced rate, which is how a rate search scales a trace (``time_scale_for``). The
first row arrives at the probe's start; the schedule ends with the trace (it does not loop).
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import math
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, overload

import numpy as np
import orjson

from tokenwatt.errors import SpecError
from tokenwatt.spec._base import MAX_TOKENS
from tokenwatt.spec.workload import Trace as TraceSpec
from tokenwatt.traffic.agent_traces import agent_rows
from tokenwatt.traffic.tracelab import tracelab_rows
from tokenwatt.traffic.workload import PromptFormat, RequestPlan, random_prompt

__all__ = [
    "MAX_TRACE_ROWS",
    "Trace",
    "TraceReplay",
    "TraceRow",
    "TraceRows",
    "load_agent_trace",
    "load_trace",
    "parse_azure",
    "parse_mooncake",
]

TraceFormat = Literal["azure", "mooncake", "weka", "tracelab"]
AGENT_FORMATS: tuple[TraceFormat, ...] = ("weka", "tracelab")  # conversations, 64-token blocks
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_Row = tuple[int, int, int, tuple[int, ...]]  # (time ns, input, output, hash ids)
_STREAM_TRACE_PROMPT, _STREAM_TRACE_BLOCK = 0x54524350, 0x5452424B  # "TRCP", "TRBK"
# Bounds (docs/methodology.md, "Bounds and refusals"): the public traces hold 10^4-10^5 rows
# and lines under 10 KB; a replay of 10^6 rows is days at real rates. Past these a trace is
# refused in one line, where it once took 3 GB (10^7 Azure rows) or crashed (10^7 Mooncake).
MAX_TRACE_ROWS = 1_000_000
MAX_LINE_CHARS = 1 << 20
_MIN_NS, _MAX_NS = -(2**63), 2**63 - 1  # int64: what the columns hold


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One traced request: when it came (ns after the first row, unscaled) and its lengths."""

    offset_ns: int
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


class TraceRows(Sequence[TraceRow]):
    """The rows of a ``Trace``, made one at a time from its columns (never held as objects:
    a row costs 32 bytes plus 8 per hash id, not ~200 bytes plus 36 per id)."""

    def __init__(self, trace: Trace) -> None:
        self._t = trace

    def __len__(self) -> int:
        return len(self._t.offsets_ns)

    def _row(self, i: int) -> TraceRow:
        t = self._t
        lo, hi = int(t.hash_bounds[i]), int(t.hash_bounds[i + 1])
        hashes = tuple(int(h) for h in t.hash_ids[lo:hi])
        return TraceRow(
            int(t.offsets_ns[i]), int(t.input_tokens[i]), int(t.output_tokens[i]), hashes
        )

    @overload
    def __getitem__(self, i: int) -> TraceRow: ...
    @overload
    def __getitem__(self, i: slice) -> list[TraceRow]: ...
    def __getitem__(self, i: int | slice) -> TraceRow | list[TraceRow]:
        if isinstance(i, slice):
            return [self._row(k) for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._row(i)

    def __iter__(self) -> Iterator[TraceRow]:
        return (self._row(k) for k in range(len(self)))


@dataclass(frozen=True, slots=True, eq=False)
class Trace:
    """A parsed trace in arrival order, as columns (``rows`` reads them row by row)."""

    offsets_ns: np.ndarray  # int64, ns after the first row
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    hash_bounds: np.ndarray  # int64, row i's hash ids are hash_ids[bounds[i]:bounds[i+1]]
    hash_ids: np.ndarray  # int64
    format: TraceFormat
    # int64, row i's conversation (agent traces: subagents in their parent's); None: not known
    conversations: np.ndarray | None = None

    @property
    def rows(self) -> TraceRows:
        return TraceRows(self)

    @property
    def span_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return int(self.offsets_ns[-1]) / 1e9

    @property
    def native_rate_rps(self) -> float:
        """Mean arrival rate as traced: (rows − 1) gaps over the span."""
        if len(self.offsets_ns) < 2 or self.offsets_ns[-1] == 0:
            raise SpecError(
                "workload.trace: a rate needs at least two rows at different times in the trace"
            )
        return (len(self.offsets_ns) - 1) / self.span_s

    @property
    def has_hashes(self) -> bool:
        """Whether any row names its blocks (Azure traces do not: no ideal hit rate)."""
        return len(self.hash_ids) > 0

    def shared_tokens(self, block_tokens: int) -> np.ndarray:
        """Per row, in arrival order: the tokens of its leading run of full blocks whose ids
        an earlier row sent (what an unbounded prefix cache could serve it), int64."""
        seen: set[int] = set()
        out = np.zeros(len(self.input_tokens), dtype=np.int64)
        bounds = self.hash_bounds.tolist()
        for i, tokens in enumerate(self.input_tokens.tolist()):
            row = self.hash_ids[bounds[i] : bounds[i + 1]].tolist()
            hit = 0
            for j, h in enumerate(row):
                if h not in seen or (j + 1) * block_tokens > tokens:
                    break
                hit += block_tokens
            out[i] = hit
            seen.update(row)
        return out

    def ideal_hit_rate(self, block_tokens: int) -> float:
        """The prefix-cache hit rate an unbounded cache reaches on this trace: Σ
        ``shared_tokens`` ÷ Σ prompt tokens (blocks of ``block_tokens``)."""
        total = int(self.input_tokens.sum())
        return int(self.shared_tokens(block_tokens).sum()) / total if total else 0.0

    def time_scale_for(self, rate_rps: float) -> float:
        """The ``time_scale`` that replays this trace at a mean rate of ``rate_rps``."""
        if not (math.isfinite(rate_rps) and rate_rps > 0):
            raise SpecError(f"rate must be a positive number of requests/s, got {rate_rps}")
        return self.native_rate_rps / rate_rps


def _fail(path: Path, where: str, what: str) -> SpecError:
    return SpecError(f"workload.trace.path: {path} {where}: {what}")


def _length(v: Any, path: Path, where: str, name: str) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError, OverflowError):
        n = -1
    if n < 1 or (isinstance(v, float) and not v.is_integer()) or isinstance(v, bool):
        raise _fail(path, where, f"{name} must be a whole number >= 1, got {v!r}")
    if n > MAX_TOKENS:
        raise _fail(path, where, f"{name} {n} is more than {MAX_TOKENS:,} tokens")
    return n


def _time_ns(ns: float | int, path: Path, where: str, v: object) -> int:
    """``ns`` as an int64 nanosecond count; non-finite or out-of-range times are one line."""
    if not (isinstance(ns, int) or math.isfinite(ns)) or not _MIN_NS <= ns <= _MAX_NS:
        raise _fail(path, where, f"timestamp {v!r} is not a finite time within ±292 years")
    return round(ns)


def _azure_time_ns(v: str, path: Path, where: str) -> int:
    """Integer ns since the epoch (or since 0 for plain seconds): a float of epoch seconds
    keeps only ~0.1 µs, so the fraction is read as digits, not through a float."""
    try:
        seconds = float(v)
    except ValueError:
        pass
    else:
        return _time_ns(seconds * 1e9, path, where, v)
    text, frac_ns = v.strip(), 0
    head, _, frac = text.rpartition(".")
    if head and frac.isdigit():  # the trace has 7 fractional digits; keep them all
        text, frac_ns = head, int(frac[:9].ljust(9, "0"))
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise _fail(path, where, f"TIMESTAMP {v!r} is not a date-time or seconds") from None
    if dt.tzinfo is None:  # naive times are UTC, so no daylight-saving jump enters a gap
        dt = dt.replace(tzinfo=UTC)
    whole = dt - datetime(1970, 1, 1, tzinfo=UTC)
    ns = (whole.days * 86400 + whole.seconds) * 10**9 + whole.microseconds * 1000 + frac_ns
    return _time_ns(ns, path, where, v)


class _Columns:
    """Rows gathered as compact int64 arrays while a trace is read, bounded in count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.t, self.n_in, self.n_out = array("q"), array("q"), array("q")
        self.bounds, self.hashes = array("q", [0]), array("q")
        self.conversations = array("q")

    def add(
        self,
        where: str,
        t: int,
        n_in: int,
        n_out: int,
        hashes: Sequence[int] = (),
        *,
        conversation: int | None = None,
    ) -> None:
        if len(self.t) >= MAX_TRACE_ROWS:
            raise _fail(
                self.path, where, f"more than {MAX_TRACE_ROWS:,} requests; replay a part of it"
            )
        self.t.append(t)
        self.n_in.append(n_in)
        self.n_out.append(n_out)
        self.hashes.extend(hashes)
        self.bounds.append(len(self.hashes))
        if conversation is not None:
            self.conversations.append(conversation)

    def ordered(self, fmt: TraceFormat) -> Trace:
        if not self.t:
            raise _fail(self.path, "", "holds no requests")
        t = np.frombuffer(self.t, dtype=np.int64)
        order = np.argsort(t, kind="stable")  # stable: equal times keep file order
        bounds = np.frombuffer(self.bounds, dtype=np.int64)
        hashes = np.frombuffer(self.hashes, dtype=np.int64)
        counts = np.diff(bounds)[order]
        new_bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        take = np.repeat(bounds[:-1][order] - new_bounds[:-1], counts) + np.arange(
            int(new_bounds[-1]), dtype=np.int64
        )
        return Trace(
            offsets_ns=t[order] - t[order[0]],
            input_tokens=np.frombuffer(self.n_in, dtype=np.int64)[order],
            output_tokens=np.frombuffer(self.n_out, dtype=np.int64)[order],
            hash_bounds=new_bounds,
            hash_ids=hashes[take],
            format=fmt,
            conversations=np.frombuffer(self.conversations, dtype=np.int64)[order]
            if len(self.conversations) == len(self.t)
            else None,
        )


def _lines(source: str | IO[str], path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of ``source``, each at most ``MAX_LINE_CHARS`` long: a trace is
    streamed, never read whole, and one endless line is refused, not buffered."""
    f = io.StringIO(source) if isinstance(source, str) else source
    for lineno in itertools.count(1):
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            raise _fail(path, f"line {lineno}", f"longer than {MAX_LINE_CHARS:,} characters")
        yield lineno, line


def parse_azure(source: str | IO[str], path: Path) -> Trace:
    """Rows of an Azure LLM inference trace CSV (text, or an open text file read as a stream)."""
    current = [0]  # the line the csv reader is on, for errors

    def feed() -> Iterator[str]:
        for n, line in _lines(source, path):
            current[0] = n
            yield line

    reader = csv.reader(feed())
    try:
        header = next(reader, [])
        missing = [c for c in AZURE_COLUMNS if c not in header]
        if missing:
            names = ", ".join(AZURE_COLUMNS)
            raise _fail(path, "header", f"needs columns {names} (missing {missing})")
        at = [header.index(c) for c in AZURE_COLUMNS]
        cols = _Columns(path)
        for rec in reader:
            where = f"line {current[0]}"
            if not rec:
                continue
            if len(rec) <= max(at):
                raise _fail(path, where, f"has {len(rec)} fields, the header {len(header)}")
            t = _azure_time_ns(rec[at[0]], path, where)
            n_in = _length(rec[at[1]], path, where, "ContextTokens")
            n_out = _length(rec[at[2]], path, where, "GeneratedTokens")
            cols.add(where, t, n_in, n_out)
    except csv.Error as exc:
        raise _fail(path, f"line {current[0]}", f"not CSV ({exc})") from None
    return cols.ordered("azure")


def parse_mooncake(source: str | IO[str], path: Path) -> Trace:
    """Rows of a Mooncake trace (JSONL; ``timestamp`` in milliseconds)."""
    cols = _Columns(path)
    for lineno, line in _lines(source, path):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _fail(path, where, "not a JSON object") from None
        if not isinstance(rec, dict):
            raise _fail(path, where, "not a JSON object")
        ts = rec.get("timestamp")
        if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
            raise _fail(path, where, f"timestamp (ms) must be a number, got {ts!r}")
        n_in = _length(rec.get("input_length"), path, where, "input_length")
        n_out = _length(rec.get("output_length"), path, where, "output_length")
        hashes = rec.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and _MIN_NS <= h <= _MAX_NS
            for h in hashes
        ):
            raise _fail(path, where, "hash_ids must be a list of 64-bit integers")
        if len(hashes) > n_in:
            raise _fail(path, where, f"{len(hashes)} hash_ids for {n_in} input tokens")
        cols.add(where, _time_ns(ts * 1e6, path, where, ts), n_in, n_out, hashes)
    return cols.ordered("mooncake")


def load_agent_trace(path: Path, *, stagger_s: float = 1.0, fmt: TraceFormat = "weka") -> Trace:
    """Agent conversations as one ``Trace``, conversation k starting ``stagger_s`` × k after
    the first: WEKA / kv-cache-tester (``traffic.agent_traces``) or TraceLab
    (``traffic.tracelab``)."""
    cols = _Columns(path)
    rows = tracelab_rows if fmt == "tracelab" else agent_rows
    for where, t, n_in, n_out, hashes, k in rows(path, stagger_s=stagger_s):
        cols.add(where, t, n_in, n_out, hashes, conversation=k)
    return cols.ordered(fmt)


def load_trace(path: Path, fmt: TraceFormat) -> Trace:
    """Stream and parse a trace file; problems are one-line ``SpecError``s naming the line.
    ``weka``: a folder of agent conversations (``traffic.agent_traces``)."""
    if fmt in AGENT_FORMATS:
        return load_agent_trace(path, fmt=fmt)
    try:
        with path.open(encoding="utf-8", newline="") as f:
            return parse_azure(f, path) if fmt == "azure" else parse_mooncake(f, path)
    except OSError as exc:
        raise SpecError(
            f"workload.trace.path: cannot read {path} ({exc.strerror or exc})"
        ) from None
    except UnicodeDecodeError:
        raise SpecError(f"workload.trace.path: {path} is not UTF-8 text") from None


class TraceReplay:
    """A trace as a probe replays it: arrival offsets and one ``RequestPlan`` per row."""

    def __init__(
        self,
        trace: Trace,
        *,
        prompt_format: PromptFormat,
        seed: int,
        time_scale: float = 1.0,
        block_tokens: int = 512,
    ) -> None:
        if not (math.isfinite(time_scale) and time_scale > 0):
            raise SpecError(f"workload.trace.time_scale must be > 0, got {time_scale}")
        self.trace = trace
        self.prompt_format = prompt_format
        self.seed = seed
        self.time_scale = time_scale
        self.block_tokens = block_tokens
        self._blocks: dict[int, str | list[int]] = {}
        self.agent_path: Path | None = None  # agent traces: re-read to restagger sessions

    @classmethod
    def from_spec(cls, spec: TraceSpec, *, prompt_format: PromptFormat, seed: int) -> TraceReplay:
        replay = cls(
            load_trace(spec.path, spec.format),
            prompt_format=prompt_format,
            seed=seed,
            time_scale=spec.time_scale,
            block_tokens=spec.block_tokens,
        )
        replay.agent_path = spec.path if spec.format in AGENT_FORMATS else None
        return replay

    def at_session_rate(self, sessions_per_s: float) -> TraceReplay:
        """An agent trace with its conversations starting ``sessions_per_s`` a second (one
        every 1/rate s, in file order), each at its traced pace × ``time_scale``: the load
        grows by more agents at once, not by faster agents (the search's knob for agent
        traces, in sessions/s)."""
        if not (math.isfinite(sessions_per_s) and sessions_per_s > 0):
            raise SpecError(f"rate must be a positive number of sessions/s, got {sessions_per_s}")
        assert self.agent_path is not None  # from_spec of a weka trace
        stagger_s = 1.0 / (sessions_per_s * self.time_scale)  # offsets are scaled after
        replay = TraceReplay(
            load_agent_trace(self.agent_path, stagger_s=stagger_s, fmt=self.trace.format),
            prompt_format=self.prompt_format,
            seed=self.seed,
            time_scale=self.time_scale,
            block_tokens=self.block_tokens,
        )
        replay.agent_path = self.agent_path
        return replay

    @property
    def rate_rps(self) -> float:
        """The mean arrival rate this replay sends: the traced rate ÷ ``time_scale``."""
        return self.trace.native_rate_rps / self.time_scale

    def at_rate(self, rate_rps: float) -> TraceReplay:
        """The same trace and prompts, time-scaled to a mean of ``rate_rps`` (the search's
        knob: a probe's rate replaces the spec's ``time_scale``)."""
        return TraceReplay(
            self.trace,
            prompt_format=self.prompt_format,
            seed=self.seed,
            time_scale=self.trace.time_scale_for(rate_rps),
            block_tokens=self.block_tokens,
        )

    def first(self, n: int) -> list[int]:
        """The first ``n`` offsets (fewer when the trace is shorter), as schedules offer."""
        return list(itertools.islice(self.offsets_ns(), n))

    def offsets_ns(self) -> Iterator[int]:
        """Arrival offsets after the probe's start, non-decreasing; ends with the trace."""
        for off in self.trace.offsets_ns.tolist():
            yield round(off * self.time_scale)

    @functools.cached_property
    def shared_tokens(self) -> np.ndarray:
        """Per row, the tokens an unbounded prefix cache could serve (``Trace.shared_tokens``
        in this replay's blocks): each plan's ``shared_prefix_tokens``, and the probe's ideal
        hit rate."""
        return self.trace.shared_tokens(self.block_tokens)

    def _block(self, h: int) -> str | list[int]:
        if h not in self._blocks:
            ss = np.random.SeedSequence([self.seed, _STREAM_TRACE_BLOCK, h & (2**63 - 1)])
            self._blocks[h] = random_prompt(
                np.random.default_rng(ss), self.block_tokens, self.prompt_format
            )
        return self._blocks[h]

    def _blocks_prompt(self, row: TraceRow, rng: np.random.Generator) -> list[Any]:
        """The prompt as a list of units (ids or words): its blocks, cut or padded to length."""
        units: list[Any] = []
        for h in row.hash_ids:
            if len(units) >= row.input_tokens:
                break
            block = self._block(h)
            units.extend(block if isinstance(block, list) else block.split(" "))
        del units[row.input_tokens :]
        pad = row.input_tokens - len(units)
        if pad:
            tail = random_prompt(rng, pad, self.prompt_format)
            units.extend(tail if isinstance(tail, list) else tail.split(" "))
        return units

    def plans(self) -> Iterator[RequestPlan]:
        """Request i of the trace; ``shared_prefix_tokens`` counts the leading full blocks whose
        hash ids an earlier row already sent (what an unbounded prefix cache could hit)."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, _STREAM_TRACE_PROMPT]))
        shared = self.shared_tokens.tolist()
        for i, row in enumerate(self.trace.rows):
            units = self._blocks_prompt(row, rng)
            prompt: str | list[int] = (
                units if self.prompt_format == "token_ids" else " ".join(units)
            )
            yield RequestPlan(i, prompt, row.input_tokens, row.output_tokens, None, shared[i])
