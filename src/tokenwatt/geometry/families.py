"""How each decoder family lays out its blocks: MLP shape, norms, biases, position tables.

Why: a parameter count is only as good as its layout rules. A Llama-style count (SwiGLU, three
matrices per MLP, RMSNorm, no biases) reads OPT-1.3B as 1.71 B parameters instead of 1.32 B.
The two-matrix families (OPT, GPT-2, GPT-NeoX/Pythia, GPT-J, Falcon, Phi-1/2, BLOOM,
StarCoder/StarCoder2, MPT, GPT-Neo) use an up and a down projection with a plain activation,
LayerNorm with a bias (two vectors per norm), biases on most linears, one shared norm where
attention and MLP run in parallel (GPT-J, Phi, Falcon-7B), and some a learned position table
(OPT with its offset of 2, GPT-2, StarCoder, GPT-Neo; BLOOM and MPT use ALiBi, the rest RoPE).

The layout is chosen from ``model_type`` (and the architecture names that stand for one);
for a type with no rules here, from ``hidden_act``/``activation_function``: a plain GELU/ReLU
means two matrices, SiLU/SwiGLU three (with a note either way).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tokenwatt.errors import GeometryError
from tokenwatt.geometry.bounds import MAX_HEADS as _MAX_HEADS
from tokenwatt.geometry.bounds import MAX_HIDDEN as _MAX_HIDDEN
from tokenwatt.geometry.reader import Reader

__all__ = [
    "TIED_BY_DEFAULT",
    "TWO_MATRIX_TYPES",
    "Layout",
    "check_layout",
    "family_type",
    "mlp_gated_from_names",
    "read_layout",
]

# model types whose MLP is up/down with a plain activation (no gate)
TWO_MATRIX_TYPES = frozenset(
    {
        "opt",
        "gpt2",
        "gpt_neox",
        "gptj",
        "falcon",
        "phi",
        "bloom",
        "gpt_bigcode",
        "starcoder2",
        "mpt",
        "gpt_neo",
    }
)
# gated MLPs whose activation is GELU, not SiLU (so the activation cannot tell them apart)
_GATED_GELU_TYPES = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
_TYPE_ALIASES = {"refinedweb": "falcon", "refinedwebmodel": "falcon", "rw": "falcon"}
_ARCH_TYPES = {
    "OPTForCausalLM": "opt",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
    "GPTJForCausalLM": "gptj",
    "FalconForCausalLM": "falcon",
    "RWForCausalLM": "falcon",
    "PhiForCausalLM": "phi",
    "BloomForCausalLM": "bloom",
    "GPTBigCodeForCausalLM": "gpt_bigcode",
    "Starcoder2ForCausalLM": "starcoder2",
    "MPTForCausalLM": "mpt",
    "MptForCausalLM": "mpt",
    "GPTNeoForCausalLM": "gpt_neo",
}
# the class default of tie_word_embeddings in the two-matrix families' config classes
TIED_BY_DEFAULT = frozenset(
    {"opt", "gpt2", "gpt_neo", "falcon", "bloom", "gpt_bigcode", "starcoder2", "mpt"}
)
_PLAIN_ACTS = ("gelu", "relu", "tanh", "quick_gelu")
# checkpoint tensor names (safetensors, GGUF) of a gate projection; a MoE router
# (``mlp.gate.weight``) is not one
_GATE_TENSOR = re.compile(r"(gate_proj|gate_up_proj|\.w1\.|\.w3\.|ffn_gate|\.wi_0\.)")
_UP_TENSOR = re.compile(r"\.(fc1|c_fc|dense_h_to_4h|fc_in|up_proj|ffn_up)\.")


def mlp_gated_from_names(names: Iterable[str]) -> bool | None:
    """What a checkpoint's tensor names say of its MLP: True for a gate projection anywhere,
    False for up projections without any gate (fc1, c_fc, dense_h_to_4h …), None for
    neither."""
    up = False
    for name in names:
        if _GATE_TENSOR.search(name):
            return True
        up = up or _UP_TENSOR.search(name) is not None
    return False if up else None


@dataclass(frozen=True, slots=True)
class Layout:
    """The parts of one decoder family that the count needs beyond the attention geometry.

    ``norm_width``: parameters per hidden unit of one norm (1: RMSNorm or a LayerNorm without
    bias, 2: LayerNorm with bias). ``positions``: rows of a learned position table (0: RoPE or
    ALiBi). ``embed_dim``: width of the token embedding and LM head (OPT-350m projects 512 → h).
    """

    family: str
    gated_mlp: bool = True
    ffn_size: int = 0  # 0: the Llama-style rules read intermediate_size themselves
    norm_width: int = 1
    norms_per_layer: int = 2
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    kv_heads: int | None = None  # None: the usual keys decide
    positions: int = 0
    embed_norm: bool = False  # BLOOM's word_embeddings_layernorm
    final_norm: bool = True
    lm_head_bias: bool = False
    embed_dim: int = 0  # 0: hidden_size

    @property
    def two_matrix(self) -> bool:
        return not self.gated_mlp


def family_type(mt: str, archs: list[str]) -> str:
    """The family a config belongs to: its ``model_type`` (old Falcon names mapped), else
    the first architecture name this module knows."""
    key = _TYPE_ALIASES.get(mt.lower(), mt)
    if key in TWO_MATRIX_TYPES:
        return key
    for arch in archs:
        if arch in _ARCH_TYPES:
            return _ARCH_TYPES[arch]
    return key


def _ffn(r: Reader, h: int, *keys: str) -> int:
    """The MLP's inner width from ``keys``; 4·h where the config leaves it null (GPT-2's
    ``n_inner``, BLOOM, GPT-J)."""
    return r.opt_int(*keys, minimum=1, maximum=_MAX_HIDDEN) or 4 * h


def _activation(r: Reader) -> str:
    for key in ("hidden_act", "activation_function", "hidden_activation"):
        value = r.raw(key)
        if value is not None and isinstance(value[1], str):
            return value[1].lower()
    return ""


def _falcon(r: Reader, h: int) -> Layout:
    """Falcon: parallel attention + MLP; 7B shares one LayerNorm and has one KV head
    (``multi_query``), the new decoder (40B/180B) has two norms and ``num_kv_heads``."""
    new = r.bool_("new_decoder_architecture", False)
    bias = r.bool_("bias", False)
    if new:
        norms = r.opt_int("num_ln_in_parallel_attn", minimum=1, maximum=2, default=2) or 2
        kv = r.opt_int("num_kv_heads", "n_head_kv", minimum=1, maximum=_MAX_HEADS)
    else:
        norms = 1 if r.bool_("parallel_attn", True) else 2
        kv = 1 if r.bool_("multi_query", True) else None
    return Layout(
        "falcon",
        gated_mlp=False,
        ffn_size=_ffn(r, h, "ffn_hidden_size"),
        norm_width=2,
        norms_per_layer=norms,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        kv_heads=kv,
    )


def _opt(r: Reader, h: int) -> Layout:
    """OPT: learned positions with an offset of 2, ``word_embed_proj_dim`` (350m: 512 with
    project_in/out), a final LayerNorm only when the norms come first."""
    pre = r.bool_("do_layer_norm_before", True)
    bias = r.bool_("enable_bias", True)
    return Layout(
        "opt",
        gated_mlp=False,
        ffn_size=r.int_("ffn_dim", maximum=_MAX_HIDDEN),
        norm_width=2 if r.bool_("layer_norm_elementwise_affine", True) else 0,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        positions=r.int_("max_position_embeddings") + 2,
        final_norm=pre and not r.bool_("_remove_final_layer_norm", False),
        embed_dim=r.opt_int("word_embed_proj_dim", minimum=1, maximum=_MAX_HIDDEN) or h,
    )


def _mpt(r: Reader, h: int) -> Layout:
    """MPT: ALiBi (no position table), ``no_bias`` drops every bias including the norms'."""
    attn = r.data.get("attn_config")
    attn = attn if isinstance(attn, dict) else {}
    bias = not r.bool_("no_bias", False)
    kv = attn.get("kv_n_heads")
    ratio = r.opt_int("expansion_ratio", minimum=1, maximum=64, default=4) or 4
    return Layout(
        "mpt",
        gated_mlp=False,
        ffn_size=ratio * h,
        norm_width=2 if bias else 1,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        kv_heads=kv if isinstance(kv, int) and not isinstance(kv, bool) and kv > 0 else None,
        positions=0 if attn.get("alibi", True) else r.int_("max_seq_len"),
    )


