"""config.json → ModelGeometry: parameters, bytes per step and the KV-cache layout.

The counter walks the decoder layer by layer (attention, norms, dense MLP or MoE block),
so hybrid layouts (dense-first DeepSeek layers, interleaved Llama-4 MoE, Qwen's
``mlp_only_layers``) are exact. Conventions (docs/methodology.md): RMSNorm weights count
(2 per layer + final); biases, attention sinks, routers and DeepSeek's score-correction bias
count; MTP layers are reported apart; the LM head is counted once when tied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.dtypes import WeightFormat, canonical_dtype, kv_bytes_per_element
from tokenwatt.geometry.model import KVGroup, KVKind, ModelGeometry
from tokenwatt.geometry.precision import Precision, resolve_precision
from tokenwatt.geometry.reader import Reader

__all__ = ["build_geometry", "text_config"]

_MLA_TYPES = frozenset(
    {
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "kimi_k2",
        "glm4_moe_lite",
        "longcat_flash",
        "pangu_ultra_moe",
    }
)
_QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe"})
_LLAMA4_TYPES = frozenset({"llama4", "llama4_text"})
# model types whose layout this module knows; others are counted Llama-style with a note
_KNOWN_TYPES = (
    frozenset(
        {
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gpt_oss",
            "deepseek_v2",
            "deepseek_v3",
            "kimi_k2",
        }
    )
    | _LLAMA4_TYPES
)
# tie_word_embeddings when the config omits it: the config class's default
_UNTIED_BY_DEFAULT = _KNOWN_TYPES | _MLA_TYPES
_ARCH_TO_TYPE = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
}
_MAX_LAYERS = 10_000  # the count walks layer by layer; no real model comes near this
_EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
_TOPK_KEYS = (
    "num_experts_per_tok",
    "num_experts_per_token",
    "experts_per_token",
    "top_k_experts",
    "moe_topk",
    "moe_top_k",
)
_KV_HEAD_KEYS = (
    "num_key_value_heads",
    "num_kv_heads",
    "n_head_kv",
    "multi_query_group_num",
    "num_attention_groups",
)
_LAYER_KINDS: dict[str, KVKind] = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
}


def text_config(root: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's keys: ``text_config`` when present, with the root's precision keys.

    ``quantization_config`` and the dtype are looked up at the root first (as vLLM does);
    ``tie_word_embeddings`` in the text config first, the root second.
    """
    tc = root.get("text_config")
    if tc is None:
        return dict(root)
    if not isinstance(tc, dict):
        raise GeometryError(f"config.json: text_config must be an object, got {tc!r}")
    merged = dict(tc)
    for key in ("quantization_config", "compression_config", "torch_dtype", "dtype"):
        if root.get(key) is not None:
            merged[key] = root[key]
    for key in ("tie_word_embeddings", "model_type", "architectures"):
        if merged.get(key) is None and root.get(key) is not None:
            merged[key] = root[key]
    return merged


@dataclass(slots=True)
class _Acc:
    """Parameters and stored bytes of a set of modules."""

    params: int = 0
    nbytes: int = 0

    def matrix(self, fmt: WeightFormat, rows: int, cols: int) -> None:
        self.params += rows * cols
        self.nbytes += fmt.matrix_bytes(rows, cols)

    def vector(self, fmt: WeightFormat, n: int) -> None:
        self.params += n
        self.nbytes += fmt.vector_bytes(n)

    def linear(
        self, fmt: WeightFormat, plain: WeightFormat, rows: int, cols: int, bias: bool
    ) -> None:
        self.matrix(fmt, rows, cols)
        if bias:
            self.vector(plain, rows)


