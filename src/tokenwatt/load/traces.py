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
import io
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from tokenwatt.errors import SpecError
from tokenwatt.load.workload import PromptFormat, RequestPlan, random_prompt
from tokenwatt.spec.workload import Trace as TraceSpec

__all__ = ["Trace", "TraceReplay", "TraceRow", "load_trace", "parse_azure", "parse_mooncake"]

TraceFormat = Literal["azure", "mooncake"]
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_Row = tuple[int, int, int, tuple[int, ...]]  # (time ns, input, output, hash ids)
_STREAM_TRACE_PROMPT, _STREAM_TRACE_BLOCK = 0x54524350, 0x5452424B  # "TRCP", "TRBK"


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One traced request: when it came (ns after the first row, unscaled) and its lengths."""

    offset_ns: int
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed trace, rows in arrival order."""

    rows: tuple[TraceRow, ...]
    format: TraceFormat

    @property
    def span_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return self.rows[-1].offset_ns / 1e9

    @property
    def native_rate_rps(self) -> float:
        """Mean arrival rate as traced: (rows − 1) gaps over the span."""
        if len(self.rows) < 2 or self.rows[-1].offset_ns == 0:
            raise SpecError(
                "workload.trace: a rate needs at least two rows at different times in the trace"
            )
        return (len(self.rows) - 1) / self.span_s

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
    except (TypeError, ValueError):
        n = -1
    if n < 1 or (isinstance(v, float) and not v.is_integer()) or isinstance(v, bool):
        raise _fail(path, where, f"{name} must be a whole number >= 1, got {v!r}")
    return n


def _azure_time_ns(v: str, path: Path, where: str) -> int:
    """Integer ns since the epoch (or since 0 for plain seconds): a float of epoch seconds
    keeps only ~0.1 µs, so the fraction is read as digits, not through a float."""
    try:
        return round(float(v) * 1e9)
    except ValueError:
        pass
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
    return (whole.days * 86400 + whole.seconds) * 10**9 + whole.microseconds * 1000 + frac_ns


def _ordered(rows: list[_Row], fmt: TraceFormat) -> Trace:
    rows.sort(key=lambda r: r[0])  # stable: equal times keep file order
    t0 = rows[0][0]
    return Trace(tuple(TraceRow(t - t0, n_in, n_out, h) for t, n_in, n_out, h in rows), fmt)


def parse_azure(text: str, path: Path) -> Trace:
    """Rows of an Azure LLM inference trace CSV."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in AZURE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise _fail(path, "header", f"needs columns {', '.join(AZURE_COLUMNS)} (missing {missing})")
    rows: list[_Row] = []
    for rec in reader:
        where = f"line {reader.line_num}"
        t = _azure_time_ns(rec["TIMESTAMP"] or "", path, where)
        n_in = _length(rec["ContextTokens"], path, where, "ContextTokens")
        n_out = _length(rec["GeneratedTokens"], path, where, "GeneratedTokens")
        rows.append((t, n_in, n_out, ()))
    if not rows:
        raise _fail(path, "", "holds no requests")
    return _ordered(rows, "azure")


def parse_mooncake(text: str, path: Path) -> Trace:
    """Rows of a Mooncake trace (JSONL; ``timestamp`` in milliseconds)."""
    rows: list[_Row] = []
    for lineno, line in enumerate(text.splitlines(), 1):
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
        hashes = rec.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise _fail(path, where, "hash_ids must be a list of integers")
        n_in = _length(rec.get("input_length"), path, where, "input_length")
        n_out = _length(rec.get("output_length"), path, where, "output_length")
        rows.append((round(ts * 1e6), n_in, n_out, tuple(hashes)))
    if not rows:
        raise _fail(path, "", "holds no requests")
    return _ordered(rows, "mooncake")


def load_trace(path: Path, fmt: TraceFormat) -> Trace:
    """Read and parse a trace file; problems are one-line ``SpecError``s naming the line."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise SpecError(
            f"workload.trace.path: cannot read {path} ({exc.strerror or exc})"
        ) from None
    return parse_azure(text, path) if fmt == "azure" else parse_mooncake(text, path)


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

    @classmethod
    def from_spec(cls, spec: TraceSpec, *, prompt_format: PromptFormat, seed: int) -> TraceReplay:
        return cls(
            load_trace(spec.path, spec.format),
            prompt_format=prompt_format,
            seed=seed,
            time_scale=spec.time_scale,
            block_tokens=spec.block_tokens,
        )

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
        for row in self.trace.rows:
            yield round(row.offset_ns * self.time_scale)

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
        seen: set[int] = set()
        for i, row in enumerate(self.trace.rows):
            units = self._blocks_prompt(row, rng)
            shared = 0
            for j, h in enumerate(row.hash_ids):
                full = (j + 1) * self.block_tokens <= row.input_tokens
                if h not in seen or not full:
                    break
                shared += self.block_tokens
            seen.update(row.hash_ids)
            prompt: str | list[int] = (
                units if self.prompt_format == "token_ids" else " ".join(units)
            )
            yield RequestPlan(i, prompt, row.input_tokens, row.output_tokens, None, shared)
