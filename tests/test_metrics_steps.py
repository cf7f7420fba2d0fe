"""Chunk → step logic (``metrics.steps``) on hand-built streams, and the engine's spec-decode
counters (``engine.speculation``) parsed from exposition text (captured and hand-written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.engine.parse import MetricsParseError
from tokenwatt.engine.speculation import spec_counters_from_text
from tokenwatt.metrics.steps import request_steps, step_figures
from tokenwatt.records import RequestRecord

MS = 1_000_000
FIXTURES = Path(__file__).parent / "fixtures" / "engine_metrics"


def rec(tokens: list[int], step_ms: float = 10.0, t0_ms: float = 100.0) -> RequestRecord:
    """A stream of one chunk per step, ``step_ms`` apart, first at ``t0_ms``."""
    stamps = [round((t0_ms + i * step_ms) * MS) for i in range(len(tokens))]
    return RequestRecord(0, 0, 0, sum(tokens), chunk_ns=stamps, chunk_tokens=tokens)


def test_one_token_per_chunk_is_one_step_per_token() -> None:
    r = request_steps(rec([1] * 11))
    assert r is not None and (r.decode_steps, r.decode_tokens) == (10, 10)
    assert r.acceptance_length == 1.0 and r.decode_s == pytest.approx(0.1)
    f = step_figures([rec([1] * 11)])
    assert f.speculation == "none" and not f.coalesced
    assert f.itl_chunk_s == pytest.approx(0.010) and f.itl_token_s == pytest.approx(0.010)
    assert f.steps_per_s == pytest.approx(100.0)


def test_verify_steps_and_a_final_partial_step() -> None:
    """k = 3: chunks of 1 + accepted; the last step is cut by max_tokens (2 of a possible 4)."""
    tokens = [1, 4, 2, 3, 1, 4, 2]  # 17 tokens, 6 verify steps, the last one partial
    f = step_figures([rec(tokens, step_ms=20.0)], declared_k=3)
    assert (f.decode_steps, f.decode_tokens, f.tokens) == (6, 16, 17)
    assert f.acceptance_length == pytest.approx(16 / 6)
    assert f.itl_chunk_s == pytest.approx(0.020)  # one engine step
    assert f.itl_token_s == pytest.approx(0.120 / 16)  # TPOT: per token
    assert f.steps_per_s == pytest.approx(50.0)
    assert f.speculation == "declared" and not f.coalesced
    detected = step_figures([rec(tokens)])
    assert detected.speculation == "detected" and not detected.coalesced


def test_probe_figures_are_step_and_token_weighted() -> None:
    """Two requests: α over the probe is Σ tokens ÷ Σ steps, not the mean of ratios."""
    a, b = rec([1, 2, 2], step_ms=10.0), rec([1, 4, 4, 4, 4], step_ms=30.0)
    f = step_figures([a, b], declared_k=3)
    assert f.acceptance_length == pytest.approx((4 + 16) / (2 + 4))
    assert f.itl_chunk_s == pytest.approx((0.020 + 0.120) / 6)
    assert f.acceptance_length_p50 == pytest.approx((2.0 + 4.0) / 2)


def test_coalesced_chunks_are_not_steps() -> None:
    """An engine sending a fixed 4 tokens per chunk (stream interval) is coalescing, not
    speculating: every non-final decode chunk the same size above one."""
    f = step_figures([rec([1, 4, 4, 4, 4, 2]), rec([1, 4, 4, 1])])
    assert f.coalesced and f.speculation == "none"
    # declared k = 1, yet chunks of 3: more than k + 1 tokens, so steps were merged
    g = step_figures([rec([1, 2, 3, 1, 2])], declared_k=1)
    assert g.coalesced and g.speculation == "declared"


def test_streams_without_a_decode_step() -> None:
    assert request_steps(rec([5])) is None  # one chunk: no step between chunks
    failed = RequestRecord(1, 0, 0, 8, chunk_ns=[1, 2, 3], chunk_tokens=[1, 1, 1], status="error")
    f = step_figures([rec([7]), failed])
    assert f.requests == 0 and f.acceptance_length is None and f.steps_per_s is None


VLLM_SPEC = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 150.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 180.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 90.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 45.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 15.0
"""