@dataclass(frozen=True, slots=True)
class _Attention:
    mla: bool
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    sinks: bool
    # MLA only
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def add(self, acc: _Acc, prec: Precision, prefix: str) -> None:
        h, plain = self.hidden, prec.plain

        def lin(name: str, rows: int, cols: int, bias: bool = False) -> None:
            acc.linear(prec.linear(f"{prefix}.self_attn.{name}"), plain, rows, cols, bias)

        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                lin("q_a_proj", self.q_lora_rank, h, self.o_bias)
                acc.vector(plain, self.q_lora_rank)  # q_a_layernorm
                lin("q_b_proj", self.heads * qk, self.q_lora_rank)
            else:
                lin("q_proj", self.heads * qk, h)
            lin("kv_a_proj_with_mqa", self.kv_lora_rank + self.qk_rope_head_dim, h, self.o_bias)
            acc.vector(plain, self.kv_lora_rank)  # kv_a_layernorm
            lin(
                "kv_b_proj",
                self.heads * (self.qk_nope_head_dim + self.v_head_dim),
                self.kv_lora_rank,
            )
            lin("o_proj", h, self.heads * self.v_head_dim, self.o_bias)
            return
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        lin("q_proj", q_out, h, self.qkv_bias)
        lin("k_proj", kv_out, h, self.qkv_bias)
        lin("v_proj", kv_out, h, self.qkv_bias)
        lin("o_proj", h, q_out, self.o_bias)
        if self.qk_norm:
            acc.vector(plain, 2 * self.head_dim)
        if self.sinks:
            acc.vector(plain, self.heads)


@dataclass(frozen=True, slots=True)
class _MoE:
    experts: int
    top_k: int
    expert_size: int
    shared: int  # number of always-on shared experts of ``shared_size`` each
    shared_size: int
    shared_gate: bool  # qwen2_moe's 1×h sigmoid gate on the shared expert
    router_bias: bool
    correction_bias: bool
    expert_bias: bool


def _mlp(
    acc: _Acc, prec: Precision, prefix: str, *, h: int, inter: int, bias: bool, expert: bool
) -> None:
    plain = prec.plain
    for name, rows, cols in (
        ("gate_proj", inter, h),
        ("up_proj", inter, h),
        ("down_proj", h, inter),
    ):
        acc.linear(prec.linear(f"{prefix}.{name}", expert=expert), plain, rows, cols, bias)


@dataclass(slots=True)
class _Layer:
    dense: _Acc  # everything but the routed experts
    expert: _Acc | None  # one routed expert, for MoE layers


@dataclass(frozen=True, slots=True)
class _Decoder:
    """What every decoder layer is built from; ``layer(i, moe)`` counts one of them."""

    hidden: int
    attn: _Attention
    moe: _MoE | None
    dense_size: int
    mlp_bias: bool
    prec: Precision

    def layer(self, i: int, is_moe: bool) -> _Layer:
        h, prec, moe = self.hidden, self.prec, self.moe if is_moe else None
        p = f"model.layers.{i}"
        dense = _Acc()
        self.attn.add(dense, prec, p)
        dense.vector(prec.plain, 2 * h)  # input and post-attention RMSNorm
        if moe is None:
            _mlp(
                dense,
                prec,
                f"{p}.mlp",
                h=h,
                inter=self.dense_size,
                bias=self.mlp_bias,
                expert=False,
            )
            return _Layer(dense, None)
        dense.vector(prec.plain, moe.experts * h)  # router
        if moe.router_bias:
            dense.vector(prec.plain, moe.experts)
        if moe.correction_bias:
            dense.vector(prec.plain, moe.experts)  # e_score_correction_bias
        for s in range(moe.shared):
            prefix = f"{p}.mlp.shared_experts.{s}"
            _mlp(dense, prec, prefix, h=h, inter=moe.shared_size, bias=False, expert=False)
        if moe.shared_gate:
            dense.vector(prec.plain, h)
        expert = _Acc()
        _mlp(expert, prec, f"{p}.mlp.experts", h=h, inter=moe.expert_size, bias=False, expert=True)
        if moe.expert_bias:
            expert.vector(prec.plain, 2 * moe.expert_size + h)  # gate_up and down biases
        return _Layer(dense, expert)


def _model_type(r: Reader) -> str:
    mt = r.str_("model_type")
    if mt:
        return mt
    archs = r.str_list("architectures") or []
    for arch in archs:
        if arch in _ARCH_TO_TYPE:
            return _ARCH_TO_TYPE[arch]
    return "unknown"


