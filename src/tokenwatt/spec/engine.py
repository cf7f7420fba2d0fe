"""What the client cannot see of the engine but MBU needs: its chunk budget, its slot limit
and, when the engine exposes one, a measured expert-load histogram (docs/methodology.md,
"MBU: mixed steps")."""

from __future__ import annotations

from pydantic import Field

from tokenwatt.spec._base import Section

__all__ = ["DEFAULT_CHUNK_BUDGET_TOKENS", "EngineSection"]

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
            "MoE without a measured expert load: the Zipf exponent of the routing band's lower "
            "bound (MBU is printed as the uniform value, an upper bound, with the value under "
            "this skew beside it); default 1.2, the documented reference skew"
        ),
    )
