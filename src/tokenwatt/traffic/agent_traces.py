"""Agent traces in the WEKA / kv-cache-tester JSON format, read as trace rows.

One JSON file per conversation (a folder of them, or one file)::

    {"id": ..., "block_size": 64, "hash_id_scope": "local" | "global",
     "requests": [{"t": 0.0, "type": "s" | "n", "in": 25259, "out": 86,
                   "hash_ids": [1, 2, ...], "api_time": 10.8, "think_time": 0.0}, ...]}

``t`` is seconds from the conversation's start; ``in``/``out`` are token counts; ``hash_ids``
name the prompt's ``block_size``-token blocks in order (equal ids = the same block, so two
requests share exactly the blocks their ids share); ``type`` is ``s`` (streamed) or ``n`` (not):
both are replayed as streamed requests. An entry of ``type`` ``subagent`` that carries its own
``requests`` list is a subagent: its requests join the conversation (their ``t`` on the same
clock), so its fan-out runs beside the parent as traced. With ``hash_id_scope: local`` (the
default) ids are the file's own, so conversation k's id h is made distinct from every other
file's; with ``global`` they are shared across files (a common system prompt and tools).

Conversation k (files in name order) starts ``stagger_s`` × k after the first: the published
sets record each conversation from its own zero. Every request keeps its conversation's order
and traced gaps (``t``, which holds the model's time, the tool calls and the user's thinking);
a probe's ``time_scale`` scales them all. Bounds: ``MAX_CONVERSATION_BYTES`` a file (one
conversation is parsed at a time; ``traffic.traces`` keeps only its rows' columns, at most
``MAX_TRACE_ROWS``). ``traffic.traces.load_trace(path, "weka")`` gives the ``Trace``, and
``Trace.ideal_hit_rate`` the prefix-cache hit rate its hashes allow.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tokenwatt.errors import SpecError
from tokenwatt.spec._base import MAX_TOKENS

__all__ = ["AGENT_BLOCK_TOKENS", "MAX_CONVERSATION_BYTES", "AgentRow", "agent_rows"]

# (where, arrival ns from the first conversation's start, in, out, hash ids, conversation)
AgentRow = tuple[str, int, int, int, list[int], int]

AGENT_BLOCK_TOKENS = 64  # the format's block size (kv-cache-tester's chunk size)
# A published conversation is 0.1-5 MB (hash ids of every request's whole prompt); past
# this a file is refused in one line rather than parsed.
MAX_CONVERSATION_BYTES = 64 << 20
_LOCAL_ID_BITS = 40  # conversation k's local id h becomes k · 2^40 + h
_MAX_NESTING = 8  # subagents of subagents, at most this deep
_MAX_ID = 2**63 - 1


def _fail(path: Path, where: str, what: str) -> SpecError:
    return SpecError(f"workload.trace.path: {path}{' ' + where if where else ''}: {what}")


def _length(v: Any, path: Path, where: str, name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise _fail(path, where, f"{name} must be a whole number >= 1, got {v!r}")
    if v > MAX_TOKENS:
        raise _fail(path, where, f"{name} {v} is more than {MAX_TOKENS:,} tokens")
    return v


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        if not files:
            raise SpecError(f"workload.trace.path: {path} holds no .json conversation files")
        return files
    return [path]


def _read(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_CONVERSATION_BYTES:
            raise _fail(path, "", f"is {size:,} bytes, over {MAX_CONVERSATION_BYTES:,} a file")
        obj = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise SpecError(
            f"workload.trace.path: cannot read {path} ({exc.strerror or exc})"
        ) from None
    except orjson.JSONDecodeError:
        raise _fail(path, "", "is not JSON (one conversation object a file)") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("requests"), list):
        raise _fail(path, "", "needs a 'requests' list (WEKA / kv-cache-tester format)")
    return obj


def _hashes(v: Any, path: Path, where: str, n_in: int, base: int) -> list[int]:
    limit = 1 << _LOCAL_ID_BITS if base >= 0 else _MAX_ID
    if not isinstance(v, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < limit for h in v
    ):
        raise _fail(path, where, f"hash_ids must be a list of integers in [0, {limit})")
    if len(v) > -(-n_in // AGENT_BLOCK_TOKENS):
        raise _fail(
            path, where, f"{len(v)} hash_ids for {n_in} input tokens ({AGENT_BLOCK_TOKENS} a block)"
        )
    return [base + h for h in v] if base > 0 else list(v)


def _requests(
    items: list[Any], path: Path, prefix: str, depth: int = 0
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, request) of a conversation, subagents' requests included, in file order."""
    for i, req in enumerate(items):
        where = f"{prefix}requests[{i}]"
        if not isinstance(req, dict):
            raise _fail(path, where, "is not an object")
        if req.get("type") == "subagent" and isinstance(req.get("requests"), list):
            if depth >= _MAX_NESTING:
                raise _fail(path, where, f"subagents nest deeper than {_MAX_NESTING}")
            yield from _requests(req["requests"], path, where + ".", depth + 1)
        else:
            yield where, req


def _conversation(path: Path, k: int, start_ns: int) -> Iterator[AgentRow]:
    obj = _read(path)
    block = obj.get("block_size", AGENT_BLOCK_TOKENS)
    if block != AGENT_BLOCK_TOKENS:
        raise _fail(path, "block_size", f"is {block!r}; this reader takes {AGENT_BLOCK_TOKENS}")
    scope = obj.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        raise _fail(path, "hash_id_scope", f"must be local or global, got {scope!r}")
    base = (k << _LOCAL_ID_BITS) if scope == "local" else -1
    for where, req in _requests(obj["requests"], path, ""):
        t = req.get("t")
        if not isinstance(t, int | float) or isinstance(t, bool) or not 0 <= t < 1e9:
            raise _fail(path, where, f"t (seconds from the conversation's start) is {t!r}")
        n_in = _length(req.get("in"), path, where, "in")
        out = req.get("out")
        n_out = 1 if out == 0 else _length(out, path, where, "out")  # 0: one token is sent
        hashes = _hashes(req.get("hash_ids", []), path, where, n_in, base)
        yield f"{path.name} {where}", start_ns + round(t * 1e9), n_in, n_out, hashes, k


def agent_rows(path: Path, *, stagger_s: float = 1.0) -> Iterator[AgentRow]:
    """The requests of the conversations under ``path`` (a folder of .json files, or one), one
    file at a time, each with its conversation's index (files in name order); problems are
    one-line ``SpecError``s naming the file and request."""
    if not (math.isfinite(stagger_s) and 0 <= stagger_s < 1e6):
        raise SpecError(f"agent trace stagger must be >= 0 seconds, got {stagger_s}")
    for k, file in enumerate(_files(path)):
        yield from _conversation(file, k, round(k * stagger_s * 1e9))
