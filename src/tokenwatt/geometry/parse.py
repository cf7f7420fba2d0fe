"""config.json → ModelGeometry: parameters, bytes per step and the KV-cache layout.

The counter walks the decoder layer by layer (attention, norms, dense MLP or MoE block),
so hybrid layouts (dense-first DeepSeek layers, interleaved Llama-4 MoE, Qwen's
``mlp_only_layers``) are exact. Conventions (docs/methodology.md): norm weights count (2 per
layer + final; LayerNorm biases too, one shared norm in parallel blocks); biases, attention
sinks, routers and DeepSeek's score-correction bias count; learned position tables count;
MTP layers are reported apart; the LM head is counted once when tied. Each family's MLP
shape, norms and biases come from ``geometry.families``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.bounds import MAX_EXPERTS as _MAX_EXPERTS
from tokenwatt.geometry.bounds import MAX_HEADS as _MAX_HEADS
from tokenwatt.geometry.bounds import MAX_HIDDEN as _MAX_HIDDEN
from tokenwatt.geometry.bounds import MAX_LAYERS as _MAX_LAYERS
from tokenwatt.geometry.bounds import MAX_SHARED as _MAX_SHARED
from tokenwatt.geometry.bounds import MAX_VOCAB as _MAX_VOCAB
from tokenwatt.geometry.dtypes import WeightFormat, canonical_dtype, kv_bytes_per_element
from tokenwatt.geometry.families import (
    TIED_BY_DEFAULT,
    TWO_MATRIX_TYPES,
    Layout,
    check_layout,
    family_type,
    read_layout,
)
from tokenwatt.geometry.model import KVGroup, KVKind, ModelGeometry
from tokenwatt.geometry.precision import Precision, resolve_precision
from tokenwatt.geometry.reader import Reader, short_repr
from tokenwatt.geometry.support import check_supported

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
    acc: _Acc,
    prec: Precision,
    prefix: str,
    *,
    h: int,
    inter: int,
    bias: bool,
    expert: bool,
    gated: bool = True,
) -> None:
    """A gated MLP (gate, up, down: SwiGLU/GeGLU) or a two-matrix one (fc1 up, fc2 down)."""
    plain = prec.plain
    parts = (
        (("gate_proj", inter, h), ("up_proj", inter, h), ("down_proj", h, inter))
        if gated
        else (("fc1", inter, h), ("fc2", h, inter))
    )
    for name, rows, cols in parts:
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
    layout: Layout

    def layer(self, i: int, is_moe: bool) -> _Layer:
        h, prec, moe = self.hidden, self.prec, self.moe if is_moe else None
        p = f"model.layers.{i}"
        dense = _Acc()
        self.attn.add(dense, prec, p)
        lay = self.layout  # the layer's norms: one shared where attention and MLP run in parallel
        dense.vector(prec.plain, lay.norms_per_layer * lay.norm_width * h)
        if moe is None:
            _mlp(
                dense,
                prec,
                f"{p}.mlp",
                h=h,
                inter=self.dense_size,
                bias=self.mlp_bias,
                expert=False,
                gated=lay.gated_mlp,
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
    archs = r.str_list("architectures") or []
    if mt:
        return family_type(mt, archs)
    if (fam := family_type("unknown", archs)) != "unknown":
        return fam
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


_Kinds = list[tuple[KVKind, int | None]]


def _kinds_from_layer_types(r: Reader, types: list[str], layers: int) -> _Kinds:
    """An explicit ``layer_types`` list (gpt-oss, newer Gemma 3 and Llama 4 files)."""
    if len(types) != layers:
        raise GeometryError(
            f"config.json: layer_types lists {len(types)} layers but the model has "
            f"{layers}; fix one with --set config.layer_types=[...] or --set layers=N"
        )
    out: _Kinds = []
    for t in types:
        kind = _LAYER_KINDS.get(t)
        if kind is None:
            raise GeometryError(
                f"config.json: layer_types has {short_repr(t)}, whose KV cache this parser "
                "cannot size; give the groups with --set kv_groups=[...]"
            )
        if kind == "sliding":
            out.append((kind, r.int_("sliding_window")))
        elif kind == "chunked":
            out.append((kind, r.int_("attention_chunk_size")))
        else:
            out.append((kind, None))
    return out


def _chunked_kinds(r: Reader, layers: int) -> _Kinds:
    """Llama 4: layers that use RoPE attend within their chunk; the NoPE layers are global."""
    chunk = r.opt_int("attention_chunk_size", minimum=1)
    if chunk is None:
        return [("full", None)] * layers
    every = r.opt_int("no_rope_layer_interval", minimum=1, default=4) or 4
    rope = r.int_list("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
    if len(rope) < layers:
        raise GeometryError(
            f"config.json: no_rope_layers lists {len(rope)} layers but the model has {layers}"
        )
    return [("chunked", chunk) if rope[i] else ("full", None) for i in range(layers)]


def _sliding_kinds(r: Reader, mt: str, layers: int) -> _Kinds:
    """Sliding windows from a pattern (Gemma), Qwen's switches, or on every layer (Mistral)."""
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


