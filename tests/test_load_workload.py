"""Workload generation: lengths from each distribution, prompts built to length, ShareGPT, the
prompt-format choice, and reproducibility from the seed."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from tokenwatt.errors import SpecError
from tokenwatt.spec import parse_spec
from tokenwatt.spec.workload import Workload
from tokenwatt.traffic.workload import (
    TOKEN_ID_RANGE,
    WORDS,
    RequestPlan,
    WorkloadGenerator,
    resolve_prompt_format,
)


def plans(workload: dict, n: int, *, fmt: str = "token_ids", seed: int = 0) -> list[RequestPlan]:
    gen = WorkloadGenerator(Workload.model_validate(workload), prompt_format=fmt, seed=seed)  # type: ignore[arg-type]
    return list(itertools.islice(gen, n))


def test_fixed_lengths_token_ids() -> None:
    ps = plans({"input_tokens": 64, "output_tokens": 16}, 50)
    assert [p.index for p in ps] == list(range(50))
    lo, hi = TOKEN_ID_RANGE
    for p in ps:
        assert isinstance(p.prompt, list) and len(p.prompt) == 64 == p.prompt_tokens_client
        assert all(lo <= t < hi for t in p.prompt)
        assert p.max_tokens == 16
    # prompts differ between requests (no shared prefix to cache)
    assert len({tuple(p.prompt[:8]) for p in ps}) == 50  # type: ignore[arg-type]


def test_text_prompts_have_exact_word_counts() -> None:
    ps = plans({"input_tokens": {"kind": "uniform", "min": 1, "max": 300}}, 200, fmt="text")
    words = set(WORDS)
    for p in ps:
        assert isinstance(p.prompt, str)
        parts = p.prompt.split(" ")
        assert len(parts) == p.prompt_tokens_client == len(p.prompt.split())
        assert set(parts) <= words


def test_uniform_is_inclusive_and_flat() -> None:
    ps = plans({"input_tokens": {"kind": "uniform", "min": 3, "max": 6}}, 4000)
    lengths = np.asarray([p.prompt_tokens_client for p in ps])
    assert set(lengths.tolist()) == {3, 4, 5, 6}
    counts = np.bincount(lengths)[3:]
    assert counts.min() > 900 and counts.max() < 1100  # 1000 each expected, sd ≈ 27


def test_normal_and_lognormal_moments_and_clipping() -> None:
    ps = plans(
        {
            "input_tokens": {"kind": "normal", "mean": 200, "std": 20},
            "output_tokens": {"kind": "lognormal", "median": 100, "sigma": 0.5, "max": 400},
        },
        4000,
    )
    ins = np.asarray([p.prompt_tokens_client for p in ps], dtype=float)
    outs = np.asarray([p.max_tokens for p in ps], dtype=float)
    assert ins.mean() == pytest.approx(200, abs=1.5)
    assert ins.std() == pytest.approx(20, rel=0.05)
    assert np.median(outs) == pytest.approx(100, rel=0.05)
    assert outs.max() <= 400 and outs.min() >= 1
    clipped = plans({"input_tokens": {"kind": "normal", "mean": 2, "std": 50, "min": 2}}, 500)
    assert min(p.prompt_tokens_client for p in clipped) == 2


def test_empirical_values_and_file(tmp_path: Path) -> None:
    ps = plans({"output_tokens": {"kind": "empirical", "values": [5, 7]}}, 400)
    assert {p.max_tokens for p in ps} == {5, 7}
    f = tmp_path / "lengths.txt"
    f.write_text("# output lengths\n10\n\n20\n30  # comment\n")
    ps = plans({"input_tokens": {"kind": "empirical", "file": str(f)}}, 300)
    assert {p.prompt_tokens_client for p in ps} == {10, 20, 30}
    f.write_text("10\nlots\n")
    with pytest.raises(SpecError, match=r"workload\.input_tokens\.file: .* line 2"):
        plans({"input_tokens": {"kind": "empirical", "file": str(f)}}, 1)
    with pytest.raises(SpecError, match="cannot read"):
        plans({"input_tokens": {"kind": "empirical", "file": str(tmp_path / "nope")}}, 1)


def test_reproducible_from_seed() -> None:
    w = {"input_tokens": {"kind": "uniform", "min": 1, "max": 50}, "output_tokens": 8}
    a = plans(w, 2000, seed=5)  # crosses the generator's block boundary
    assert plans(w, 2000, seed=5) == a
    assert plans(w, 10, seed=5) == a[:10]
    assert plans(w, 10, seed=6) != a[:10]
    assert plans(w, 10, fmt="text", seed=5) == plans(w, 10, fmt="text", seed=5)


def _sharegpt(tmp_path: Path) -> Path:
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "hello there friend"},
                {"from": "gpt", "value": "one two three four five six"},
            ],
        },
        {
            "id": "b",
            "conversations": [
                {"from": "human", "value": "   "},
                {"from": "gpt", "value": "ignored"},
            ],
        },
        {
            "id": "c",
            "conversations": [
                {"from": "system", "value": "be brief"},
                {"from": "human", "value": "why"},
            ],
        },
        {"id": "d", "conversations": []},
        {"id": "e"},
    ]
    p = tmp_path / "sharegpt.json"
    p.write_text(json.dumps(data))
    return p


def test_sharegpt_first_human_turn_skips_empty(tmp_path: Path) -> None:
    path = _sharegpt(tmp_path)
    ps = plans({"dataset": {"path": str(path)}, "output_tokens": 9}, 6, fmt="text")
    prompts = [p.prompt for p in ps]
    assert set(prompts) == {"hello there friend", "why"}
    assert all(prompts[i : i + 2].count("why") == 1 for i in (0, 2, 4))  # each pass shuffled
    for p in ps:
        assert p.prompt_tokens_client == len(str(p.prompt).split())
        assert p.max_tokens == 9
    # reply mode: only conversations with a reply, ⌈6 words × 4/3⌉ = 8 tokens
    ps = plans({"dataset": {"path": str(path), "output_lengths": "reply"}}, 3, fmt="text")
    assert [(p.prompt, p.max_tokens) for p in ps] == [("hello there friend", 8)] * 3


def test_sharegpt_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match=r"workload\.dataset\.path: .* not valid JSON"):
        plans({"dataset": {"path": str(bad)}}, 1, fmt="text")
    bad.write_text(json.dumps({"conversations": []}))
    with pytest.raises(SpecError, match="JSON list"):
        plans({"dataset": {"path": str(bad)}}, 1, fmt="text")
    bad.write_text(json.dumps([{"conversations": [{"from": "gpt", "value": "x"}]}]))
    with pytest.raises(SpecError, match="no usable conversation"):
        plans({"dataset": {"path": str(bad)}}, 1, fmt="text")


def _spec(**endpoint: object) -> dict:
    return {
        "model": {"source": "qwen3-8b"},
        "hardware": {"accelerator": "h100-sxm"},
        "endpoint": {"url": "sim", **endpoint},
    }


def test_resolve_prompt_format(tmp_path: Path) -> None:
    assert resolve_prompt_format(parse_spec(_spec())) == "token_ids"  # sim, auto
    remote = "http://127.0.0.1:9/v1"
    assert resolve_prompt_format(parse_spec(_spec(url=remote))) == "text"
    assert resolve_prompt_format(parse_spec(_spec(url=remote, prompt_format="token_ids"))) == (
        "token_ids"
    )
    assert resolve_prompt_format(parse_spec(_spec(api="chat"))) == "text"
    with pytest.raises(SpecError, match="chat messages are text"):
        resolve_prompt_format(parse_spec(_spec(api="chat", prompt_format="token_ids")))
    ds = parse_spec(
        {**_spec(prompt_format="token_ids"), "workload": {"dataset": {"path": "x.json"}}}
    )
    with pytest.raises(SpecError, match="dataset's prompts are text"):
        resolve_prompt_format(ds)


# --- shared prefixes ---------------------------------------------------------------------


def test_shared_prefix_token_ids_exact_counts_and_sharing() -> None:
    w = {"input_tokens": 40, "output_tokens": 4, "shared_prefix": {"count": 3, "length": 100}}
    ps = plans(w, 300)
    by_prefix: dict[int, list[RequestPlan]] = {}
    for p in ps:
        assert isinstance(p.prompt, list)
        assert len(p.prompt) == 140 == p.prompt_tokens_client  # L + suffix, exact
        assert p.shared_prefix_tokens == 100 and p.prefix_id in (0, 1, 2)
        assert p.prefix_id is not None
        by_prefix.setdefault(p.prefix_id, []).append(p)
    assert sorted(by_prefix) == [0, 1, 2]
    heads = {k: {tuple(p.prompt[:100]) for p in v} for k, v in by_prefix.items()}  # type: ignore[index]
    assert all(len(h) == 1 for h in heads.values())  # one prefix per id ...
    assert len({next(iter(h)) for h in heads.values()}) == 3  # ... and the ids differ
    # the unique suffix is what the same seed draws without a prefix
    plain = plans({"input_tokens": 40, "output_tokens": 4}, 300)
    assert [p.prompt[100:] for p in ps] == [q.prompt for q in plain]  # type: ignore[index]


def test_shared_prefix_text_word_counts() -> None:
    w = {"input_tokens": {"kind": "uniform", "min": 1, "max": 30}}
    ps = plans({**w, "shared_prefix": {"count": 2, "length": 25}}, 200, fmt="text")
    heads: dict[int | None, set[str]] = {}
    for p in ps:
        assert isinstance(p.prompt, str)
        words = p.prompt.split(" ")
        assert len(words) == p.prompt_tokens_client == len(p.prompt.split())
        assert p.prompt_tokens_client - 25 >= 1
        heads.setdefault(p.prefix_id, set()).add(" ".join(words[:25]))
    assert {k: len(v) for k, v in heads.items()} == {0: 1, 1: 1}


def test_shared_prefix_weights_pick_in_proportion() -> None:
    w = {"input_tokens": 1, "shared_prefix": {"count": 2, "length": 1, "weights": [3, 1]}}
    ids = np.asarray([p.prefix_id for p in plans(w, 4000)])
    # binomial: 4000 × 0.25 = 1000 expected for prefix 1, sd ≈ 27
    assert 900 < int((ids == 1).sum()) < 1100
    assert plans(w, 50, seed=1) == plans(w, 50, seed=1)
    assert [p.prefix_id for p in plans(w, 50, seed=1)] != [p.prefix_id for p in plans(w, 50)]


def test_shared_prefix_spec_errors() -> None:
    with pytest.raises(ValueError, match="weights must be 2 positive"):
        Workload.model_validate({"shared_prefix": {"count": 2, "length": 5, "weights": [1]}})
    with pytest.raises(ValueError, match="weights must be 2 positive"):
        Workload.model_validate({"shared_prefix": {"count": 2, "length": 5, "weights": [1, 0]}})
    with pytest.raises(ValueError, match="trace or dataset fixes each prompt"):
        Workload.model_validate({"shared_prefix": {"length": 5}, "dataset": {"path": "x.json"}})
    err = parse_spec_error({"workload": {"shared_prefix": {"count": 0, "length": 5}}})
    assert "workload.shared_prefix.count" in err and "\n" not in err


def parse_spec_error(workload: dict) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec({**_spec(), **workload})
    return str(info.value)


def test_trace_and_sessions_are_not_sent_as_single_requests() -> None:
    """Until a caller replays them, asking for single requests from such a workload is an error
    naming the field, never a silent fallback to the length distributions."""
    with pytest.raises(SpecError, match=r"workload\.trace: .* remove workload\.trace"):
        plans({"trace": {"path": "t.csv", "format": "azure"}}, 1)
    with pytest.raises(SpecError, match=r"workload\.sessions: "):
        plans({"sessions": {"turns": 2}}, 1, fmt="text")
    with pytest.raises(SpecError, match=r"set endpoint\.api: chat"):
        resolve_prompt_format(parse_spec({**_spec(), "workload": {"sessions": {}}}))
    assert resolve_prompt_format(parse_spec({**_spec(api="chat"), "workload": {"sessions": {}}}))
