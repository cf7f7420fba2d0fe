"""Which architectures the geometry models, and a one-line refusal for the rest.

The counter walks attention + MLP decoder layers. A state-space or recurrent model (Mamba,
RWKV) has no attention and no KV cache that grows with the context; a hybrid (Jamba,
Qwen3-Next, Nemotron-H …) mixes such layers with attention; an encoder-decoder (T5, BART,
Whisper) decodes against an encoder's output. Counting any of them as a Llama gives
confident, wrong numbers (a Mamba-130m read as a 4.3 B-param decoder with 640 KiB of KV per
token), so they are refused by ``model_type``, by ``architectures`` and by the keys only
such configs carry; the check runs on the config as written, so no ``--set`` turns one into
a Llama.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenwatt.errors import GeometryError

__all__ = ["SUPPORTED", "check_supported", "unsupported_reason"]

SUPPORTED = (
    "decoder-only transformers with attention in every layer: llama, mistral, mixtral, "
    "qwen2/qwen3 (dense and MoE), gpt_oss, deepseek_v2/v3, kimi_k2, llama4, and the "
    "two-matrix MLP families opt, gpt2, gpt_neo, gpt_neox, gptj, falcon, phi, bloom, "
    "gpt_bigcode, starcoder2, mpt; other decoders are counted by their activation or tensor "
    "names (Llama-style by default)"
)

_KINDS: dict[str, frozenset[str]] = {
    "an attention-free state-space/recurrent model": frozenset(
        {
            "mamba",
            "mamba2",
            "falcon_mamba",
            "rwkv",
            "rwkv5",
            "rwkv6",
            "rwkv7",
            "xlstm",
            "retnet",
            "hgrn",
            "hgrn2",
            "rwkv_world",
        }
    ),
    "a hybrid of attention and state-space/linear-attention layers": frozenset(
        {
            "jamba",
            "qwen3_next",
            "nemotron_h",
            "falcon_h1",
            "zamba",
            "zamba2",
            "bamba",
            "granitemoehybrid",
            "plamo2",
            "lfm2",
            "lfm2_moe",
            "recurrent_gemma",
            "hymba",
            "minimax",
            "minimax_m1",
            "kimi_linear",
        }
    ),
    "an encoder-decoder model": frozenset(
        {
            "t5",
            "mt5",
            "umt5",
            "longt5",
            "switch_transformers",
            "bart",
            "mbart",
            "pegasus",
            "pegasus_x",
            "marian",
            "m2m_100",
            "nllb_moe",
            "led",
            "blenderbot",
            "blenderbot-small",
            "fsmt",
            "prophetnet",
            "whisper",
            "seamless_m4t",
            "seamless_m4t_v2",
            "speech_to_text",
            "encoder-decoder",
        }
    ),
}
# keys only such configs carry (checked when model_type is missing or was changed)
_KEY_KINDS: dict[str, str] = {
    "ssm_cfg": "an attention-free state-space/recurrent model",
    "state_size": "an attention-free state-space/recurrent model",
    "d_state": "an attention-free state-space/recurrent model",
    "time_step_rank": "an attention-free state-space/recurrent model",
    "rescale_every": "an attention-free state-space/recurrent model",
    "attention_hidden_size": "an attention-free state-space/recurrent model",
    "mamba_d_state": "a hybrid of attention and state-space/linear-attention layers",
    "mamba_expand": "a hybrid of attention and state-space/linear-attention layers",
    "mamba_n_heads": "a hybrid of attention and state-space/linear-attention layers",
    "ssm_state_size": "a hybrid of attention and state-space/linear-attention layers",
    "attn_layer_period": "a hybrid of attention and state-space/linear-attention layers",
    "attn_layer_offset": "a hybrid of attention and state-space/linear-attention layers",
    "hybrid_override_pattern": "a hybrid of attention and state-space/linear-attention layers",
    "layers_block_type": "a hybrid of attention and state-space/linear-attention layers",
    "linear_conv_kernel_dim": "a hybrid of attention and state-space/linear-attention layers",
    "linear_num_value_heads": "a hybrid of attention and state-space/linear-attention layers",
    "block_types": "a hybrid of attention and state-space/linear-attention layers",
    "encoder_layers": "an encoder-decoder model",
    "num_decoder_layers": "an encoder-decoder model",
    "decoder_layers": "an encoder-decoder model",
}
# layer_types entries of layers that hold a recurrent state instead of a KV cache
_NON_ATTENTION_LAYERS = frozenset(
    {"linear_attention", "mamba", "mamba2", "conv", "recurrent", "ssm", "rwkv", "lightning"}
)
_ARCH_WORDS: dict[str, str] = {
    "mamba": "an attention-free state-space/recurrent model",
    "rwkv": "an attention-free state-space/recurrent model",
    "jamba": "a hybrid of attention and state-space/linear-attention layers",
    "zamba": "a hybrid of attention and state-space/linear-attention layers",
    "nemotronh": "a hybrid of attention and state-space/linear-attention layers",
    "qwen3next": "a hybrid of attention and state-space/linear-attention layers",
    "falconh1": "a hybrid of attention and state-space/linear-attention layers",
    "bamba": "a hybrid of attention and state-space/linear-attention layers",
    "t5": "an encoder-decoder model",
    "bart": "an encoder-decoder model",
    "whisper": "an encoder-decoder model",
}


def _kind_of_type(model_type: str) -> str | None:
    norm = model_type.strip().lower()
    for kind, types in _KINDS.items():
        if norm in types:
            return kind
    return None


def _kind_of_arch(archs: Any) -> tuple[str, str] | None:
    if not isinstance(archs, list):
        return None
    for arch in archs:
        if not isinstance(arch, str):
            continue
        norm = arch.lower().replace("_", "")
        for word, kind in _ARCH_WORDS.items():
            if norm.startswith(word):
                return arch, kind
    return None


def unsupported_reason(cfg: Mapping[str, Any]) -> str | None:
    """Why the geometry cannot model this (text) config, in one line; None when it can."""
    mt = cfg.get("model_type")
    if isinstance(mt, str) and (kind := _kind_of_type(mt)) is not None:
        return f"model_type {mt!r} is {kind}"
    if (found := _kind_of_arch(cfg.get("architectures"))) is not None:
        return f"architecture {found[0]!r} is {found[1]}"
    types = cfg.get("layer_types")
    if isinstance(types, list):
        odd = sorted({t for t in types if isinstance(t, str) and t in _NON_ATTENTION_LAYERS})
        if odd:
            return f"layer_types has {', '.join(odd)} layers: a hybrid without KV cache there"
    if cfg.get("is_encoder_decoder") is True:
        return "is_encoder_decoder is true: an encoder-decoder model"
    for key, kind in _KEY_KINDS.items():
        if cfg.get(key) is not None:
            return f"key {key!r} marks {kind}"
    return None


def check_supported(cfg: Mapping[str, Any]) -> None:
    """Raise a one-line GeometryError for an architecture the geometry does not model."""
    reason = unsupported_reason(cfg)
    if reason is not None:
        name = cfg.get("model_type")
        label = f" ({name})" if isinstance(name, str) and name else ""
        raise GeometryError(
            f"config.json{label}: {reason}, which tokenwatt's geometry does not model "
            f"(no --set can make it a Llama); supported: {SUPPORTED}"
        )