def _layer_kinds(r: Reader, mt: str, layers: int) -> _Kinds:
    """Attention kind and window of each decoder layer (GQA models)."""
    types = r.str_list("layer_types")
    if types is not None:
        return _kinds_from_layer_types(r, types, layers)
    if mt in _LLAMA4_TYPES or r.has("attention_chunk_size"):
        return _chunked_kinds(r, layers)
    return _sliding_kinds(r, mt, layers)


def _kv_groups(kinds: _Kinds, per_layer_bytes: int) -> tuple[KVGroup, ...]:
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


# Physical bounds (docs/methodology.md, "config.json checks"): ``geometry.bounds``, the same
# for every geometry source.


@dataclass(frozen=True, slots=True)
class _Shape:
    """The sizes every family reads the same way."""

    mt: str
    hidden: int
    layers: int
    vocab: int
    heads: int
    tied: bool
    layout: Layout


def _read_shape(r: Reader, cfg: Mapping[str, Any], notes: list[str]) -> _Shape:
    mt = _model_type(r)
    h = r.int_("hidden_size", "n_embd", "d_model", maximum=_MAX_HIDDEN)
    layout = read_layout(r, mt, h, notes)
    if mt not in _KNOWN_TYPES and mt not in TWO_MATRIX_TYPES and layout.gated_mlp:
        notes.append(
            f"model_type {mt!r} has no rules of its own here: counted as a Llama-style decoder "
            "(RMSNorm, SwiGLU, GQA); compare with the published count or set fields with --set"
        )
    layers = r.int_("num_hidden_layers", "n_layer", "num_layers", "n_layers", field="layers")
    if layers > _MAX_LAYERS:
        raise GeometryError(
            f"config.json: {layers} layers is implausible (more than {_MAX_LAYERS:,}); "
            "set the right count with --set layers=N"
        )
    vocab = r.int_("vocab_size", maximum=_MAX_VOCAB)
    heads = r.int_("num_attention_heads", "n_head", "num_heads", "n_heads", maximum=_MAX_HEADS)
    check_layout(layout, heads)
    default_tied = mt in TIED_BY_DEFAULT or (
        mt not in TWO_MATRIX_TYPES and mt not in _UNTIED_BY_DEFAULT
    )
    tied = r.bool_("tie_word_embeddings", default_tied, field="tied_embeddings")
    if "tie_word_embeddings" not in cfg and "tied_embeddings" not in r.forced:
        notes.append(f"config has no tie_word_embeddings: {mt} default ({str(tied).lower()}) used")
    return _Shape(mt, h, layers, vocab, heads, tied, layout)