def test_vllm_counters_summed_over_engines_and_differenced() -> None:
    c = spec_counters_from_text(VLLM_SPEC)
    assert c is not None
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (150.0, 450.0, 270.0)
    assert c.accepted_per_pos == (135.0, 90.0, 45.0)
    assert c.acceptance_length == pytest.approx(1 + 270 / 150)
    assert c.acceptance_rate == pytest.approx(270 / 450)
    before = spec_counters_from_text(VLLM_SPEC.replace("100.0", "40.0").replace("180.0", "80.0"))
    assert before is not None
    d = c.minus(before)
    assert d.drafts == 60.0 and d.accepted_tokens == 100.0


def test_llamacpp_captured_counters_and_sglang_gauge() -> None:
    """llama-server's real exposition (speculation off: zeros) parses; with no draft yet the
    acceptance length is undefined, not 1. SGLang: the gauge is the figure."""
    c = spec_counters_from_text((FIXTURES / "llamacpp.captured.txt").read_text())
    assert c is not None and c.drafts == 0.0 and c.acceptance_length is None
    sglang = (
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{dp_rank="0",model_name="glm",tp_rank="0"} 2.9\n'
    )
    g = spec_counters_from_text(sglang)
    assert g is not None and g.acceptance_length == pytest.approx(2.9)
    vllm_plain = (FIXTURES / "vllm.handwritten.txt").read_text()
    assert spec_counters_from_text(vllm_plain) is None  # speculation off: no families
    with pytest.raises(MetricsParseError):
        spec_counters_from_text("not { prometheus")


def test_probe_view_shows_steps_only_when_a_step_is_not_one_token() -> None:
    """``tokenwatt probe``'s table: ITL per chunk and per token, steps/s and α (with the
    engine's beside it) when speculation or coalescing is seen; nothing extra otherwise."""
    from rich.console import Console
    from rich.table import Table

    from tokenwatt.report.terminal import step_rows as _step_rows

    def render(records: list[RequestRecord], engine: float | None = None) -> str:
        t = Table()
        t.add_column("figure")
        t.add_column("value")
        _step_rows(t, step_figures(records).model_copy(update={"engine_acceptance_length": engine}))
        console = Console(width=200, record=True)
        console.print(t)
        return console.export_text()

    text = render([rec([1, 4, 2, 3, 1, 4, 2], step_ms=20.0)], engine=2.75)
    assert "ITL per chunk / per token, ms" in text and "20.0 / 7.5" in text
    assert "speculation detected" in text and "2.667 (engine 2.750)" in text
    assert "ITL per chunk" not in render([rec([1] * 11)])
    assert "coalesced chunks" in render([rec([1, 4, 4, 4, 2])])


def test_per_token_events_grouped_into_steps_by_burst() -> None:
    """llama-server sends each accepted token as its own event, back to back: with
    ``burst_ns`` the events of one step (µs apart) are one step of several tokens."""
    us = 1000
    # first token at 0, then steps ending at 20, 40, 60 ms carrying 3, 1, 2 tokens
    stamps = [0, 20 * MS - 40 * us, 20 * MS - 20 * us, 20 * MS, 40 * MS, 60 * MS - 10 * us, 60 * MS]
    r = RequestRecord(0, 0, 0, 7, chunk_ns=stamps, chunk_tokens=[1] * 7)
    plain = step_figures([r])
    assert plain.decode_steps == 6 and plain.acceptance_length == 1.0
    grouped = step_figures([r], burst_ns=1 * MS)
    assert (grouped.decode_steps, grouped.decode_tokens) == (3, 6)
    assert grouped.acceptance_length == pytest.approx(2.0)
    assert grouped.itl_chunk_s == pytest.approx(0.020)  # step ends: 20, 40, 60 ms
    assert grouped.speculation == "detected"