def _gpt2_like(r: Reader, fam: str, h: int) -> Layout:
    """GPT-2 and StarCoder (gpt_bigcode): learned positions, biases everywhere;
    StarCoder's ``multi_query`` keeps one KV head."""
    mq = fam == "gpt_bigcode" and r.bool_("multi_query", True)
    return Layout(
        fam,
        gated_mlp=False,
        ffn_size=_ffn(r, h, "n_inner"),
        norm_width=2,
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        kv_heads=1 if mq else None,
        positions=r.int_("n_positions", "max_position_embeddings"),
    )


def _two_matrix(r: Reader, fam: str, h: int) -> Layout:
    """The two-matrix families' rules (see the module docstring)."""
    if fam == "falcon":
        return _falcon(r, h)
    if fam == "opt":
        return _opt(r, h)
    if fam == "mpt":
        return _mpt(r, h)
    if fam in ("gpt2", "gpt_bigcode"):
        return _gpt2_like(r, fam, h)
    shared_norm = fam in ("gptj", "phi")  # attention and MLP in parallel after one norm
    if fam == "starcoder2":
        bias = r.bool_("use_bias", True)
    elif fam == "gpt_neox":
        bias = r.bool_("attention_bias", True)
    else:
        bias = fam != "gptj"  # GPT-J's attention has none; Phi, BLOOM, GPT-Neo's out_proj do
    return Layout(
        fam,
        gated_mlp=False,
        ffn_size=_ffn(r, h, "n_inner" if fam in ("gptj", "bloom") else "intermediate_size"),
        norm_width=2,
        norms_per_layer=1 if shared_norm else 2,
        qkv_bias=bias and fam != "gpt_neo",  # GPT-Neo: q/k/v without bias
        o_bias=bias,
        mlp_bias=fam == "gptj" or bias,
        positions=r.int_("max_position_embeddings") if fam == "gpt_neo" else 0,
        embed_norm=fam == "bloom",  # a LayerNorm right after the embedding (BLOOM uses ALiBi)
        lm_head_bias=shared_norm,  # GPT-J and Phi carry an LM-head bias
    )


