"""ModelGeometry's math against brute force: KV reads per group, their sums, distinct experts."""

from __future__ import annotations

import dataclasses
import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwatt.geometry import KVGroup, ModelGeometry, load_geometry

groups = st.one_of(
    st.builds(
        KVGroup,
        kind=st.sampled_from(["full", "mla"]),
        layers=st.integers(1, 80),
        bytes_per_token=st.integers(0, 10**6),
    ),
    st.builds(
        KVGroup,
        kind=st.sampled_from(["sliding", "chunked"]),
        layers=st.integers(1, 80),
        bytes_per_token=st.integers(0, 10**6),
        window=st.integers(1, 300),
    ),
)


def _brute_tokens_read(g: KVGroup, context: int) -> int:
    """Positions a token at ``context`` attends to among earlier ones, by enumeration."""
    if g.kind == "sliding" and g.window:
        return sum(1 for p in range(context) if context - p <= g.window)
    if g.kind == "chunked" and g.window:
        return sum(1 for p in range(context) if p // g.window == context // g.window)
    return context


@settings(max_examples=200, deadline=None)
@given(g=groups, context=st.integers(0, 1000))
def test_tokens_read_matches_enumeration(g: KVGroup, context: int) -> None:
    assert g.tokens_read(context) == _brute_tokens_read(g, context)


@settings(max_examples=200, deadline=None)
@given(g=groups, m=st.integers(-3, 1500))
def test_tokens_read_prefix_is_the_running_sum(g: KVGroup, m: int) -> None:
    assert g.tokens_read_prefix(m) == sum(g.tokens_read(x) for x in range(max(m, 0)))


def _geom(kv_groups: tuple[KVGroup, ...]) -> ModelGeometry:
    return ModelGeometry(
        name="t", model_type="t", total_params=10, active_params=10, mtp_params=0,
        embedding_params=1, lm_head_params=1, tied_embeddings=False, layers=2, moe_layers=0,
        experts=0, experts_per_token=0, shared_experts=0, expert_params=0, weight_dtype="bf16",
        kv_dtype="bf16", dense_weight_bytes=20, expert_bytes=0,
        kv_bytes_per_token_full_context=sum(
            g.bytes_per_token for g in kv_groups if g.kind in ("full", "mla")
        ),
        kv_groups=kv_groups,
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    gs=st.lists(groups, min_size=1, max_size=4),
    prompt=st.integers(0, 700),
    out=st.integers(0, 300),
)
def test_kv_bytes_read_sum_is_the_per_token_sum(gs: list[KVGroup], prompt: int, out: int) -> None:
    geom = _geom(tuple(gs))
    brute = sum(geom.kv_bytes_read(prompt + i) for i in range(out))
    assert geom.kv_bytes_read_sum(prompt, out) == brute


@settings(max_examples=100, deadline=None)
@given(prompt=st.integers(0, 10**6), out=st.integers(0, 10**5))
def test_full_attention_sum_is_the_seed_formula(prompt: int, out: int) -> None:
    """Token i of a request with input L reads L + i cached tokens: n·L + n(n−1)/2 in all."""
    geom = _geom((KVGroup("full", 48, 98_304),))
    assert geom.kv_bytes_read_sum(prompt, out) == 98_304 * (out * prompt + out * (out - 1) // 2)


def test_gpt_oss_sliding_layers_cap_at_128() -> None:
    g = load_geometry("gpt-oss-20b")
    assert g.kv_bytes_read(100) == 100 * 24_576 * 2
    assert g.kv_bytes_read(5000) == 5000 * 24_576 + 128 * 24_576


def _exact_distinct(e: int, k: int, b: int) -> Fraction:
    """Mean number of distinct experts over every way b tokens can each pick k of e."""
    choices = list(itertools.combinations(range(e), k))
    total = sum(len(set().union(*combo)) for combo in itertools.product(choices, repeat=b))
    return Fraction(total, len(choices) ** b)


@pytest.mark.parametrize(("e", "k", "b"), [(4, 2, 3), (5, 1, 4), (6, 3, 2), (4, 4, 2)])
def test_expected_unique_experts_exact_enumeration(e: int, k: int, b: int) -> None:
    geom = dataclasses.replace(_geom(()), moe_layers=1, experts=e, experts_per_token=k)
    assert geom.expected_unique_experts(b) == pytest.approx(float(_exact_distinct(e, k, b)))


def test_expected_unique_experts_monte_carlo_qwen3() -> None:
    """128 experts, top-8, batch 16: sampled routing agrees with E·(1 − (1 − k/E)^B)."""
    g = load_geometry("qwen3-30b-a3b")
    rng = np.random.default_rng(7)
    trials, batch = 4000, 16
    picks = np.argsort(rng.random((trials, batch, 128)), axis=2)[:, :, :8]
    hit = np.zeros((trials, 128), dtype=bool)
    for t in range(batch):
        np.put_along_axis(hit, picks[:, t, :], True, axis=1)
    distinct = hit.sum(axis=1)
    se = distinct.std() / np.sqrt(trials)
    assert abs(distinct.mean() - g.expected_unique_experts(batch)) < 5 * se


def test_skewed_routing_touches_fewer_experts() -> None:
    """Why the formula is an upper bound: non-uniform routing collides more often."""
    g = load_geometry("qwen3-30b-a3b")
    rng = np.random.default_rng(3)
    weights = rng.zipf(1.5, 128).astype(float)
    p = weights / weights.sum()
    trials, batch = 2000, 16
    # Gumbel top-k: k distinct experts per token, drawn in proportion to p (Plackett-Luce)
    keys = np.log(p) + rng.gumbel(size=(trials, batch, 128))
    picks = np.argsort(-keys, axis=2)[:, :, :8]
    hit = np.zeros((trials, 128), dtype=bool)
    for t in range(batch):
        np.put_along_axis(hit, picks[:, t, :], True, axis=1)
    distinct = hit.sum(axis=1)
    assert np.mean(distinct) < g.expected_unique_experts(batch)


def test_weight_bytes_per_step() -> None:
    dense = load_geometry("llama-3.1-8b")
    assert dense.weight_bytes_per_step(64) == dense.dense_weight_bytes
    assert dense.expected_unique_experts(64) == 0
    q = load_geometry("qwen3-30b-a3b")
    assert q.weight_bytes_per_step(0) == q.dense_weight_bytes
    big = q.weight_bytes_per_step(10**6)
    assert big == pytest.approx(q.dense_weight_bytes + 48 * 128 * q.expert_bytes)


def test_to_dict_round_trip_through_json() -> None:
    for name in ("gpt-oss-20b", "deepseek-v3", "qwen3-30b-a3b-fp8"):
        g = load_geometry(name)
        again = ModelGeometry.from_dict(json.loads(json.dumps(g.to_dict())))
        assert again == g
