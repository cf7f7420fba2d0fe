"""τ over lives longer than the window: a request counted in a short window decodes partly
after it (the drain, at a lighter load), so τ over its life is not the window's, and the
client's B = T·τ/R and 1/τ part from the engine's window counters in opposite directions
while T agrees. Hand-built stamps, checked by hand: τ over the window's own token gaps
(``StepGaps.tau_s``) gives the engine's figures, and only then is the pair explained."""

from __future__ import annotations

import pytest

from tokenwatt.engine import ClientMechanisms, compare_client_engine, window_figures
from tokenwatt.engine.compare import UNEXPLAINED, WINDOW_LIVES
from tokenwatt.metrics.mbu.step_gaps import StepGaps
from tokenwatt.records import RequestRecord
from witness_streams import MS
from witness_streams import stream as _stream


def _records() -> list[RequestRecord]:
    """10 streams: 20 ms steps through the window [0, 1000) ms, then 10 ms steps in the drain
    through 1500 ms (the load lighter once the window closed)."""
    stamps = list(range(0, 1000, 20)) + list(range(1000, 1501, 10))
    return [_stream(i, stamps) for i in range(10)]


def _compare(window_tau_s: float | None) -> dict[str, object]:
    # by hand: the engine's window holds 50 steps of 10 tokens in 1 s → B = 10, s = 50/s; the
    # client's T = 500 tok/s; τ over the streams' lives: (1000 + 500) ms ÷ (50 + 50) gaps = 15
    # ms → B = 7.5 (−25 %), 1/τ = 66.7/s (+33 %)
    w = window_figures("vllm", "u", duration_s=1.0, generated_tokens=500, decode_steps=50)
    mech = ClientMechanisms(window_tau_s=window_tau_s)
    return {a.figure: a for a in compare_client_engine(
        client_tokens_per_s=500.0, client_tau_s=0.015, replicas=1, window=w, mechanisms=mech,
    )}  # fmt: skip


def test_tau_over_the_windows_own_gaps_by_hand() -> None:
    # the gaps whose midpoint lies in [0, 1000) ms: 49 of 20 ms inside, and the one from 980 to
    # 1000 ms (midpoint 990): 50 gaps of 20 ms → 20 ms; over [1000, 1500): 50 of 10 ms → 10 ms
    gaps = StepGaps(_records())
    assert gaps.tau_s(0, 1000 * MS) == pytest.approx(0.020)
    assert gaps.tau_s(1000 * MS, 1500 * MS) == pytest.approx(0.010)
    assert gaps.tau_s(2000 * MS, 3000 * MS) is None


def test_lives_past_the_window_explain_b_and_s() -> None:
    plain = _compare(None)
    assert plain["B"].ok is False and UNEXPLAINED in (plain["B"].cause or "")  # type: ignore[attr-defined]
    out = _compare(StepGaps(_records()).tau_s(0, 1000 * MS))
    b, s = out["B"], out["s"]
    assert b.ok is True and s.ok is True  # type: ignore[attr-defined]
    assert (b.cause or "").startswith(WINDOW_LIVES)  # type: ignore[attr-defined]
    assert "15.0 ms" in b.cause and "20.0 ms" in b.cause  # type: ignore[attr-defined]


def test_a_window_tau_that_does_not_give_the_engines_figures_explains_nothing() -> None:
    out = _compare(0.017)  # B 8.5 (−15 %), s 58.8/s (+18 %): beyond the tolerances
    assert out["B"].ok is False and UNEXPLAINED in (out["B"].cause or "")  # type: ignore[attr-defined]


def test_the_terminal_row_says_which_window_agrees() -> None:
    from tokenwatt.report.engine_view import _agreement_row

    out = _compare(StepGaps(_records()).tau_s(0, 1000 * MS))
    row = _agreement_row(out["B"])  # type: ignore[arg-type]
    assert row[3] == "−25.0%" and row[4].startswith("agree over the window's own gaps")