def read_layout(r: Reader, mt: str, h: int, notes: list[str]) -> Layout:
    """The family's layout; a type without rules here is read from its activation."""
    archs = r.str_list("architectures") or []
    fam = family_type(mt, archs)
    if fam in TWO_MATRIX_TYPES:
        return _two_matrix(r, fam, h)
    if fam in _GATED_GELU_TYPES:
        return Layout(fam)
    if "gated_mlp" in r.forced and r.has("intermediate_size"):
        gated = bool(r.forced["gated_mlp"])
        notes.append(
            f"model_type {mt!r}: MLP read from the checkpoint's tensor names as "
            f"{'gated (three matrices)' if gated else 'two-matrix (up + down)'}"
        )
        if gated:
            return Layout(fam)
        ffn = r.int_("intermediate_size", maximum=_MAX_HIDDEN)
        return Layout(mt, gated_mlp=False, ffn_size=ffn, mlp_bias=r.bool_("mlp_bias", False))
    act = _activation(r)
    if act and "glu" not in act and act.startswith(_PLAIN_ACTS) and r.has("intermediate_size"):
        notes.append(
            f"model_type {mt!r}: hidden_act {act} without a gate, counted as a two-matrix MLP "
            "(up + down, biases as attention_bias/mlp_bias say, RMSNorm); check against the "
            "published count"
        )
        bias = r.bool_("mlp_bias", False)
        ffn = r.int_("intermediate_size", maximum=_MAX_HIDDEN)
        return Layout(mt, gated_mlp=False, ffn_size=ffn, mlp_bias=bias)
    return Layout(fam)


def check_layout(layout: Layout, heads: int) -> None:
    """A KV-head count from a family rule must still divide the query heads."""
    if layout.kv_heads is not None and heads % layout.kv_heads:
        raise GeometryError(
            f"config.json: {layout.kv_heads} KV heads do not divide {heads} attention heads; "
            "fix it with --set config.num_key_value_heads=N"
        )
