"""MBU of one probe window: the package's one entry point (``window_mbu``).

A window is what the client measured over it (its records, the counted ones, T, τ) plus the
probe's records swept once (``spans.RequestSweep``), which a window and each of its interval
blocks read. The node is the model, the replicas and GPUs, their rated bandwidth and what
the spec says of the engine. From these: the KV reads of the counted requests, the measured
regime (``mixed_steps.regime_from_records``), the formula with its refinements
(``formula.compute_mbu``: mixed steps, routing band, speculation through the same bytes per
step), then the stalls of preempted streams (``kv_pressure``: τ and the decode batch without
them, the uncorrected figure as the band's other end) and the coalesced-chunks flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.metrics.mbu.formula import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.kv_pressure import mark_kv_pressure, stream_stalls
from tokenwatt.metrics.mbu.mixed_steps import StepRegime, regime_from_records
from tokenwatt.metrics.mbu.spans import RequestSweep
from tokenwatt.metrics.mbu.spec_mbu import StepBasis
from tokenwatt.metrics.prompt_recompute import mark_recompute, prompt_recompute
from tokenwatt.metrics.spec_chunks import ChunkedSteps, chunked_note
from tokenwatt.records import RequestRecord
from tokenwatt.result import Mbu, StepSummary
from tokenwatt.spec import EngineSection

__all__ = ["MbuNode", "MbuWindow", "window_mbu"]


@dataclass(frozen=True, slots=True)
class MbuWindow:
    """One window of a probe (the whole window, or one of its interval blocks)."""

    records: Sequence[RequestRecord]  # every request alive in the window
    counted: Sequence[RequestRecord]  # the window's counted requests (T, τ, context)
    window_start_ns: int
    window_end_ns: int
    output_tokens_per_s: float
    itl_token_weighted_s: float
    multi_token_chunks: bool
    sweep: RequestSweep  # the probe's records swept once (shared by its blocks)
    steps: StepSummary  # the counted requests' steps as their chunks show them (``metrics.steps``)
    # the routing the engine counted over the probe (its per-expert counters), before the
    # spec's ``engine.expert_load_file``
    expert_load: ExpertLoad | None = None
    # verify steps the engine coalesced into one chunk, counted again (``metrics.spec_chunks``)
    chunked: ChunkedSteps | None = None

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """(prompt length, output tokens) of each counted request with a prompt length."""
        return [
            (r.prompt_tokens, r.output_tokens) for r in self.counted if r.prompt_tokens is not None
        ]


@dataclass(frozen=True, slots=True)
class MbuNode:
    """The node MBU divides by, the model it reads and what the spec says of its engine."""

    geometry: ModelGeometry
    replicas: int
    gpus: int
    bandwidth_bytes_per_s: float  # rated, one GPU
    engine: EngineSection


def _regime(w: MbuWindow, node: MbuNode) -> StepRegime | None:
    eng = node.engine
    return regime_from_records(
        w.records, w.counted, w.window_start_ns, w.window_end_ns, replicas=node.replicas,
        chunk_budget_tokens=eng.max_num_batched_tokens, slot_limit=eng.max_num_seqs,
        expert_load=w.expert_load if w.expert_load is not None else eng.expert_load(node.geometry),
        routing_zipf=eng.routing_zipf,
        sweep=w.sweep,
    )  # fmt: skip


def window_mbu(
    w: MbuWindow,
    node: MbuNode,
    *,
    basis: StepBasis | None = None,
    kv_stalls: bool = True,
    block: bool = False,
) -> Mbu:
    """MBU of the window (module doc). ``basis``: speculative decoding's steps and drafter
    (``spec_mbu``; its regime is the window's); ``kv_stalls=False`` does not look for
    preempted streams (a block of a window without any); ``block=True`` computes the figures
    only (no routing band or skew comparison: a block's routing is the window's)."""
    context, kv_per_token = kv_read_per_output_token(node.geometry, w.pairs)
    regime = _regime(w, node)
    mbu_at = partial(
        compute_mbu, node.geometry, output_tokens_per_s=w.output_tokens_per_s,
        replicas=node.replicas, gpus=node.gpus, bandwidth_bytes_per_s=node.bandwidth_bytes_per_s,
        mean_context_per_token=context, kv_bytes_per_output_token=kv_per_token,
        multi_token_chunks=w.multi_token_chunks,
        steps=None if basis is None else replace(basis, regime=regime),
        routing_detail=not block,
    )  # fmt: skip
    raw = _coalesced(
        mbu_at(itl_token_weighted_s=w.itl_token_weighted_s, regime=regime), w.steps, w.chunked
    )
    if not kv_stalls:  # the caller knows there are none to correct (a block of a clean window)
        return raw
    stalls = stream_stalls(w.records, w.counted, w.window_start_ns, w.window_end_ns, node.replicas)
    if not stalls.seen:  # no stream fell silent: prompts prefilled again, maybe
        return mark_recompute(raw, prompt_recompute(w.records, w.counted))
    # preempted streams' silences are not decode time: τ' and the window's decode batch
    # without them (kv_pressure)
    if regime is not None and regime.decode_batch is not None:
        window_s = (w.window_end_ns - w.window_start_ns) / 1e9
        less = stalls.stalled_in_window_s / window_s / node.replicas
        regime = replace(regime, decode_batch=max(0.0, regime.decode_batch - less))
    if regime is not None:  # a stalled stream's silence is one gap, not steps: τ' instead
        regime = replace(regime, step_law=None)
    tau = stalls.corrected_tau(w.itl_token_weighted_s)
    fixed = _coalesced(mbu_at(itl_token_weighted_s=tau, regime=regime), w.steps, w.chunked)
    return mark_kv_pressure(fixed, pressure=stalls, uncorrected=raw)


def _coalesced(mbu: Mbu, figures: StepSummary, chunked: ChunkedSteps | None = None) -> Mbu:
    """Flag ``coalesced_chunks`` when the engine sent several steps in one chunk; verify steps
    counted again (``chunked``) say how, with the direction."""
    if chunked is not None:
        flags = mbu.flags.model_copy(update={"coalesced_chunks": True})
        own = [n for n in mbu.notes if n not in mbu.flags.notes()]
        note = chunked_note(chunked, figures.acceptance_length)
        return mbu.model_copy(update={"flags": flags, "notes": [*own, note]})
    if not figures.coalesced:
        return mbu
    flags = mbu.flags.model_copy(update={"coalesced_chunks": True})
    return mbu.model_copy(update={"flags": flags, "notes": [*mbu.notes, *flags.notes()[-1:]]})
