"""A probe's steps and, under speculative decoding, the basis of MBU from steps.

Declared speculation is the simulator's ``sim.speculative`` (when the endpoint is ``sim``);
otherwise speculation is detected from the chunks (``metrics.steps``), with the drafter
unknown. Coalesced chunks (several steps per chunk) leave MBU on the seed's formula with the
``coalesced_chunks`` flag: the client cannot count steps then, the engine's counters can.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.mbu import kv_read_per_output_token
from tokenwatt.metrics.mixed_steps import StepRegime
from tokenwatt.metrics.spec_mbu import Drafter, StepBasis
from tokenwatt.metrics.steps import step_figures
from tokenwatt.records import RequestRecord
from tokenwatt.result import StepSummary
from tokenwatt.simsettings import SpeculativeSettings

__all__ = ["probe_steps", "step_basis"]


def probe_steps(
    counted: Sequence[RequestRecord], declared: SpeculativeSettings | None
) -> StepSummary:
    """The counted requests' steps (``declared``: the spec's speculation, if any)."""
    return step_figures(counted, declared_k=None if declared is None else declared.num_tokens)


def step_basis(
    figures: StepSummary,
    declared: SpeculativeSettings | None,
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
        if declared.method == "draft" and declared.draft_model is not None:
            draft = load_geometry(declared.draft_model)
            draft_kv = kv_read_per_output_token(draft, pairs)[1]
        drafter = Drafter(declared.method, declared.num_tokens, draft)
        return StepBasis(figures, drafter, draft_kv, regime)
    k = max(1, figures.max_chunk_tokens - 1)
    return StepBasis(figures, Drafter("unknown", k, source="detected"), 0.0, regime)
