"""What the client cannot see of the engine but MBU needs: its chunk budget, its slot limit,
its drafter under speculative decoding and, when the engine exposes one, a measured
expert-load histogram (docs/methodology.md, "MBU: mixed steps", "MBU under speculative
decoding").

Declarations are checked before any load is sent: the expert-load file is read and checked
when the spec is parsed (``READ_FILES`` in the validation context: a result file's copy of
the spec is not re-read), and against the model (``check_against``) before the first request.
The file is read once; its load is built once per model.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from tokenwatt.errors import SpecError
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad, expert_load_from_counts, read_expert_counts
from tokenwatt.simsettings import SpeculativeSettings
from tokenwatt.spec._base import Section

__all__ = [
    "DEFAULT_CHUNK_BUDGET_TOKENS",
    "DRAFT_MODEL_METHODS",
    "READ_FILES",
    "DrafterSection",
    "EngineSection",
    "check_sim_drafter",
]

# Validation-context key: read the files a spec names (set by ``parse_spec``).
READ_FILES = "read_files"
# Drafters that read a second model's weights: a draft model, or an EAGLE head.
DRAFT_MODEL_METHODS = ("draft", "eagle", "eagle3")


class DrafterSection(Section):
    """The engine's speculative decoding as served (vLLM ``--speculative-config``, SGLang
    ``--speculative-algorithm``): what proposes the k draft tokens each verify step. MBU counts
    its bytes (``geometry.drafts``); any endpoint, the simulator's included, declares it here."""

    method: Literal["eagle", "eagle3", "draft", "mtp", "ngram"] = Field(
        description=(
            "eagle / eagle3: an EAGLE head; draft: a separate draft model; mtp: the model's own "
            "MTP layers; ngram: prompt lookup (reads no weights)"
        )
    )
    num_tokens: int = Field(ge=1, le=16, description="k: tokens proposed per verify step")
    draft_model: str | None = Field(
        None,
        description=(
            "eagle, eagle3, draft: the draft model or EAGLE head (a preset, config.json or "
            "folder), read k times per step"
        ),
    )

    @model_validator(mode="after")
    def _draft_model_where_needed(self) -> Self:
        needs = self.method in DRAFT_MODEL_METHODS
        if needs and self.draft_model is None:
            raise ValueError(
                f"method {self.method} reads a draft model's weights: give "
                "engine.drafter.draft_model (a preset, config.json or folder)"
            )
        if not needs and self.draft_model is not None:
            raise ValueError(f"method {self.method} has no draft model: remove draft_model")
        return self


# vLLM V1's max_num_batched_tokens for the OpenAI server on data-centre GPUs (8192; 2048 was
# the V0 / offline default). SGLang's chunked_prefill_size is 8192 on large GPUs as well.
DEFAULT_CHUNK_BUDGET_TOKENS = 8192


class EngineSection(Section):
    max_num_batched_tokens: int = Field(
        DEFAULT_CHUNK_BUDGET_TOKENS,
        ge=1,
        description=(
            "tokens per engine step shared by decodes and prompt chunks (vLLM "
            "max_num_batched_tokens, SGLang chunked_prefill_size); default 8192, vLLM V1's "
            "for the OpenAI server on data-centre GPUs"
        ),
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description=(
            "sequences per replica per step (vLLM max_num_seqs, llama.cpp -np slots); a "
            "measured batch above it means the window was not steady and MBU is withheld"
        ),
    )
    expert_load_file: str | None = Field(
        None,
        description=(
            'measured routing: JSON {"counts": [[tokens per expert] per MoE layer]} from the '
            "engine's expert-load statistics; used in W(B) instead of uniform routing"
        ),
    )
    routing_zipf: float | None = Field(
        None,
        ge=0,
        le=4,
        description=(
            "MoE without a measured expert load: a Zipf exponent you assert the router stays "
            "within; the routing band's lower end is then the value under this skew instead of "
            "the fewest experts any routing reads (the default: a true bound, wider)"
        ),
    )
    drafter: DrafterSection | None = Field(
        None,
        description=(
            "speculative decoding as the engine serves it (method, num_tokens, draft_model): "
            "MBU counts steps and the drafter's bytes; without it speculation seen in the "
            "chunks is flagged drafter_bytes_unknown and MBU reads low"
        ),
    )
    _expert_counts: list[list[float]] | None = PrivateAttr(None)
    _expert_loads: dict[tuple[int, int, int], ExpertLoad] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _read_expert_load_file(self, info: ValidationInfo) -> Self:
        """Read the expert-load file when the spec is parsed (not when a result is loaded)."""
        if self.expert_load_file is not None and (info.context or {}).get(READ_FILES):
            self._expert_counts = read_expert_counts(self.expert_load_file)
        return self

    def expert_load(self, geometry: ModelGeometry) -> ExpertLoad | None:
        """The measured expert load fitted to ``geometry`` (None: no file, or a dense model);
        the file read at most once, the load built once per model shape."""
        if self.expert_load_file is None or not geometry.is_moe:
            return None
        shape = (geometry.moe_layers, geometry.experts, geometry.experts_per_token)
        if shape not in self._expert_loads:
            if self._expert_counts is None:
                self._expert_counts = read_expert_counts(self.expert_load_file)
            self._expert_loads[shape] = expert_load_from_counts(
                self._expert_counts, source=self.expert_load_file, layers=shape[0],
                experts=shape[1], k=shape[2],
            )  # fmt: skip
        return self._expert_loads[shape]

    def check_against(self, geometry: ModelGeometry) -> None:
        """The declarations against the model, before any load: the expert load's shape, and
        MTP drafting only on a model with MTP layers (one-line SpecError)."""
        self.expert_load(geometry)
        if self.drafter is not None and self.drafter.method == "mtp" and not geometry.mtp_params:
            raise SpecError(
                f"engine.drafter: method mtp, but {geometry.name} has no MTP layers "
                "(num_nextn_predict_layers); declare the drafter the engine runs"
            )


def check_sim_drafter(declared: DrafterSection | None, sim: SpeculativeSettings | None) -> None:
    """On the simulator ``engine.drafter`` and ``sim.speculative`` (which adds the acceptance
    the simulator draws) must describe one drafter; an EAGLE head runs there as a draft
    model. ``sim``: None when the endpoint is not the simulator or it has no speculation."""
    if declared is None:
        return
    if sim is None:
        raise ValueError(
            f"engine.drafter ({declared.method}) on the simulator: give sim.speculative for the "
            "same drafter (METHOD:K:ACCEPTANCE, the acceptance the simulator draws)"
        )
    method = "draft" if declared.method in DRAFT_MODEL_METHODS else declared.method
    ours = (method, declared.num_tokens, declared.draft_model)
    theirs = (sim.method, sim.num_tokens, sim.draft_model)
    if ours != theirs:
        raise ValueError(
            f"engine.drafter {ours} and sim.speculative {theirs} (method, k, draft model) "
            "describe different drafters: make them one"
        )