def _mla_attention(r: Reader, s: _Shape) -> _Attention:
    """DeepSeek-style multi-head latent attention: low-rank Q and a compressed KV latent."""
    return _Attention(
        mla=True,
        hidden=s.hidden,
        heads=s.heads,
        kv_heads=1,
        head_dim=0,
        qkv_bias=False,
        o_bias=r.bool_("attention_bias", False),
        qk_norm=False,
        sinks=False,
        q_lora_rank=r.opt_int("q_lora_rank", minimum=1, maximum=_MAX_HIDDEN),
        kv_lora_rank=r.int_("kv_lora_rank", maximum=_MAX_HIDDEN),
        qk_nope_head_dim=r.int_("qk_nope_head_dim", minimum=0, maximum=_MAX_HEADS),
        qk_rope_head_dim=r.int_("qk_rope_head_dim", maximum=_MAX_HEADS),
        v_head_dim=r.int_("v_head_dim", maximum=_MAX_HEADS),
    )


def _gqa_attention(r: Reader, s: _Shape) -> _Attention:
    """Grouped-query (or multi-head) attention; KV heads must share the query heads evenly."""
    kv_heads = s.layout.kv_heads or r.opt_int(*_KV_HEAD_KEYS, minimum=1, maximum=_MAX_HEADS)
    kv_heads = kv_heads or s.heads
    if s.heads % kv_heads:
        key = (r.raw(*_KV_HEAD_KEYS) or ("num_key_value_heads",))[0]
        raise GeometryError(
            f"config.json: {key} {kv_heads} does not divide num_attention_heads {s.heads} "
            f"(each KV head serves a whole group of query heads); fix it with --set config.{key}=N"
        )
    head_dim = r.opt_int("head_dim", minimum=0, maximum=_MAX_HEADS) or 0
    if head_dim == 0:
        if s.hidden % s.heads:
            raise GeometryError(
                f"config.json has no head_dim and hidden_size {s.hidden} is not a multiple of "
                f"num_attention_heads {s.heads}; set it with --set config.head_dim=N"
            )
        head_dim = s.hidden // s.heads
    attention_bias = r.bool_("attention_bias", False)
    two = s.layout.two_matrix
    return _Attention(
        mla=False,
        hidden=s.hidden,
        heads=s.heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        qkv_bias=s.layout.qkv_bias if two else attention_bias or s.mt in _QKV_BIAS_TYPES,
        o_bias=s.layout.o_bias if two else attention_bias,
        qk_norm=s.mt in _QK_NORM_TYPES,
        sinks=s.mt == "gpt_oss",
    )


def _shared_experts(r: Reader, mt: str, expert_size: int) -> tuple[int, int, bool]:
    """(count, size, gated) of the always-on shared experts of each MoE layer."""
    shared, shared_size, shared_gate = 0, expert_size, False
    if mt in _LLAMA4_TYPES:
        shared = 1
    elif r.has("n_shared_experts"):
        shared = r.opt_int("n_shared_experts", maximum=_MAX_SHARED, default=0) or 0
    elif (qs := r.opt_int("shared_expert_intermediate_size", maximum=_MAX_HIDDEN) or 0) > 0:
        shared, shared_size, shared_gate = 1, qs, True
    if "shared_experts" in r.forced:
        shared, shared_size = r.forced_int("shared_experts", 0, _MAX_SHARED), expert_size
    return shared, shared_size, shared_gate


