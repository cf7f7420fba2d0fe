"""Idle time on R replicas: each replica idles on its own, and the client does not see which one
served a request, so a replica's decode share lies between its values under random routing
and balanced routing, both read from the client's own decoding count D(t)
(``metrics.mbu.spans``). The witness explains a B and s disagreement by idleness only when the
measured ratio lies in that bracket (widened by B's tolerance). Checked by hand."""

from __future__ import annotations

import pytest

from tokenwatt.engine import ClientMechanisms, compare_client_engine, window_figures
from tokenwatt.engine.compare import IDLE_EXPLAINED, UNEXPLAINED
from tokenwatt.metrics.mbu.spans import SpanSweep

S = 1_000_000_000


def test_replica_decode_shares_by_hand() -> None:
    # D(t) = 1 on [0, 1) s, 2 on [1, 2), 0 on [2, 3); two replicas. Balanced: ∫ min(2, D) =
    # 1 + 2 = 3 replica-seconds of 6 → 0.5. Random: ∫ 2·(1 − ½^D) = 2·½ + 2·¾ = 2.5 → 0.4167.
    spans = [(0, 0, 2 * S, 2 * S), (S, S, 2 * S, 2 * S)]
    t = SpanSweep(spans, 2).totals(0, 3 * S)
    assert t is not None
    low, high = t.replica_decode_shares
    assert low == pytest.approx(2.5 / 6) and high == pytest.approx(0.5)
    one = SpanSweep(spans, 1).totals(0, 3 * S)  # one replica: both are the decode share, 2/3
    assert one is not None
    assert one.replica_decode_shares == pytest.approx((2 / 3, 2 / 3))
    assert one.decode_share == pytest.approx(2 / 3)


def _compare(ratio: float) -> dict[str, object]:
    """Two replicas, the engine's B = 20 and s = 25/s per replica over 10 s; the client's T
    agrees (1000 tok/s) and its τ puts its B at ``ratio`` × the engine's."""
    w = window_figures("vllm", "u", duration_s=10.0, generated_tokens=10_000, decode_steps=500)
    tau = ratio * 20.0 * 2 / 1000.0  # B = T·τ/R
    mech = ClientMechanisms(replica_decode_shares=(2.5 / 6, 0.5))
    return {a.figure: a for a in compare_client_engine(
        client_tokens_per_s=1000.0, client_tau_s=tau, replicas=2, window=w, mechanisms=mech,
    )}  # fmt: skip


def test_idle_replicas_explain_a_ratio_inside_the_bracket() -> None:
    out = _compare(0.45)
    b = out["B"]
    assert b.ok is True and (b.cause or "").startswith(IDLE_EXPLAINED)  # type: ignore[attr-defined]
    assert "42% (routing at random) to 50% (balanced)" in (b.cause or "")  # type: ignore[attr-defined]
    assert out["s"].ok is True  # type: ignore[attr-defined]


def test_a_ratio_outside_the_bracket_stays_a_disagreement() -> None:
    out = _compare(0.70)  # 0.70 against 0.42-0.50 ± B's tolerance: not idleness
    b = out["B"]
    assert b.ok is False and UNEXPLAINED in (b.cause or "")  # type: ignore[attr-defined]
