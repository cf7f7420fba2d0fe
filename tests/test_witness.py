"""The witness explains itself: tolerance from the counters' resolution, T on the engine's
clock, B and s explained only by a measured mechanism with its size, else a disagreement.

Hand-built windows and token stamps, checked by hand; the end-to-end checks against the
simulator over HTTP are in tests/test_engine_probe.py (every bench probe, single stream
included, agrees on T within 2 % + 1/N without widening by the scrape interval).
"""

from __future__ import annotations

import pytest

from tokenwatt.engine import ClientMechanisms, compare_client_engine, window_figures
from tokenwatt.engine.align import count_on_engine_clock
from tokenwatt.engine.compare import (
    IDLE_EXPLAINED,
    PREEMPTION_EXPLAINED,
    UNEXPLAINED,
    counter_resolution,
)
from tokenwatt.result import EngineFigures

S = 1_000_000_000


def _window(**kw: float) -> EngineFigures:
    return window_figures("vllm", "u", duration_s=10.0, **kw)


def test_tolerance_is_the_counters_resolution() -> None:
    w = _window(generated_tokens=400, decode_steps=100, busy_slots_per_decode=4.0)
    res = counter_resolution(w)
    assert res == {"T": 1 / 400, "B": 1 / 400 + 1 / 100, "s": 1 / 100}
    out = {a.figure: a for a in compare_client_engine(
        client_tokens_per_s=40.0, client_tau_s=0.1, replicas=1, window=w)}  # fmt: skip
    assert out["T"].tolerance == pytest.approx(0.02 + 1 / 400)
    assert out["s"].tolerance == pytest.approx(0.05 + 1 / 100)


def test_count_on_engine_clock_by_hand() -> None:
    # one token per second at t = 0.5, 1.5, …, 9.5 s; scrapes at 0, 4 and 10 s; window [2, 8] s
    events = [(int((k + 0.5) * S), 1.0) for k in range(10)]
    # counter: 0 at 0 s, 4 at 4 s, 10 at 10 s; at 2 s: 0 + ½·4 = 2; at 8 s: 4 + ⅔·6 = 8 → 6
    assert count_on_engine_clock(events, [0, 4 * S, 10 * S], 2 * S, 8 * S) == pytest.approx(6.0)
    # llama.cpp counts at the end: all 10 tokens at 9.9 s → at 8 s: 0 + ⅔·10
    end = [(int(9.9 * S), 10.0)]
    assert count_on_engine_clock(end, [0, 10 * S], 2 * S, 8 * S) == pytest.approx(6.0)
    assert count_on_engine_clock(end, [3 * S, 10 * S], 2 * S, 8 * S) is None  # not bracketed


def test_t_on_the_engine_clock_states_the_edge_effect() -> None:
    # the engine counted 900 tokens / 10 s; the client got 1000 in its window, but counted as
    # the engine counts them (interpolated at its scrapes) 900: agreement, edge effect −10 %
    w = _window(generated_tokens=900)
    t = compare_client_engine(
        client_tokens_per_s=100.0, client_tau_s=0.02, replicas=1, window=w,
        client_tokens_per_s_engine_clock=90.0,
    )[0]  # fmt: skip
    assert t.ok and t.rel_diff == pytest.approx(0.0)
    assert "edge effect is -10.0% of the client's window count" in (t.cause or "")
    off = compare_client_engine(
        client_tokens_per_s=100.0, client_tau_s=0.02, replicas=1, window=w,
        client_tokens_per_s_engine_clock=100.0,
    )[0]  # fmt: skip
    assert off.ok is False and UNEXPLAINED in (off.cause or "")


def _bs(mech: ClientMechanisms, client_tau_s: float) -> dict[str, object]:
    # engine: 1000 tokens, 250 steps in 10 s, 4 busy slots per decode; client T 100 tok/s
    w = _window(generated_tokens=1000, decode_steps=250, busy_slots_per_decode=4.0)
    out = compare_client_engine(
        client_tokens_per_s=100.0, client_tau_s=client_tau_s, replicas=1, window=w,
        mechanisms=mech,
    )  # fmt: skip
    return {a.figure: a for a in out}


def test_time_nothing_decoded_explains_b_and_s_with_its_split() -> None:
    # client τ 0.03 → B 3.0 (−25 %), s 33.3 (+33 %): a decode share of 0.75 explains it
    out = _bs(ClientMechanisms(decode_share=0.75, idle_share=0.05, prompt_only_share=0.20), 0.03)
    b, s = out["B"], out["s"]
    assert b.ok and s.ok  # type: ignore[attr-defined]
    cause = b.cause or ""  # type: ignore[attr-defined]
    assert cause.startswith(IDLE_EXPLAINED) and "nothing decoded for 25% of the window" in cause
    assert "idle 5%, prompts with no decode in flight 20%" in cause


def test_every_slot_busy_is_not_idle_explained() -> None:
    """The issue's llama-server case: B −26 % and s +33 % with every slot busy (decode share
    ≈ 1): no measured mechanism of that size, so a disagreement."""
    out = _bs(ClientMechanisms(decode_share=0.99, idle_share=0.0, prompt_only_share=0.01), 0.0296)
    b, s = out["B"], out["s"]
    assert b.ok is False and s.ok is False  # type: ignore[attr-defined]
    assert UNEXPLAINED in (b.cause or "")  # type: ignore[attr-defined]


def test_preemption_stalls_explain_b_and_s() -> None:
    # client τ 0.05 → B 5.0 (+25 %), s 20 (−20 %); stalls 20 % of decode time: 5.0 × 0.8 = 4
    out = _bs(ClientMechanisms(stalled_share=0.20), 0.05)
    b = out["B"]
    assert b.ok and (b.cause or "").startswith(PREEMPTION_EXPLAINED)  # type: ignore[attr-defined]
    assert "20% of decode time" in (b.cause or "")  # type: ignore[attr-defined]
    assert out["B"].ok is not None
    # a smaller measured stall share does not explain it
    assert _bs(ClientMechanisms(stalled_share=0.05), 0.05)["B"].ok is False  # type: ignore[attr-defined]
