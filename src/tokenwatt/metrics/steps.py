"""Engine steps seen from the client: one SSE chunk per step per sequence.

vLLM and SGLang stream each engine step's new tokens of a sequence as one chunk. Without
speculation a step emits one token, so chunks, tokens and steps coincide; with speculative
decoding a verify step emits 1 + (accepted draft tokens), so the tokens of one chunk count
the step's acceptance. Per request, from its chunk stamps and tokens per chunk:

    decode steps   = chunks − 1            (the first chunk comes from the prefill step)
    decode tokens  = tokens − tokens of the first chunk
    acceptance length α = decode tokens ÷ decode steps       (vLLM: 1 + accepted ÷ drafts)
    ITL per chunk  = (last − first chunk) ÷ decode steps     (one engine step)
    ITL per token  = (last − first chunk) ÷ decode tokens    (TPOT, the seed's τ)
    steps/s        = 1 ÷ ITL per chunk

Sums over requests give the probe's figures (token- and step-weighted, as the seed's τ).

Engines that send one event per token even under speculation (llama.cpp's llama-server
writes each accepted token as its own SSE event, back to back) are read with ``burst_ns``:
events that arrive within ``burst_ns`` of the previous one belong to the same step, so a
step is a burst of events and its tokens their sum (off by default: vLLM and SGLang send one
chunk per step, and a stalled-then-bursting stream must not pass for speculation).

Two ways chunks stop being steps, told apart by the sizes of the non-final decode chunks:
speculation makes them vary (acceptance is random); an engine that coalesces a fixed number
of steps per chunk (a stream interval, llama.cpp's ``n_probs``-free batching, the simulator's
``tokens_per_chunk``) makes them all equal. Equal sizes above one are read as coalescing:
then chunks are not steps, ``coalesced`` is set and the engine's counters must speak
instead. Declared speculation with a chunk above k + 1 tokens is coalescing too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tokenwatt.metrics.stats import interpolated_quantile
from tokenwatt.records import RequestRecord
from tokenwatt.result import StepSummary

__all__ = ["RequestSteps", "request_steps", "step_figures"]

Speculation = Literal["none", "detected", "declared"]


@dataclass(frozen=True, slots=True)
class RequestSteps:
    """One request's decode steps as its chunks show them."""

    decode_steps: int
    decode_tokens: int
    first_tokens: int  # tokens of the first chunk (the prefill step's)
    decode_s: float
    sizes: frozenset[int]  # tokens per chunk of its non-final decode chunks
    max_chunk_tokens: int

    @property
    def acceptance_length(self) -> float | None:
        return self.decode_tokens / self.decode_steps if self.decode_steps else None


def request_steps(rec: RequestRecord, burst_ns: int | None = None) -> RequestSteps | None:
    """The request's steps; None when it has fewer than two steps (no decode step seen).
    ``burst_ns``: events this close to the previous one are the same step (module doc)."""
    stamps: Sequence[int] = rec.chunk_ns
    tokens: Sequence[int] = rec.chunk_tokens
    if len(tokens) != len(stamps):
        return None
    if burst_ns is not None:
        stamps, tokens = _bursts(stamps, tokens, burst_ns)
    if len(stamps) < 2:
        return None
    decode_tokens = sum(tokens) - tokens[0]
    return RequestSteps(
        decode_steps=len(stamps) - 1,
        decode_tokens=decode_tokens,
        first_tokens=tokens[0],
        decode_s=(stamps[-1] - stamps[0]) / 1e9,
        sizes=frozenset(tokens[1:-1]),
        max_chunk_tokens=max(tokens),
    )


def _bursts(
    stamps: Sequence[int], tokens: Sequence[int], burst_ns: int
) -> tuple[list[int], list[int]]:
    """Events grouped into steps: a group is stamped by its last event (the step's end)."""
    out_ns: list[int] = []
    out_tokens: list[int] = []
    for i, (t, n) in enumerate(zip(stamps, tokens, strict=True)):
        if i and t - stamps[i - 1] <= burst_ns:
            out_ns[-1] = t
            out_tokens[-1] += n
        else:
            out_ns.append(t)
            out_tokens.append(n)
    return out_ns, out_tokens


def step_figures(
    records: Iterable[RequestRecord],
    *,
    declared_k: int | None = None,
    burst_ns: int | None = None,
) -> StepSummary:
    """Steps, acceptance length and ITL per chunk and per token over ``records`` (the ok
    ones). ``declared_k``: tokens the engine proposes per step, when the spec says;
    ``burst_ns``: group per-token events into steps (module doc)."""
    per = [s for r in records if r.ok and (s := request_steps(r, burst_ns)) is not None]
    steps = sum(p.decode_steps for p in per)
    tokens = sum(p.decode_tokens for p in per)
    decode_s = sum(p.decode_s for p in per)
    sizes: set[int] = set()
    for p in per:
        sizes |= p.sizes
    total = sum(p.decode_tokens + p.first_tokens for p in per)
    biggest = max((p.max_chunk_tokens for p in per), default=0)
    multi = bool(sizes) and max(sizes) > 1
    if declared_k is not None:
        kind: Speculation = "declared"
        coalesced = biggest > declared_k + 1
    else:
        kind = "detected" if multi and len(sizes) > 1 else "none"
        coalesced = multi and len(sizes) == 1
    alphas = sorted(a for p in per if (a := p.acceptance_length) is not None)
    return StepSummary(
        requests=len(per),
        tokens=total,
        decode_steps=steps,
        decode_tokens=tokens,
        acceptance_length=tokens / steps if steps else None,
        itl_chunk_s=decode_s / steps if steps else None,
        itl_token_s=decode_s / tokens if tokens else None,
        steps_per_s=steps / decode_s if decode_s > 0 else None,
        max_chunk_tokens=biggest,
        speculation=kind,
        coalesced=coalesced,
        acceptance_length_p50=interpolated_quantile(alphas, 0.5, presorted=True),
    )