def _moe_flags(r: Reader, mt: str, layers: int, experts: int) -> list[bool]:
    """Which of the decoder layers (and MTP layers past them) carry a MoE block."""
    mtp = r.opt_int("num_nextn_predict_layers") or 0
    if mtp > _MAX_LAYERS:
        raise GeometryError(f"config.json: num_nextn_predict_layers {mtp} is implausible")
    n = layers + mtp
    if experts == 0:
        return [False] * n
    explicit = r.int_list("moe_layers")
    if explicit is not None:
        chosen = set(explicit)
        return [i in chosen for i in range(n)]
    if r.has("first_k_dense_replace", "moe_layer_freq") or mt in _MLA_TYPES:
        k = r.opt_int("first_k_dense_replace", default=0) or 0
        freq = r.opt_int("moe_layer_freq", minimum=1, default=1) or 1
        return [i >= k and i % freq == 0 for i in range(n)]
    if r.has("decoder_sparse_step", "mlp_only_layers"):
        step = r.opt_int("decoder_sparse_step", minimum=1, default=1) or 1
        only = set(r.int_list("mlp_only_layers") or [])
        return [i not in only and (i + 1) % step == 0 for i in range(n)]
    if r.has("interleave_moe_layer_step"):
        step = r.opt_int("interleave_moe_layer_step", minimum=1, default=1) or 1
        return [(i + 1) % step == 0 for i in range(n)]
    return [True] * n


