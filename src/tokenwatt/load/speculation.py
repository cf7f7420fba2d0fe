"""A probe's steps and, under speculative decoding, the basis of MBU from steps.

The drafter is declared in the spec's ``engine.drafter`` for any endpoint, the simulator's
included (``declared_drafter``); a simulator spec that gives only ``sim.speculative`` declares
that drafter. Otherwise speculation is detected from the chunks (``metrics.steps``), with the
drafter unknown. Coalesced chunks (several steps per chunk) leave MBU on the seed's formula
with the ``coalesced_chunks`` flag: the client cannot count steps then, the engine's counters
can.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.mbu import kv_read_per_output_token
from tokenwatt.metrics.mbu.mixed_steps import StepRegime
from tokenwatt.metrics.mbu.spec_mbu import Drafter, StepBasis
from tokenwatt.metrics.steps import step_figures
from tokenwatt.records import RequestRecord
from tokenwatt.result import StepSummary
from tokenwatt.spec import BenchSpec
from tokenwatt.spec.engine import DRAFT_MODEL_METHODS, DrafterSection

__all__ = ["declared_drafter", "draft_geometry", "probe_steps", "step_basis"]


def declared_drafter(spec: BenchSpec) -> DrafterSection | None:
    """The drafter the spec declares: ``engine.drafter`` for any endpoint; for the simulator
    without it, the drafter of ``sim.speculative`` (the spec's check keeps the two equal
    where both are given)."""
    if spec.engine.drafter is not None:
        return spec.engine.drafter
    sim = spec.sim.speculative if spec.endpoint.is_sim else None
    if sim is None:
        return None
    return DrafterSection(method=sim.method, num_tokens=sim.num_tokens, draft_model=sim.draft_model)


@lru_cache(maxsize=8)
def draft_geometry(source: str) -> ModelGeometry:
    """The draft model's geometry, parsed once per run (every probe and block reuses it)."""
    return load_geometry(source)


def probe_steps(counted: Sequence[RequestRecord], declared: DrafterSection | None) -> StepSummary:
    """The counted requests' steps (``declared``: the spec's drafter, if any)."""
    return step_figures(counted, declared_k=None if declared is None else declared.num_tokens)


def step_basis(
    figures: StepSummary,
    declared: DrafterSection | None,
    pairs: Sequence[tuple[int, int]],
    regime: StepRegime | None,
) -> StepBasis | None:
    """What MBU needs to count steps; None without speculation or when chunks coalesce.

    ``pairs``: (prompt length, output tokens) of the counted requests, for a draft model's
    own KV reads."""
    if figures.coalesced or figures.speculation == "none":
        return None
    if declared is not None:
        draft: ModelGeometry | None = None
        draft_kv = 0.0
        if declared.method in DRAFT_MODEL_METHODS and declared.draft_model is not None:
            draft = draft_geometry(declared.draft_model)
            draft_kv = kv_read_per_output_token(draft, pairs)[1]
        drafter = Drafter(declared.method, declared.num_tokens, draft)
        return StepBasis(figures, drafter, draft_kv, regime)
    k = max(1, figures.max_chunk_tokens - 1)
    return StepBasis(figures, Drafter("unknown", k, source="detected"), 0.0, regime)
