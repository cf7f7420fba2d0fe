"""Verify steps coalesced into one chunk: told from accepted tokens, and counted again.

Under speculative decoding the client counts one engine step per SSE chunk (``metrics.steps``).
An engine that sends the tokens of c verify steps as one chunk (a stream interval, a server
that batches its writes) breaks that: the client sees c× too few steps, so steps/s reads low,
the acceptance length (tokens ÷ chunks) c× high, and MBU from steps low. Chunk sizes still
vary (acceptance is random), so the equal-sizes rule of plain coalescing does not fire.

Evidence, strongest first:

- **the engine's spec-decode counters** (vLLM's ``spec_decode_num_drafts``/``…accepted``,
  scraped by the witness): its acceptance length 1 + accepted ÷ drafts is per verify step; the
  client's tokens ÷ chunks above it by more than ``ENGINE_RATIO`` means c = client ÷ engine
  steps per chunk, and the client's decode tokens ÷ the engine's acceptance length are the
  steps (the count used);
- **the smallest chunk**: a verify step whose first draft token is rejected emits one token,
  which happens at every acceptance below 1, so over ``MIN_CHUNKS`` non-final decode chunks a
  smallest chunk of m ≥ 2 tokens means chunks hold several steps; each step emits at least one
  token, so a chunk holds at most m steps when the engine sends a fixed number per chunk:
  steps are counted as m per chunk, which reads MBU high where c < m, and the note says so;
- **declared k**: a chunk above k + 1 tokens cannot be one verify step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from tokenwatt.records import RequestRecord
from tokenwatt.result import StepSummary

__all__ = [
    "ENGINE_RATIO",
    "MIN_CHUNKS",
    "ChunkedSteps",
    "chunked_note",
    "coalesced_verify_steps",
    "recounted",
]

MIN_CHUNKS = 200  # non-final decode chunks before the smallest one is evidence
ENGINE_RATIO = 1.15  # client tokens per chunk above the engine's acceptance length by this


@dataclass(frozen=True, slots=True)
class ChunkedSteps:
    """Several verify steps per chunk: how many, from which evidence."""

    decode_steps: float  # the verify steps (one per sequence) the chunks hold
    steps_per_chunk: float  # decode steps ÷ decode chunks
    source: Literal["engine", "smallest chunk"]
    engine_acceptance_length: float | None = None
    smallest_chunk_tokens: int = 0  # the smallest non-final decode chunk (client evidence)


def _decode_chunks(records: Iterable[RequestRecord]) -> list[list[int]]:
    """Tokens of each request's decode chunks (the first chunk is the prefill step's)."""
    return [
        list(r.chunk_tokens[1:])
        for r in records
        if r.ok and len(r.chunk_tokens) == len(r.chunk_ns) and len(r.chunk_tokens) > 1
    ]


def _steps_at(chunks: list[list[int]], c: int) -> float:
    """Decode steps when every non-final chunk holds c steps; a request's last chunk holds
    what is left, fewer: its tokens ÷ the tokens per step of the full chunks, within [1, c]."""
    full = [n for req in chunks for n in req[:-1]]
    per_step = sum(full) / (c * len(full)) if full else 1.0
    return sum(c * (len(req) - 1) + min(c, max(1.0, req[-1] / per_step)) for req in chunks)


def coalesced_verify_steps(
    records: Iterable[RequestRecord],
    figures: StepSummary,
    *,
    declared_k: int | None,
    engine_acceptance_length: float | None,
) -> ChunkedSteps | None:
    """Chunks that carry several verify steps, or None (module doc: the three kinds of
    evidence). Plain coalescing without speculation (equal sizes) is left to
    ``metrics.steps``."""
    client = figures.acceptance_length
    if figures.speculation == "none" or client is None:
        return None
    engine = engine_acceptance_length
    chunks = figures.decode_steps
    if engine is not None and engine >= 1.0:
        if client > ENGINE_RATIO * engine:
            steps = figures.decode_tokens / engine
            return ChunkedSteps(steps, steps / chunks, "engine", engine)
        return None  # the engine's count agrees with the chunks
    decode = _decode_chunks(records)
    sizes = [n for req in decode for n in req[:-1]]
    smallest = min(sizes, default=1)
    many = len(sizes) >= MIN_CHUNKS and smallest >= 2
    too_big = declared_k is not None and figures.max_chunk_tokens > declared_k + 1
    if not (many or too_big) or not chunks:
        return None
    per = max(smallest, 2 if too_big else 1)
    steps = _steps_at(decode, per)
    return ChunkedSteps(steps, steps / chunks, "smallest chunk", smallest_chunk_tokens=per)


def recounted(figures: StepSummary, chunked: ChunkedSteps) -> StepSummary:
    """``figures`` with the verify steps counted again: acceptance length and ITL per chunk
    from them, steps/s, and the largest chunk's tokens per step (what an undeclared drafter's k
    is read from). ``coalesced`` is cleared: the steps are counted."""
    c = chunked.steps_per_chunk
    steps = chunked.decode_steps
    decode_s = (figures.itl_chunk_s or 0.0) * figures.decode_steps
    return figures.model_copy(
        update={
            "decode_steps": max(1, round(steps)),
            "acceptance_length": figures.decode_tokens / steps if steps else None,
            "itl_chunk_s": decode_s / steps if steps else None,
            "steps_per_s": steps / decode_s if decode_s > 0 else None,
            "max_chunk_tokens": max(1, math.ceil(figures.max_chunk_tokens / c)),
            "coalesced": False,
        }
    )


def chunked_note(chunked: ChunkedSteps, client_acceptance: float | None) -> str:
    """What the flag means for the figure, the direction first."""
    c = chunked.steps_per_chunk
    seen = "" if client_acceptance is None else f" (tokens per chunk {client_acceptance:.2f})"
    head = (
        "chunks carry several verify steps: one step per chunk would understate steps/s and "
        f"overstate the acceptance length{seen}, so MBU would read low; "
    )
    if chunked.source == "engine":
        return head + (
            f"steps counted from the engine's spec-decode counters (acceptance length "
            f"{chunked.engine_acceptance_length:.2f}, {c:.2f} steps per chunk)"
        )
    return head + (
        f"the smallest chunk holds {chunked.smallest_chunk_tokens} tokens, so each full chunk "
        f"is counted as that many steps ({c:.2f} per chunk with the last chunks; at most "
        "the steps of a chunk: MBU reads high if chunks hold fewer); scrape the engine's "
        "spec-decode counters for the count"
    )
