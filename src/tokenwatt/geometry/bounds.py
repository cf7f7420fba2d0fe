"""Physical bounds on every geometry source (config.json, GGUF, safetensors headers).

Why one module: a hostile or corrupted file must be refused by the same numbers whatever its
format; a bound is far above any released model and far below what a file can claim
(docs/methodology.md, "config.json checks" and "Bounds and refusals").
"""

from __future__ import annotations

__all__ = [
    "MAX_DIMS",
    "MAX_EXPERTS",
    "MAX_HEADS",
    "MAX_HIDDEN",
    "MAX_LAYERS",
    "MAX_SHARED",
    "MAX_TENSORS",
    "MAX_TENSOR_ELEMENTS",
    "MAX_VOCAB",
    "shown",
]

MAX_LAYERS = 10_000  # the count walks layer by layer; no real model comes near this
MAX_HIDDEN = 2**20  # hidden_size, intermediate sizes, LoRA ranks (largest real: ~10^5)
MAX_HEADS = 2**16  # attention heads, KV heads and head_dim (largest real: 128 / 256)
MAX_VOCAB = 2**24  # vocabulary rows (largest real: ~2.6·10^5)
MAX_EXPERTS = 2**16  # routed experts per MoE layer (largest real: 384)
MAX_SHARED = 2**8  # always-on shared experts (largest real: 2)
MAX_TENSORS = 2**20  # tensors in one file (largest real: a few thousand per shard)
MAX_DIMS = 8  # dimensions of one tensor (ggml has 4, safetensors checkpoints ≤ 5)
MAX_TENSOR_ELEMENTS = 2**44  # elements of one tensor (largest real: ~2·10^9)


def shown(name: str, limit: int = 120) -> str:
    """A name read from a file, as one printable line for a refusal: escapes (a newline in a
    tensor name must not split the error) and at most ``limit`` characters."""
    text = name.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "…"
