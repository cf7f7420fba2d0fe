"""Compact record batches: how a worker process hands finished requests to the coordinator.

A worker streams thousands of tokens per second; pickling each ``RequestRecord`` with its two
per-chunk lists would build and tear down millions of Python ints on both sides of the pipe.
A batch is instead one bytes object:

    header  "TWRB" | version u16 | record count u32 | scalar-JSON length u32
    scalars orjson list, one object per record: every field except the chunk lists
    counts  int64[count]    chunks per record
    times   int64[Σcounts]  chunk arrival stamps (monotonic ns), records back to back
    tokens  int32[Σcounts]  tokens per chunk

so the per-token data crosses as two flat arrays that ``array.frombytes`` reads in one copy,
in the records' own typecodes (``records.STAMP_TYPECODE``, ``TOKENS_TYPECODE``). Unpacking
gives records equal (``==``) to the ones packed. Version 2: tokens as int32 (were int64).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import orjson

from tokenwatt.records import STAMP_TYPECODE, TOKENS_TYPECODE, RequestRecord

__all__ = ["WireError", "pack_records", "unpack_records"]

_MAGIC = b"TWRB"
_VERSION = 2
_HEAD = struct.Struct("<4sHII")
_LISTS = ("chunk_ns", "chunk_tokens")
_SCALARS = tuple(f.name for f in fields(RequestRecord) if f.name not in _LISTS)


class WireError(ValueError):
    """A batch that is not one this module wrote (truncated, other version, other layout)."""


def pack_records(records: Sequence[RequestRecord]) -> bytes:
    """One batch holding ``records`` (order kept)."""
    scalars = orjson.dumps([{k: getattr(r, k) for k in _SCALARS} for r in records])
    counts = array("q", (len(r.chunk_ns) for r in records))
    times = array(STAMP_TYPECODE)
    tokens = array(TOKENS_TYPECODE)
    for r in records:
        times.extend(r.chunk_ns)
        tokens.extend(r.chunk_tokens)
    if len(times) != len(tokens):
        raise WireError("chunk_ns and chunk_tokens differ in length in some record")
    head = _HEAD.pack(_MAGIC, _VERSION, len(records), len(scalars))
    return b"".join((head, scalars, counts.tobytes(), times.tobytes(), tokens.tobytes()))


def unpack_records(batch: bytes) -> list[RequestRecord]:
    """The records of one batch written by :func:`pack_records`."""
    if len(batch) < _HEAD.size:
        raise WireError(f"batch of {len(batch)} bytes is shorter than its header")
    magic, version, n, n_json = _HEAD.unpack_from(batch)
    if magic != _MAGIC or version != _VERSION:
        raise WireError(f"not a record batch of version {_VERSION} (magic {magic!r} v{version})")
    pos = _HEAD.size
    scalars: list[dict[str, Any]] = orjson.loads(batch[pos : pos + n_json])
    pos += n_json
    counts = array("q")
    counts.frombytes(batch[pos : pos + 8 * n])
    pos += 8 * n
    total = sum(counts)
    times, tokens = array(STAMP_TYPECODE), array(TOKENS_TYPECODE)
    end_times = pos + times.itemsize * total
    times.frombytes(batch[pos:end_times])
    tokens.frombytes(batch[end_times : end_times + tokens.itemsize * total])
    if (
        len(scalars) != n
        or len(tokens) != total
        or end_times + tokens.itemsize * total != len(batch)
    ):
        raise WireError("record batch is truncated or its counts do not match its arrays")
    out: list[RequestRecord] = []
    at = 0
    for d, c in zip(scalars, counts, strict=True):
        rec = RequestRecord(**d)
        rec.chunk_ns = times[at : at + c]
        rec.chunk_tokens = tokens[at : at + c]
        at += c
        out.append(rec)
    return out
