"""Architectures the geometry does not model are refused in one line.

The configs are trimmed from the public Hugging Face files (keys and values as published):
state-spaces/mamba-130m-hf, RWKV/rwkv-4-169m-pile, ai21labs/Jamba-v0.1, Qwen3-Next-80B-A3B,
nvidia Nemotron-H, tiiuae Falcon-H1, google-t5/t5-small and openai/whisper-tiny.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.errors import GeometryError
from tokenwatt.geometry import geometry_from_config, load_geometry

MAMBA_130M: dict[str, Any] = {
    "architectures": ["MambaForCausalLM"],
    "model_type": "mamba",
    "hidden_size": 768,
    "intermediate_size": 1536,
    "state_size": 16,
    "num_hidden_layers": 24,
    "vocab_size": 50280,
    "conv_kernel": 4,
    "expand": 2,
    "time_step_rank": 48,
    "use_bias": False,
    "use_conv_bias": True,
    "residual_in_fp32": True,
    "layer_norm_epsilon": 1e-05,
    "torch_dtype": "float32",
}
RWKV_169M: dict[str, Any] = {
    "architectures": ["RwkvForCausalLM"],
    "model_type": "rwkv",
    "hidden_size": 768,
    "attention_hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "context_length": 1024,
    "vocab_size": 50277,
    "rescale_every": 6,
    "layer_norm_epsilon": 1e-05,
    "tie_word_embeddings": False,
}
JAMBA: dict[str, Any] = {
    "architectures": ["JambaForCausalLM"],
    "model_type": "jamba",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_experts": 16,
    "num_experts_per_tok": 2,
    "expert_layer_period": 2,
    "expert_layer_offset": 1,
    "attn_layer_period": 8,
    "attn_layer_offset": 4,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_dt_rank": 256,
    "vocab_size": 65536,
    "torch_dtype": "bfloat16",
}
QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "intermediate_size": 5120,
    "vocab_size": 151936,
}
NEMOTRON_H: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 4096,
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "mamba_num_heads": 128,
    "ssm_state_size": 128,
    "intermediate_size": 21504,
    "vocab_size": 131072,
}
FALCON_H1: dict[str, Any] = {
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "mamba_d_ssm": 3072,
    "mamba_n_heads": 24,
    "mamba_d_state": 256,
    "intermediate_size": 8192,
    "vocab_size": 65537,
}
T5_SMALL: dict[str, Any] = {
    "architectures": ["T5ForConditionalGeneration"],
    "model_type": "t5",
    "d_model": 512,
    "d_ff": 2048,
    "d_kv": 64,
    "num_heads": 8,
    "num_layers": 6,
    "vocab_size": 32128,
    "is_encoder_decoder": True,
    "feed_forward_proj": "relu",
}
WHISPER_TINY: dict[str, Any] = {
    "architectures": ["WhisperForConditionalGeneration"],
    "model_type": "whisper",
    "d_model": 384,
    "encoder_layers": 4,
    "decoder_layers": 4,
    "encoder_attention_heads": 6,
    "decoder_attention_heads": 6,
    "vocab_size": 51865,
    "is_encoder_decoder": True,
}

CASES = [
    (MAMBA_130M, "mamba", "attention-free"),
    (RWKV_169M, "rwkv", "attention-free"),
    (JAMBA, "jamba", "hybrid"),
    (QWEN3_NEXT, "qwen3_next", "hybrid"),
    (NEMOTRON_H, "nemotron_h", "hybrid"),
    (FALCON_H1, "falcon_h1", "hybrid"),
    (T5_SMALL, "t5", "encoder-decoder"),
    (WHISPER_TINY, "whisper", "encoder-decoder"),
]


def refusal(cfg: dict[str, Any], overrides: dict[str, Any] | None = None) -> str:
    with pytest.raises(GeometryError) as info:
        geometry_from_config(cfg, name="x", overrides=overrides)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(("cfg", "model_type", "kind"), CASES)
def test_unsupported_architecture_is_named_in_one_line(
    cfg: dict[str, Any], model_type: str, kind: str
) -> None:
    msg = refusal(cfg)
    assert f"model_type {model_type!r}" in msg
    assert kind in msg
    assert "supported: decoder-only transformers" in msg
    assert "--set config.num_attention_heads" not in msg  # the old hint led to a Llama


@pytest.mark.parametrize(
    "overrides",
    [
        {"config.num_attention_heads": 12},  # what the old message told the user to do
        {"config.num_attention_heads": 12, "config.model_type": "llama"},
        {"config.model_type": "llama", "config.architectures": ["LlamaForCausalLM"]},
        {"config.state_size": None, "config.model_type": None},
    ],
)
def test_no_override_turns_mamba_into_a_llama(overrides: dict[str, Any]) -> None:
    assert "'mamba'" in refusal(MAMBA_130M, overrides)


def test_mamba_without_model_type_is_known_by_its_architecture_then_its_keys() -> None:
    cfg = {k: v for k, v in MAMBA_130M.items() if k != "model_type"}
    assert "architecture 'MambaForCausalLM'" in refusal(cfg)
    bare = {k: v for k, v in cfg.items() if k != "architectures"}
    assert "key 'state_size'" in refusal(bare)


def test_hybrid_without_model_type_is_known_by_its_keys() -> None:
    cfg = {k: v for k, v in JAMBA.items() if k not in ("model_type", "architectures")}
    assert "hybrid" in refusal(cfg)


def test_encoder_decoder_flag_alone_is_refused() -> None:
    cfg = {**T5_SMALL, "model_type": "my_seq2seq", "architectures": ["MySeq2Seq"]}
    assert "is_encoder_decoder" in refusal(cfg)


def test_supported_presets_still_load() -> None:
    for name in ("llama-3.1-8b", "gpt-oss-20b", "deepseek-v3", "qwen3-30b-a3b"):
        assert load_geometry(name).total_params > 0


@pytest.mark.parametrize(("cfg", "model_type"), [(MAMBA_130M, "mamba"), (JAMBA, "jamba")])
def test_cli_refuses_in_one_line(tmp_path: Path, cfg: dict[str, Any], model_type: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), "utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "geometry", str(path), "--set", "config.n_head=12"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "120"},
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"model_type {model_type!r}" in proc.stderr
    assert proc.stdout == ""


def test_layer_types_with_linear_attention_layers_are_refused() -> None:
    # a Qwen3-Next-style layer list on an otherwise Llama-looking config
    cfg = {
        "model_type": "my_hybrid",
        "hidden_size": 2048,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "intermediate_size": 5120,
        "vocab_size": 151936,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    }
    assert "layer_types has linear_attention layers" in refusal(cfg)
