"""The simulator over real HTTP on loopback, through the official ``openai`` client."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tokenwatt.geometry.model import KVGroup, ModelGeometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.sim import RunningSim, SimConfig, start_sim_thread


def dense_geometry() -> ModelGeometry:
    """A small dense model: 1 GB of weights, 64 KiB of KV per token (≈0.6 ms steps on H100)."""
    return ModelGeometry(
        name="toy-dense",
        model_type="llama",
        total_params=500_000_000,
        active_params=500_000_000,
        mtp_params=0,
        embedding_params=0,
        lm_head_params=0,
        tied_embeddings=False,
        layers=16,
        moe_layers=0,
        experts=0,
        experts_per_token=0,
        shared_experts=0,
        expert_params=0,
        weight_dtype="bf16",
        kv_dtype="bf16",
        dense_weight_bytes=1_000_000_000,
        expert_bytes=0,
        kv_bytes_per_token=65536,
        kv_groups=(KVGroup("full", 16, 65536),),
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    config = SimConfig(
        geometry=dense_geometry(),
        accelerator=get_accelerator("h100"),
        max_model_len=4096,
        kv_cache_bytes=2e9,
    )
    with start_sim_thread(config) as running:
        yield running


@pytest.fixture
def client(sim: RunningSim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url, api_key="unused", max_retries=0, timeout=20)


def test_streaming_completion_with_usage(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="toy-dense",
        prompt="one two three four",
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert len(texts) == 7
    assert all(t.startswith(" ") and len(t.split()) == 1 for t in texts)
    assert finishes == [None] * 6 + ["length"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4, 7, 11)
    assert len({c.id for c in chunks}) == 1
