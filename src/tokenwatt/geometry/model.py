"""The model geometry every derived figure rests on, and the pure math over it.

A ``ModelGeometry`` is what a config.json says about the bytes a decode step must read:
the weights read whatever the routing (dense part, LM head at 2 bytes/param), one routed
expert's bytes, and the KV cache per token of context, per attention-layer group.
The parser that builds one lives in ``tokenwatt.geometry.parse``; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tokenwatt.geometry.routing import ExpertLoad

KVKind = Literal["full", "sliding", "chunked", "mla"]


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Attention layers that share one KV-cache rule.

    ``bytes_per_token`` is for all ``layers`` of the group together, per cached token.
    ``window`` is the sliding-window length or the attention-chunk size in tokens; None for
    full attention and MLA, whose cache grows with the whole context.
    """

    kind: KVKind
    layers: int
    bytes_per_token: int
    window: int | None = None

    def tokens_read(self, context_len: int) -> int:
        """Cached tokens of this group one new token attends to, given ``context_len`` before it."""
        if context_len <= 0:
            return 0
        if self.kind == "sliding" and self.window is not None:
            return min(context_len, self.window)
        if self.kind == "chunked" and self.window is not None:
            # The new token at position ``context_len`` sees the earlier tokens of its own chunk.
            return context_len % self.window
        return context_len

    def tokens_cached(self, context_len: int) -> int:
        """Tokens of this group a sequence of ``context_len`` tokens keeps in its cache.

        A window (sliding or chunk) caps what must stay resident at ``window`` tokens, as a
        paged allocator that frees blocks behind the window does (block rounding ignored).
        """
        if context_len <= 0:
            return 0
        if self.kind in ("sliding", "chunked") and self.window is not None:
            return min(context_len, self.window)
        return context_len

    def tokens_read_prefix(self, m: int) -> int:
        """Σ tokens_read(x) for x in [0, m): closed form, exact in integers."""
        if m <= 0:
            return 0
        w = self.window
        if self.kind == "sliding" and w is not None:
            if m <= w:
                return m * (m - 1) // 2
            return w * (w - 1) // 2 + (m - w) * w
        if self.kind == "chunked" and w is not None:
            q, r = divmod(m, w)
            return q * (w * (w - 1) // 2) + r * (r - 1) // 2
        return m * (m - 1) // 2


@dataclass(frozen=True, slots=True)
class ModelGeometry:
    """Geometry of one model as served: counts, bytes and the KV-cache layout.

    Field names are also the keys of ``tokenwatt geometry --json`` and of the result file.
    Parameter counts are exact integers; byte counts are rounded to whole bytes.
    """

    name: str
    model_type: str
    # parameters
    total_params: int
    active_params: int
    mtp_params: int
    embedding_params: int
    lm_head_params: int
    tied_embeddings: bool
    # layout
    layers: int
    moe_layers: int
    experts: int
    experts_per_token: int
    shared_experts: int
    expert_params: int
    # bytes
    weight_dtype: str
    kv_dtype: str
    dense_weight_bytes: int
    expert_bytes: int
    # KV bytes per cached token of the layers whose cache grows with the whole context
    # (full attention + MLA); windowed layers are in kv_groups only (see kv_bytes_per_token_by_kind)
    kv_bytes_per_token_full_context: int
    kv_groups: tuple[KVGroup, ...] = field(default=())
    # provenance and memory fit (added by the parser; defaults keep hand-built geometries valid)
    stored_weight_bytes: int = 0  # checkpoint bytes of the main model (tied matrix once)
    source: str = ""  # where the config came from (path, cache entry or preset)
    notes: tuple[str, ...] = ()  # assumptions the parser made (defaults, dtype fallbacks)

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0 and self.experts > 0

    def expected_unique_experts(self, batch: float) -> float:
        """E·(1 − (1 − k/E)^B): distinct routed experts per MoE layer hit by ``batch`` tokens
        under uniform routing (an upper bound for real, skewed routing)."""
        if not self.is_moe or batch <= 0:
            return 0.0
        return ExpertLoad.uniform(self.experts, self.experts_per_token).expected_distinct_fixed(
            float(batch)
        )

    def weight_bytes_per_step(self, batch: float) -> float:
        """W(B) = dense weight bytes + MoE layers × E[distinct experts | B] × bytes per expert."""
        return self.dense_weight_bytes + (
            self.moe_layers * self.expected_unique_experts(batch) * self.expert_bytes
        )

    def kv_bytes_per_token_of(self, kind: KVKind) -> int:
        """KV bytes per cached token of the layers of one kind (all their groups together)."""
        return sum(g.bytes_per_token for g in self.kv_groups if g.kind == kind)

    @property
    def kv_bytes_per_token_full_attention(self) -> int:
        """Full-attention (GQA/MHA) layers: every token of the context stays cached."""
        return self.kv_bytes_per_token_of("full")

    @property
    def kv_bytes_per_token_sliding_window(self) -> int:
        """Sliding-window layers: per cached token, at most ``window`` tokens stay cached."""
        return self.kv_bytes_per_token_of("sliding")

    @property
    def kv_bytes_per_token_chunked(self) -> int:
        """Chunked-attention layers (Llama 4): at most one chunk stays cached."""
        return self.kv_bytes_per_token_of("chunked")

    @property
    def kv_bytes_per_token_mla(self) -> int:
        """Multi-head latent attention layers: the compressed latent, every token cached."""
        return self.kv_bytes_per_token_of("mla")

    @property
    def kv_bytes_per_token_all_layers(self) -> int:
        """Every attention layer: what one cached token costs while the context is within
        every window. This is the cost per cached token a per-token block allocator pays."""
        return sum(g.bytes_per_token for g in self.kv_groups)

    def kv_cache_bytes(self, context_len: int) -> int:
        """KV bytes a sequence of ``context_len`` tokens occupies: full and MLA layers hold
        every token, sliding-window and chunked layers at most their window."""
        return sum(g.bytes_per_token * g.tokens_cached(context_len) for g in self.kv_groups)

    def kv_bytes_read(self, context_len: int) -> int:
        """KV-cache bytes one new token reads when ``context_len`` tokens precede it (exact for
        full, sliding-window, chunked and MLA layers)."""
        return sum(g.bytes_per_token * g.tokens_read(context_len) for g in self.kv_groups)

    def kv_bytes_read_sum(self, prompt_len: int, output_tokens: int) -> int:
        """Σ_{i=0}^{n−1} kv_bytes_read(L + i): KV bytes read to generate a request's n tokens.

        For full attention this is bytes/token × (n·L + n(n−1)/2), the seed's context sum.
        """
        a, b = prompt_len, prompt_len + output_tokens
        return sum(
            g.bytes_per_token * (g.tokens_read_prefix(b) - g.tokens_read_prefix(a))
            for g in self.kv_groups
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kv_groups"] = [asdict(g) for g in self.kv_groups]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelGeometry:
        fields = upgrade_geometry_dict(data)
        groups = tuple(KVGroup(**g) for g in fields.pop("kv_groups", ()))
        if "notes" in fields:
            fields["notes"] = tuple(fields["notes"])
        return cls(**fields, kv_groups=groups)


def upgrade_geometry_dict(data: dict[str, Any]) -> dict[str, Any]:
    """A geometry written by an older tokenwatt under today's field names: version-1 result
    files call the full-context KV bytes ``kv_bytes_per_token`` (it counted only full and
    MLA layers, so the name now says so)."""
    fields = dict(data)
    if "kv_bytes_per_token" in fields:
        legacy = fields.pop("kv_bytes_per_token")
        fields.setdefault("kv_bytes_per_token_full_context", legacy)
    return fields
