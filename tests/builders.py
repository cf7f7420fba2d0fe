"""Builders shared by the tests: the standard simulator configuration and streamed records.

Fixtures built on them live in ``conftest.py``; test modules import these functions directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.records import RequestRecord
from tokenwatt.sim import SimConfig

SIM_MODEL = "sim-8b"  # the name the standard simulator serves its model under


def sim8b_config(**kw: Any) -> SimConfig:
    """The simulator most client and engine tests talk to: Llama-3.1-8B on one H100 SXM, served
    as ``sim-8b``, a 4,096-token context, no prefill cost (a request's first token comes one
    decode step after it arrives). ``kw`` overrides or adds ``SimConfig`` fields."""
    base: dict[str, Any] = {
        "geometry": load_geometry("llama-3.1-8b"),
        "accelerator": get_accelerator("h100-sxm"),
        "served_model_name": SIM_MODEL,
        "max_model_len": 4096,
        "prefill_cost": False,
    }
    return SimConfig(**(base | kw))


def streamed_record(
    rid: int,
    chunk_ns: Sequence[int],
    *,
    sent_ns: int,
    prompt_tokens: int,
    tokens: Sequence[int] | None = None,
    max_tokens: int | None = None,
    saw_done: bool = False,
) -> RequestRecord:
    """A request that ended well, as the client records it: sent (and scheduled) at
    ``sent_ns``, one content chunk at each of ``chunk_ns`` carrying ``tokens`` (default one
    token each); first token at the first chunk, end and done at the last; the server's counts
    are the prompt and the tokens streamed. ``max_tokens`` defaults to the chunks' count."""
    chunk_tokens = list(tokens) if tokens is not None else [1] * len(chunk_ns)
    return RequestRecord(
        request_id=rid,
        scheduled_ns=sent_ns,
        prompt_tokens_client=prompt_tokens,
        max_tokens=len(chunk_ns) if max_tokens is None else max_tokens,
        sent_ns=sent_ns,
        first_token_ns=chunk_ns[0],
        end_ns=chunk_ns[-1],
        done_ns=chunk_ns[-1],
        chunk_ns=list(chunk_ns),  # type: ignore[arg-type]
        chunk_tokens=chunk_tokens,  # type: ignore[arg-type]
        prompt_tokens=prompt_tokens,
        completion_tokens=sum(chunk_tokens),
        saw_done=saw_done,
    )


def ttft_record(i: int, ttft_s: float) -> RequestRecord:
    """Request ``i``, scheduled at i seconds, two output tokens: its TTFT as given, its TPOT
    10 ms (the sequential stop's hooks read these)."""
    t0 = 1_000_000_000 * i
    first = t0 + round(ttft_s * 1e9)
    return RequestRecord(
        request_id=i,
        prompt_tokens_client=8,
        max_tokens=2,
        scheduled_ns=t0,
        sent_ns=t0,
        first_token_ns=first,
        done_ns=first + 10_000_000,
        chunk_ns=[first, first + 10_000_000],
        chunk_tokens=[1, 1],
    )
