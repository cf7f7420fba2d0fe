"""Speculative decoding in the simulated engine: acceptance draws and the drafter's bytes.

A decode step of a sequence is a verify step: the drafter proposed k tokens, the target
reads its weights once for all k + 1 positions of every sequence (MoE: the experts those
batch × (k + 1) tokens hit) and the KV cache once per sequence, and the first rejected
position ends the run: the step emits 1 + accepted tokens (fewer when the request reaches
its length), streamed as one chunk, as vLLM does. Acceptance: position i is accepted with
probability p_i given position i − 1 was (the spec's per-position profile), drawn per
sequence per step from the replica's seeded generator.

The drafter's bytes per step: ``ngram`` none; ``mtp`` k passes of the model's MTP layer
(``geometry.drafts``: its non-expert weights and the LM head each pass, and the distinct
experts the batch's tokens hit, drawn like any MoE layer's); ``draft`` k passes of the draft
model (its W(batch) and each sequence's draft KV read at its context).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tokenwatt.geometry.drafts import mtp_expert_bytes, mtp_fixed_bytes
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.simsettings import SpeculativeSettings

if TYPE_CHECKING:
    from tokenwatt.sim.routing import DistinctExperts

__all__ = ["Speculator", "StepSpeculation"]


class StepSpeculation:
    """What one step's verification did: sequences drafted, tokens proposed and accepted
    (per position) and emitted. Counts for the truth log and vLLM's spec-decode counters."""

    __slots__ = ("accepted", "accepted_per_pos", "drafts", "emitted", "proposed")

    def __init__(self, k: int) -> None:
        self.drafts = 0
        self.proposed = 0
        self.accepted = 0
        self.emitted = 0  # tokens the verify steps emitted (≤ drafts + accepted: length cap)
        self.accepted_per_pos = [0] * k


class Speculator:
    """One replica's drafter: draws acceptance and prices the drafter's passes."""

    def __init__(
        self,
        settings: SpeculativeSettings,
        geometry: ModelGeometry,
        draft: ModelGeometry | None,
        rng: np.random.Generator,
        mtp_routing: DistinctExperts | None,
    ) -> None:
        self.method = settings.method
        self.k = settings.num_tokens
        self.profile: npt.NDArray[np.float64] = np.asarray(settings.profile(), dtype=np.float64)
        self.rng = rng
        self.draft = draft
        self.mtp_fixed = round(mtp_fixed_bytes(geometry)) if self.method == "mtp" else 0
        self.mtp_expert = round(mtp_expert_bytes(geometry)) if self.method == "mtp" else 0
        self.mtp_routing = mtp_routing  # k "layers": one per MTP pass

    def accepted(self, seqs: int) -> npt.NDArray[np.int64]:
        """Accepted draft tokens of each of ``seqs`` sequences: the run of accepted positions
        before the first rejection."""
        ok = self.rng.random((seqs, self.k)) < self.profile
        return np.cumprod(ok, axis=1).sum(axis=1)  # type: ignore[no-any-return]

    def draft_bytes(self, contexts: list[int]) -> int:
        """Bytes the drafter read for a step whose decode sequences have these contexts."""
        batch = len(contexts)
        if batch == 0 or self.method == "ngram":
            return 0
        if self.method == "mtp":
            experts = 0
            if self.mtp_expert and self.mtp_routing is not None:
                experts = self.mtp_routing.total(batch) * self.mtp_expert
            return self.k * self.mtp_fixed + experts
        d = self.draft
        assert d is not None
        kv = sum(d.kv_bytes_read(c) for c in contexts)
        return round(self.k * (d.weight_bytes_per_step(batch) + kv))