def _read_moe(r: Reader, mt: str) -> _MoE | None:
    """The MoE block, or None for a dense model. Routing needs experts to route to."""
    experts = r.opt_int(*_EXPERT_KEYS, field="experts", maximum=_MAX_EXPERTS, default=0) or 0
    if experts == 0:
        top = r.raw(*_TOPK_KEYS)
        dense_top = top is None or (type(top[1]) in (int, float) and top[1] == 0)
        if "experts" not in r.forced and top is not None and not dense_top:
            key = (r.raw(*_EXPERT_KEYS) or (_EXPERT_KEYS[0],))[0]
            raise GeometryError(
                f"config.json: {top[0]} is {short_repr(top[1])} but {key} is missing or 0; "
                f"set the expert count with --set experts=N (or experts=0 for a dense model)"
            )
        return None
    top_k = r.int_(*_TOPK_KEYS, field="experts_per_token", maximum=_MAX_EXPERTS)
    if top_k > experts:
        raise GeometryError(
            f"config.json: {top_k} experts per token but only {experts} experts; "
            "fix it with --set experts_per_token=N"
        )
    expert_size = r.int_("moe_intermediate_size", "intermediate_size", maximum=_MAX_HIDDEN)
    shared, shared_size, shared_gate = _shared_experts(r, mt, expert_size)
    return _MoE(
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


@dataclass(slots=True)
class _Counts:
    """Sums over the main model's decoder layers."""

    body: _Acc  # every layer's parameters and stored bytes, all experts included
    dense_bytes: int = 0  # bytes read every step whatever the routing
    active: int = 0  # parameters one token uses
    moe_layers: int = 0
    expert_params: int = 0  # one routed expert
    expert_bytes: int = 0  # one routed expert, mean over MoE layers


def _count_layers(decoder: _Decoder, flags: list[bool], layers: int) -> _Counts:
    c = _Counts(_Acc())
    moe, expert_sum = decoder.moe, _Acc()
    for i in range(layers):
        lay = decoder.layer(i, flags[i])
        c.body.params += lay.dense.params
        c.body.nbytes += lay.dense.nbytes
        c.dense_bytes += lay.dense.nbytes
        c.active += lay.dense.params
        if lay.expert is not None and moe is not None:
            c.moe_layers += 1
            c.expert_params = lay.expert.params
            expert_sum.params += lay.expert.params
            expert_sum.nbytes += lay.expert.nbytes
            c.body.params += moe.experts * lay.expert.params
            c.body.nbytes += moe.experts * lay.expert.nbytes
            c.active += moe.top_k * lay.expert.params
    c.expert_bytes = round(expert_sum.nbytes / c.moe_layers) if c.moe_layers else 0
    return c


def _count_mtp(decoder: _Decoder, flags: list[bool], layers: int) -> int:
    """MTP (DeepSeek's next-token-prediction layers): enorm, hnorm, eh_proj, a decoder
    layer and shared_head.norm; its stored embedding/head copies are duplicates."""
    h, moe, mtp = decoder.hidden, decoder.moe, 0
    for idx in range(layers, len(flags)):
        lay = decoder.layer(idx, flags[idx])
        n_exp = moe.experts if (moe is not None and lay.expert is not None) else 0
        mtp += 3 * h + 2 * h * h + lay.dense.params
        mtp += n_exp * (lay.expert.params if lay.expert is not None else 0)
    return mtp


def _kv_layout(
    r: Reader, s: _Shape, attn: _Attention, kv_dtype: str, notes: list[str]
) -> tuple[KVGroup, ...]:
    """The attention-layer groups and each one's KV bytes per cached token."""
    kvb = kv_bytes_per_element(kv_dtype)
    kinds: _Kinds
    if attn.mla:
        kinds = [("mla", None)] * s.layers
        per_layer_kv = (attn.kv_lora_rank + attn.qk_rope_head_dim) * kvb
        notes.append(
            "MLA: KV bytes are the compressed latent (kv_lora_rank + qk_rope_head_dim) per "
            "layer, as vLLM/SGLang cache it; HF eager attention caches decompressed K/V"
        )
    else:
        kinds = _layer_kinds(r, s.mt, s.layers)
        per_layer_kv = 2 * attn.kv_heads * attn.head_dim * kvb
    return _kv_groups(kinds, per_layer_kv)


def _decoder(r: Reader, s: _Shape, prec: Precision) -> tuple[_Decoder, list[bool]]:
    """Attention, MoE and dense-MLP rules of the decoder layers, and which layers are MoE."""
    mla = s.mt in _MLA_TYPES or r.has("kv_lora_rank")
    attn = _mla_attention(r, s) if mla else _gqa_attention(r, s)
    moe = _read_moe(r, s.mt)
    flags = _moe_flags(r, s.mt, s.layers, moe.experts if moe is not None else 0)
    dense_size, lay = 0, s.layout
    if lay.two_matrix:
        dense_size = lay.ffn_size
    elif not all(flags[: s.layers]) or moe is None:
        # Llama 4's dense layers use intermediate_size_mlp; its intermediate_size is the expert's
        key = "intermediate_size_mlp" if s.mt in _LLAMA4_TYPES else "intermediate_size"
        dense_size = r.int_(key, maximum=_MAX_HIDDEN)
    mlp_bias = lay.mlp_bias if lay.two_matrix else r.bool_("mlp_bias", False)
    return _Decoder(s.hidden, attn, moe, dense_size, mlp_bias, prec, lay), flags


@dataclass(frozen=True, slots=True)
class _Ends:
    """The parts outside the decoder layers: embedding, head, position table, end norms."""

    embedding: int  # token embedding (also the LM head's size)
    vectors: int  # final norm, BLOOM's embedding norm, an LM-head bias: read every step
    positions: int  # a learned position table: one row read per token, like the embedding
    projections: int  # OPT's project_in/out when the embedding is narrower than the model

    @classmethod
    def of(cls, s: _Shape) -> _Ends:
        lay, h = s.layout, s.hidden
        width = lay.embed_dim or h
        vectors = (lay.norm_width * h if lay.final_norm else 0) + (2 * h if lay.embed_norm else 0)
        vectors += s.vocab if lay.lm_head_bias else 0
        return cls(s.vocab * width, vectors, lay.positions * h, 2 * h * width if width != h else 0)

    def params(self, tied: bool) -> int:
        head = 0 if tied else self.embedding
        return self.embedding + head + self.vectors + self.positions + self.projections

    def step_bytes(self, plain: WeightFormat) -> int:
        """Read every decode step: end vectors, projections, the LM head at 2 bytes/param."""
        return (
            plain.vector_bytes(self.vectors)
            + plain.vector_bytes(self.projections)
            + (2 * self.embedding)
        )

    def stored_bytes(self, plain: WeightFormat, tied: bool) -> int:
        tables = self.embedding * (1 if tied else 2) + self.positions + self.projections
        return plain.vector_bytes(self.vectors) + plain.vector_bytes(tables)


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
    check_supported(cfg)
    r = Reader(cfg, forced)
    notes: list[str] = []
    s = _read_shape(r, cfg, notes)
    prec = resolve_precision(cfg, weight_dtype=weight_dtype, folder=folder)
    decoder, flags = _decoder(r, s, prec)
    moe = decoder.moe
    c = _count_layers(decoder, flags, s.layers)
    kv_dt = canonical_dtype(kv_dtype, what="kv dtype") if kv_dtype else "bf16"
    groups = _kv_layout(r, s, decoder.attn, kv_dt, notes)

    plain, tied, ends = prec.plain, s.tied, _Ends.of(s)
    routed = moe is not None and c.moe_layers > 0
    return ModelGeometry(
        name=name,
        model_type=s.mt,
        total_params=ends.params(tied) + c.body.params,
        active_params=ends.params(tied) + c.active,
        mtp_params=_count_mtp(decoder, flags, s.layers),
        embedding_params=ends.embedding,
        lm_head_params=ends.embedding,
        tied_embeddings=tied,
        layers=s.layers,
        moe_layers=c.moe_layers,
        experts=moe.experts if moe is not None and routed else 0,
        experts_per_token=moe.top_k if moe is not None and routed else 0,
        shared_experts=moe.shared if moe is not None and routed else 0,
        expert_params=c.expert_params,
        weight_dtype=prec.weight_dtype,
        kv_dtype=kv_dt,
        dense_weight_bytes=c.dense_bytes + ends.step_bytes(plain),
        expert_bytes=c.expert_bytes,
        kv_bytes_per_token_full_context=sum(
            g.bytes_per_token for g in groups if g.kind in ("full", "mla")
        ),
        kv_groups=groups,
        stored_weight_bytes=c.body.nbytes + ends.stored_bytes(plain, tied),
        source=source,
        notes=(*prec.notes, *notes),
    )
