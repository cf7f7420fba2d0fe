"""Engine /metrics text → the canonical figures, on dumps of each engine.

Fixtures under tests/fixtures/engine_metrics say in their first line whether they were
CAPTURED from a running server (the simulator, llama-server) or HAND-WRITTEN from the
engine's published metric names. Expected values are read off the dumps by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.engine import (
    ENGINE_NAMES,
    MetricsParseError,
    detect_engine,
    parse_samples,
    sample_from_text,
)

DUMPS = Path(__file__).parent / "fixtures" / "engine_metrics"


def dump(name: str) -> str:
    return (DUMPS / name).read_text("utf-8")


def test_every_fixture_says_where_it_came_from() -> None:
    for path in DUMPS.glob("*.txt"):
        first = path.read_text("utf-8").splitlines()[0]
        assert ("HAND-WRITTEN" in first) or ("captured" in first), path.name
        assert ("handwritten" in path.name) or ("captured" in path.name), path.name


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("vllm.handwritten.txt", "vllm"),
        ("sim_vllm_names.captured.txt", "vllm"),
        ("sglang.handwritten.txt", "sglang"),
        ("tgi.handwritten.txt", "tgi"),
        ("llamacpp.handwritten.txt", "llamacpp"),
        ("trtllm.handwritten.txt", "trtllm"),
    ],
)
def test_engine_detected_from_names(name: str, engine: str) -> None:
    assert detect_engine(set(parse_samples(dump(name)))) == engine


def test_vllm_sums_replicas_and_reasons() -> None:
    s = sample_from_text(dump("vllm.handwritten.txt"), "vllm", 7)
    assert s.t_ns == 7
    assert s.counters == {
        "requests_finished": 40 + 60 + 0 + 96,
        "prompt_tokens": 102400 + 98304,
        "generated_tokens": 25600 + 24576,
        "decode_steps": 2100 + 1900,  # iteration histogram counts: one per engine step
        "preemptions": 3,
    }
    # running and waiting add over replicas; KV usage is a per-replica fraction: mean
    assert s.gauges == {"running": 22, "waiting": 3, "kv_usage": pytest.approx(0.375)}


def test_simulator_dump_matches_its_requests() -> None:
    # captured after 3 requests of 16 prompt + 8 output tokens, all finished
    s = sample_from_text(dump("sim_vllm_names.captured.txt"), "vllm", 0)
    assert s.counters["requests_finished"] == 3
    assert s.counters["prompt_tokens"] == 48
    assert s.counters["generated_tokens"] == 24
    assert s.gauges["running"] == 0


def test_sglang() -> None:
    s = sample_from_text(dump("sglang.handwritten.txt"), "sglang", 0)
    assert s.counters == {
        "requests_finished": 29589,
        "prompt_tokens": 8128902,
        "generated_tokens": 7557572,
    }
    assert s.gauges == {"running": 162, "waiting": 2826, "kv_usage": 0.28}


def test_tgi_counters_without_total_suffix_and_decode_label() -> None:
    s = sample_from_text(dump("tgi.handwritten.txt"), "tgi", 0)
    assert s.counters == {
        "requests_finished": 118,
        "prompt_tokens": 61440,
        "generated_tokens": 30208,
        "decode_steps": 15000,  # method="decode" only, not the 140 prefills
    }
    assert s.gauges == {"running": 16, "waiting": 4}


def test_llamacpp_busy_slots_average_is_undone() -> None:
    s = sample_from_text(dump("llamacpp.handwritten.txt"), "llamacpp", 0)
    assert s.counters == {
        "prompt_tokens": 240 + 60,  # processed + reused from the prompt cache
        "generated_tokens": 640,
        "decode_steps": 500,
        "busy_slot_decodes": 750,  # 1.5 × 500
    }
    assert s.gauges == {"running": 2, "waiting": 1}


def test_trtllm_only_counts_requests() -> None:
    s = sample_from_text(dump("trtllm.handwritten.txt"), "trtllm", 0)
    assert s.counters == {"requests_finished": 57}
    assert s.gauges == {}


def test_every_engine_maps_requests_or_tokens() -> None:
    for engine, names in ENGINE_NAMES.items():
        assert "requests_finished" in names or "generated_tokens" in names, engine


def test_garbage_is_a_parse_error() -> None:
    with pytest.raises(MetricsParseError, match="not Prometheus"):
        parse_samples("<html><body>404 not found</body></html>\n")


def test_captured_llama_server_dump() -> None:
    # captured after 2 concurrent requests of 9 prompt tokens (8 words + BOS) and 16 outputs
    s = sample_from_text(dump("llamacpp.captured.txt"), "llamacpp", 0)
    assert s.counters["prompt_tokens"] == 2 * 9  # processed 18 + cached 0
    assert s.counters["generated_tokens"] == 2 * 16
    assert s.counters["decode_steps"] == 18
    # 1.88889 busy slots per call × 18 calls = 34 slot-decodes (6 significant digits printed)
    assert s.counters["busy_slot_decodes"] == pytest.approx(34, abs=1e-3)
    assert s.gauges == {"running": 0, "waiting": 0}