def _layer_kinds(r: Reader, mt: str, layers: int) -> list[tuple[KVKind, int | None]]:
    """Attention kind and window of each decoder layer (GQA models)."""
    types = r.str_list("layer_types")
    if types is not None:
        if len(types) != layers:
            raise GeometryError(
                f"config.json: layer_types lists {len(types)} layers but the model has "
                f"{layers}; fix one with --set config.layer_types=[...] or --set layers=N"
            )
        out: list[tuple[KVKind, int | None]] = []
        for t in types:
            kind = _LAYER_KINDS.get(t)
            if kind is None:
                raise GeometryError(
                    f"config.json: layer_types has {t!r}, whose KV cache this parser cannot "
                    "size; set kv_bytes_per_token and kv_groups with --set"
                )
            if kind == "sliding":
                out.append((kind, r.int_("sliding_window")))
            elif kind == "chunked":
                out.append((kind, r.int_("attention_chunk_size")))
            else:
                out.append((kind, None))
        return out
    if mt in _LLAMA4_TYPES or r.has("attention_chunk_size"):
        chunk = r.opt_int("attention_chunk_size", minimum=1)
        if chunk is None:
            return [("full", None)] * layers
        every = r.opt_int("no_rope_layer_interval", minimum=1, default=4) or 4
        rope = r.int_list("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
        if len(rope) < layers:
            raise GeometryError(
                f"config.json: no_rope_layers lists {len(rope)} layers but the model has {layers}"
            )
        # layers that use RoPE attend within their chunk; the NoPE layers are global
        return [("chunked", chunk) if rope[i] else ("full", None) for i in range(layers)]
    pattern = r.opt_int("sliding_window_pattern", "_sliding_window_pattern", minimum=1)
    if pattern is None and mt == "gemma2":
        pattern = 2  # Gemma 2 alternates sliding and global layers in code, not in its config
    window = r.opt_int("sliding_window", minimum=1)
    if pattern is not None and window is not None:
        return [
            ("full", None) if (i + 1) % pattern == 0 else ("sliding", window) for i in range(layers)
        ]
    if window is None:
        return [("full", None)] * layers
    if "use_sliding_window" in r.data:
        if not r.bool_("use_sliding_window", False):
            return [("full", None)] * layers
        first = r.opt_int("max_window_layers", default=0) or 0
        return [("sliding", window) if i >= first else ("full", None) for i in range(layers)]
    return [("sliding", window)] * layers  # Mistral-style: every layer slides


def _kv_groups(kinds: list[tuple[KVKind, int | None]], per_layer_bytes: int) -> tuple[KVGroup, ...]:
    counts: dict[tuple[KVKind, int | None], int] = {}
    for key in kinds:
        counts[key] = counts.get(key, 0) + 1
    order = {"mla": 0, "full": 1, "sliding": 2, "chunked": 3}
    return tuple(
        KVGroup(kind, n, n * per_layer_bytes, window)
        for (kind, window), n in sorted(
            counts.items(), key=lambda kv: (order[kv[0][0]], kv[0][1] or 0)
        )
    )


def build_geometry(
    root: Mapping[str, Any],
    *,
    name: str,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    forced: Mapping[str, Any] | None = None,
    folder: Path | None = None,
    source: str = "",
) -> ModelGeometry:
    """Count one config; ``forced`` holds user values for layers/experts/top-k/shared/tying."""
    cfg = text_config(root)
    r = Reader(cfg, forced)
    notes: list[str] = []
    mt = _model_type(r)
    if mt not in _KNOWN_TYPES:
        notes.append(
            f"model_type {mt!r} has no rules of its own here: counted as a Llama-style decoder "
            "(RMSNorm, SwiGLU, GQA); compare with the published count or set fields with --set"
        )

    h = r.int_("hidden_size", "n_embd", "d_model")
    layers = r.int_("num_hidden_layers", "n_layer", "num_layers", field="layers")
    if layers > _MAX_LAYERS:
        raise GeometryError(
            f"config.json: {layers} layers is implausible (more than {_MAX_LAYERS:,}); "
            "set the right count with --set layers=N"
        )
    vocab = r.int_("vocab_size")
    heads = r.int_("num_attention_heads", "n_head", "num_heads")
    tied = r.bool_("tie_word_embeddings", mt not in _UNTIED_BY_DEFAULT, field="tied_embeddings")
    if "tie_word_embeddings" not in cfg and "tied_embeddings" not in r.forced:
        notes.append(f"config has no tie_word_embeddings: {mt} default ({str(tied).lower()}) used")

    mla = mt in _MLA_TYPES or r.has("kv_lora_rank")
    attention_bias = r.bool_("attention_bias", False)
    if mla:
        attn = _Attention(
            mla=True,
            hidden=h,
            heads=heads,
            kv_heads=1,
            head_dim=0,
            qkv_bias=False,
            o_bias=attention_bias,
            qk_norm=False,
            sinks=False,
            q_lora_rank=r.opt_int("q_lora_rank", minimum=1),
            kv_lora_rank=r.int_("kv_lora_rank"),
            qk_nope_head_dim=r.int_("qk_nope_head_dim", minimum=0),
            qk_rope_head_dim=r.int_("qk_rope_head_dim"),
            v_head_dim=r.int_("v_head_dim"),
        )
    else:
        kv_heads = r.opt_int(*_KV_HEAD_KEYS, minimum=1) or heads
        head_dim = r.opt_int("head_dim", minimum=0) or 0
        if head_dim == 0:
            if h % heads:
                raise GeometryError(
                    f"config.json has no head_dim and hidden_size {h} is not a multiple of "
                    f"num_attention_heads {heads}; set it with --set config.head_dim=N"
                )
            head_dim = h // heads
        attn = _Attention(
            mla=False,
            hidden=h,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            qkv_bias=attention_bias or mt in _QKV_BIAS_TYPES,
            o_bias=attention_bias,
            qk_norm=mt in _QK_NORM_TYPES,
            sinks=mt == "gpt_oss",
        )

    experts = r.opt_int(*_EXPERT_KEYS, field="experts", default=0) or 0
    moe: _MoE | None = None
    if experts > 0:
        top_k = r.int_(*_TOPK_KEYS, field="experts_per_token")
        if top_k > experts:
            raise GeometryError(
                f"config.json: {top_k} experts per token but only {experts} experts; "
                "fix it with --set experts_per_token=N"
            )
        expert_size = r.int_("moe_intermediate_size", "intermediate_size")
        shared, shared_size, shared_gate = 0, expert_size, False
        if mt in _LLAMA4_TYPES:
            shared = 1
        elif r.has("n_shared_experts"):
            shared = r.opt_int("n_shared_experts", default=0) or 0
        elif (qs := r.opt_int("shared_expert_intermediate_size", default=0) or 0) > 0:
            shared, shared_size, shared_gate = 1, qs, True
        if "shared_experts" in r.forced:
            shared, shared_size = int(r.forced["shared_experts"]), expert_size
        moe = _MoE(
            experts=experts,
            top_k=top_k,
            expert_size=expert_size,
            shared=shared,
            shared_size=shared_size,
            shared_gate=shared_gate,
            router_bias=mt == "gpt_oss",
            correction_bias=r.str_("topk_method") == "noaux_tc",
            expert_bias=mt == "gpt_oss",
        )
    flags = _moe_flags(r, mt, layers, experts)
    dense_size = 0
    if not all(flags[:layers]) or moe is None:
        # Llama 4's dense layers use intermediate_size_mlp; its intermediate_size is the expert's
        key = "intermediate_size_mlp" if mt in _LLAMA4_TYPES else "intermediate_size"
        dense_size = r.int_(key)
    mlp_bias = r.bool_("mlp_bias", False)

    prec = resolve_precision(cfg, weight_dtype=weight_dtype, folder=folder)
    kv_dt = canonical_dtype(kv_dtype, what="kv dtype") if kv_dtype else "bf16"
    kvb = kv_bytes_per_element(kv_dt)
    plain = prec.plain
    decoder = _Decoder(h, attn, moe, dense_size, mlp_bias, prec)

    body, expert_sum = _Acc(), _Acc()
    dense_bytes = 0
    active = 0
    moe_layers = 0
    expert_params = 0
    for i in range(layers):
        lay = decoder.layer(i, flags[i])
        body.params += lay.dense.params
        body.nbytes += lay.dense.nbytes
        dense_bytes += lay.dense.nbytes
        active += lay.dense.params
        if lay.expert is not None and moe is not None:
            moe_layers += 1
            expert_params = lay.expert.params
            expert_sum.params += lay.expert.params
            expert_sum.nbytes += lay.expert.nbytes
            body.params += moe.experts * lay.expert.params
            body.nbytes += moe.experts * lay.expert.nbytes
            active += moe.top_k * lay.expert.params
    expert_bytes = round(expert_sum.nbytes / moe_layers) if moe_layers else 0

    # MTP (DeepSeek's next-token-prediction layers): enorm, hnorm, eh_proj, a decoder
    # layer and shared_head.norm; its stored embedding/head copies are duplicates.
    mtp = 0
    for j in range(len(flags) - layers):
        idx = layers + j
        lay = decoder.layer(idx, flags[idx])
        n_exp = moe.experts if (moe is not None and lay.expert is not None) else 0
        mtp += 3 * h + 2 * h * h + lay.dense.params
        mtp += n_exp * (lay.expert.params if lay.expert is not None else 0)

    final_norm = h
    embedding = vocab * h
    head = vocab * h
    total = embedding + (0 if tied else head) + body.params + final_norm
    active_total = embedding + (0 if tied else head) + active + final_norm
    dense_weight_bytes = dense_bytes + plain.vector_bytes(final_norm) + 2 * head
    stored = (
        body.nbytes
        + plain.vector_bytes(final_norm)
        + plain.matrix_bytes(vocab, h) * (1 if tied else 2)
    )

    kinds: list[tuple[KVKind, int | None]]
    if mla:
        kinds = [("mla", None)] * layers
        per_layer_kv = (attn.kv_lora_rank + attn.qk_rope_head_dim) * kvb
        notes.append(
            "MLA: KV bytes are the compressed latent (kv_lora_rank + qk_rope_head_dim) per "
            "layer, as vLLM/SGLang cache it; HF eager attention caches decompressed K/V"
        )
    else:
        kinds = _layer_kinds(r, mt, layers)
        per_layer_kv = 2 * attn.kv_heads * attn.head_dim * kvb
    groups = _kv_groups(kinds, per_layer_kv)
    kv_full = sum(g.bytes_per_token for g in groups if g.kind in ("full", "mla"))

    return ModelGeometry(
        name=name,
        model_type=mt,
        total_params=total,
        active_params=active_total,
        mtp_params=mtp,
        embedding_params=embedding,
        lm_head_params=head,
        tied_embeddings=tied,
        layers=layers,
        moe_layers=moe_layers,
        experts=moe.experts if moe is not None and moe_layers else 0,
        experts_per_token=moe.top_k if moe is not None and moe_layers else 0,
        shared_experts=moe.shared if moe is not None and moe_layers else 0,
        expert_params=expert_params,
        weight_dtype=prec.weight_dtype,
        kv_dtype=kv_dt,
        dense_weight_bytes=dense_weight_bytes,
        expert_bytes=expert_bytes,
        kv_bytes_per_token=kv_full,
        kv_groups=groups,
        stored_weight_bytes=stored,
        source=source,
        notes=(*prec.notes, *notes),
    )
