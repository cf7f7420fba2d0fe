"""KV bytes per token by layer group, the bytes a sequence occupies, and the simulator's
KV capacity, each checked against a hand calculation written out here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.geometry import geometry_from_config, load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.sim import BLOCK_SIZE, SimConfig, VirtualSim

MODELS = Path("/work/shared/models")
GPT_OSS_FILE = MODELS / "gpt-oss-20b.json"

# Mistral-7B-v0.1's geometry: every one of its 32 layers slides over 4096 tokens
# (sliding_window 4096, no use_sliding_window key, no layer_types).
MISTRAL_V01: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

GIB = 2**30


def _gpt_oss() -> Any:
    if GPT_OSS_FILE.is_file():
        return load_geometry(str(GPT_OSS_FILE))
    return load_geometry("gpt-oss-20b")  # the bundled copy of the same file


def test_gpt_oss_bytes_per_token_by_group() -> None:
    g = _gpt_oss()
    # 24 layers alternate sliding (window 128) and full; 8 KV heads × head_dim 64:
    # one layer caches 2 (K, V) × 8 × 64 × 2 B = 2,048 B per token; 12 layers per kind.
    assert g.kv_bytes_per_token_full_attention == 12 * 2048 == 24_576
    assert g.kv_bytes_per_token_sliding_window == 12 * 2048 == 24_576
    assert g.kv_bytes_per_token_chunked == 0
    assert g.kv_bytes_per_token_mla == 0
    assert g.kv_bytes_per_token_full_context == 24_576  # only full layers grow with context
    assert g.kv_bytes_per_token_all_layers == 24 * 2048 == 49_152


def test_gpt_oss_sequence_footprint_caps_the_sliding_layers() -> None:
    g = _gpt_oss()
    assert g.kv_cache_bytes(0) == 0
    assert g.kv_cache_bytes(100) == 100 * 49_152  # inside the window: every layer holds all
    # 1,000 tokens: full layers hold 1,000, sliding layers their last 128
    assert g.kv_cache_bytes(1000) == 1000 * 24_576 + 128 * 24_576 == 27_721_728


def test_gpt_oss_sim_capacity_counts_the_sliding_layers() -> None:
    g = _gpt_oss()
    sim = SimConfig(
        geometry=g,
        accelerator=get_accelerator("h100-sxm"),
        kv_cache_gib=10,
        max_model_len=8192,
        prefill_cost=False,
    )
    d = sim.derive()
    # a 16-token block: 16 × 49,152 B = 786,432 B; 10 GiB = 10,737,418,240 B
    # → 10,737,418,240 // 786,432 = 13,653 blocks = 218,448 tokens
    # (from the full layers alone it was 393,216-B blocks: 27,306 blocks, 2× too many)
    assert d.kv_block_bytes == 786_432
    assert d.num_blocks == 13_653
    assert d.num_blocks * BLOCK_SIZE == 218_448


def test_sliding_only_model_groups_and_footprint() -> None:
    g = geometry_from_config(MISTRAL_V01, name="mistral-7b-v0.1")
    # 2 × 32 layers × 8 KV heads × 128 (4096/32) × 2 B = 131,072 B per cached token
    assert [(k.kind, k.layers, k.window) for k in g.kv_groups] == [("sliding", 32, 4096)]
    assert g.kv_bytes_per_token_sliding_window == 131_072
    assert g.kv_bytes_per_token_full_context == 0
    assert g.kv_bytes_per_token_all_layers == 131_072
    assert g.kv_cache_bytes(10_000) == 4096 * 131_072  # capped at the window


def test_sliding_only_model_sim_capacity() -> None:
    g = geometry_from_config(MISTRAL_V01, name="mistral-7b-v0.1")
    cfg = SimConfig(
        geometry=g,
        accelerator=get_accelerator("h100-sxm"),
        kv_cache_gib=8,
        max_model_len=4096,
        prefill_cost=False,
    )
    d = cfg.derive()
    # block: 16 × 131,072 B = 2,097,152 B (2 MiB); 8 GiB / 2 MiB = 4,096 blocks = 65,536 tokens
    # (it was 16-byte blocks: 536,870,912 blocks, 8.6 G tokens)
    assert d.kv_block_bytes == 2_097_152
    assert d.num_blocks == 4096
    assert VirtualSim(cfg).node.replicas[0].num_blocks == 4096


def test_sliding_only_sim_preempts_when_its_real_capacity_is_full() -> None:
    g = geometry_from_config(MISTRAL_V01, name="mistral-7b-v0.1")
    # 20 MiB of KV = 10 blocks of 2 MiB = 160 tokens: two 70-token prompts that grow to 150
    # tokens each cannot both stay (sized from full layers only, 20 MiB held 1.3 M blocks)
    cfg = SimConfig(
        geometry=g,
        accelerator=get_accelerator("h100-sxm"),
        kv_cache_gib=20 / 1024,
        max_model_len=160,
        prefill_cost=False,
    )
    sim = VirtualSim(cfg)
    assert sim.node.replicas[0].num_blocks == 10
    a = sim.submit(0.0, 70, 80)
    b = sim.submit(0.0, 70, 80)
    sim.run()
    assert a.generated == b.generated == 80
    assert a.preemptions + b.preemptions >= 1


def test_dense_full_attention_model_all_layers_equals_full_context() -> None:
    g = load_geometry("llama-3.1-8b")
    # 2 × 32 × 8 × 128 × 2 B = 131,072 B, all full attention
    assert g.kv_bytes_per_token_all_layers == g.kv_bytes_per_token_full_context == 131_072
    assert g.kv_cache_bytes(5000) == 5000 * 131_072


def test_mla_model_counts_its_latent() -> None:
    g = load_geometry("deepseek-v3")
    # 61 layers × (512 + 64) × 2 B = 70,272 B
    assert g.kv_bytes_per_token_mla == g.kv_bytes_per_token_all_layers == 70_272
    assert g.kv_bytes_per_token_full_attention == 0


def test_result_files_with_the_old_field_name_still_load() -> None:
    g = load_geometry("qwen3-30b-a3b")
    data = json.loads(json.dumps(g.to_dict()))
    data["kv_bytes_per_token"] = data.pop("kv_bytes_per_token_full_context")
    assert type(g).from_dict(data) == g


@pytest.mark.parametrize("old", ["kv_bytes_per_token", "kv_bytes_per_token_full_context"])
def test_override_under_the_old_and_new_name(old: str) -> None:
    g = load_geometry("llama-3.1-8b", overrides={old: 1000})
    assert g.kv_bytes_per_token_full_context == 1000
