"""Every probe metric against values computed by hand from synthetic records.

The window is [10 s, 20 s). Records (times in seconds, tokens per chunk in brackets):

  A warm-up : sched 9.0, sent 9.0, chunks 9.5[1] 10.5[2]            (not counted)
  B ok      : sched 10.0, sent 10.001, chunks 10.101 10.201 10.301 10.401 [1 each],
              n=4, L=100 (client 98), done 10.402
  C ok      : sched 12.0, sent 12.0, chunks 12.5[2] 12.7[3] 13.0[1], n=6, L=50, done 13.0,
              one coalesced read
  D stall   : sched 15.0, sent 15.002, chunk 15.3[1], usage fallback, L=80, done 16.0
  E connect : sched 19.9, never sent
  G ok      : sched 19.5, sent 19.5, chunks 19.8[1] 20.4[1], n=2, L=10, done 20.5
  F         : sched 20.0 (= window end, not counted), chunk 20.1[1]
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokenwatt.metrics.latency import (
    compute_probe_metrics,
    is_counted,
    tpot_s,
)
from tokenwatt.metrics.slo import Limits, RequestLatency
from tokenwatt.metrics.stats import interpolated_quantile as quantile
from tokenwatt.metrics.stats import summarize
from tokenwatt.records import RequestRecord
from tokenwatt.spec.slo import SLO

S = 1_000_000_000
W0, W1 = 10 * S, 20 * S


def ns(t: float) -> int:
    return round(t * S)


def rec(
    rid: int,
    sched: float,
    sent: float | None,
    chunks: list[tuple[float, int]],
    *,
    n: int | None = None,
    prompt: int | None = None,
    prompt_client: int | None = None,
    done: float | None = None,
    status: str = "ok",
    kind: str | None = None,
    **extra: object,
) -> RequestRecord:
    chunk_ns = [ns(t) for t, _ in chunks]
    r = RequestRecord(
        request_id=rid,
        scheduled_ns=ns(sched),
        prompt_tokens_client=prompt_client if prompt_client is not None else (prompt or 0),
        max_tokens=n or 1,
        sent_ns=None if sent is None else ns(sent),
        first_token_ns=chunk_ns[0] if chunk_ns else None,
        end_ns=chunk_ns[-1] if chunk_ns else None,
        done_ns=None if done is None else ns(done),
        chunk_ns=chunk_ns,
        chunk_tokens=[k for _, k in chunks],
        prompt_tokens=prompt,
        completion_tokens=n,
        status=status,  # type: ignore[arg-type]
        error_kind=kind,  # type: ignore[arg-type]
    )
    for key, value in extra.items():
        setattr(r, key, value)
    return r


@pytest.fixture
def records() -> list[RequestRecord]:
    return [
        rec(0, 9.0, 9.0, [(9.5, 1), (10.5, 2)], n=3, prompt=5, done=10.6),
        rec(
            1,
            10.0,
            10.001,
            [(10.101, 1), (10.201, 1), (10.301, 1), (10.401, 1)],
            n=4,
            prompt=100,
            prompt_client=98,
            done=10.402,
        ),
        rec(
            2,
            12.0,
            12.0,
            [(12.5, 2), (12.7, 3), (13.0, 1)],
            n=6,
            prompt=50,
            done=13.0,
            coalesced_reads=1,
        ),
        rec(
            3,
            15.0,
            15.002,
            [(15.3, 1)],
            prompt=80,
            done=16.0,
            status="error",
            kind="stall",
            usage_source="fallback",
        ),
        rec(4, 19.9, None, [], status="error", kind="connect", done=19.95),
        rec(5, 19.5, 19.5, [(19.8, 1), (20.4, 1)], n=2, prompt=10, done=20.5),
        rec(6, 20.0, 20.0, [(20.1, 1)], n=1, prompt=7, done=20.2),
    ]


SLO_400_200 = SLO(ttft_ms=400, tpot_ms=200)


def test_counting_is_by_schedule_half_open(records: list[RequestRecord]) -> None:
    counted = [r.request_id for r in records if is_counted(r, W0, W1)]
    assert counted == [1, 2, 3, 4, 5]


def test_counts_rates_and_throughput(records: list[RequestRecord]) -> None:
    m = compute_probe_metrics(
        records, window_start_ns=W0, window_end_ns=W1, slo=SLO_400_200, target_rate_rps=0.4
    )
    assert m.window_s == 10.0
    assert (m.requests_total, m.requests_counted, m.requests_ok, m.requests_failed) == (7, 5, 3, 2)
    assert m.errors_by_kind == {"connect": 1, "stall": 1}
    assert m.offered_requests_per_s == 0.4
    assert m.counted_requests_per_s == pytest.approx(0.5)
    assert m.achieved_requests_per_s == pytest.approx(0.3)
    # T: chunks arriving in [10, 20), whichever request: A 2, B 4, C 6, D 1, G 1 = 14
    assert m.output_tokens == 14
    assert m.output_tokens_per_s == pytest.approx(1.4)
    # Σn over counted: 4 + 6 + 1 (D's fallback chunk sum) + 0 + 2 = 13
    assert m.counted_output_tokens == 13
    assert m.throughput_balance == pytest.approx(13 / 14)
    assert m.output_tokens_mean == pytest.approx(12 / 3)


def test_latency_distributions(records: list[RequestRecord]) -> None:
    m = compute_probe_metrics(records, window_start_ns=W0, window_end_ns=W1)
    # TTFT of B, C, G: 0.100, 0.500, 0.300
    assert m.ttft_s.count == 3
    assert m.ttft_s.mean == pytest.approx(0.3)
    assert m.ttft_s.p50 == pytest.approx(0.3)
    assert m.ttft_s.p90 == pytest.approx(0.3 + 0.8 * 0.2)
    assert m.ttft_s.p95 == pytest.approx(0.3 + 0.9 * 0.2)
    assert m.ttft_s.p99 == pytest.approx(0.3 + 0.98 * 0.2)
    assert m.ttft_s.max == pytest.approx(0.5)
    # TPOT: B 0.3/3, C 0.5/5, G 0.6/1
    assert m.tpot_s.count == 3
    assert m.tpot_s.mean == pytest.approx((0.1 + 0.1 + 0.6) / 3)
    assert m.tpot_s.p50 == pytest.approx(0.1)
    # chunk gaps: B 0.1 ×3, C 0.2 0.3, G 0.6
    assert m.itl_chunk_s.count == 6
    assert m.itl_chunk_s.mean == pytest.approx(1.4 / 6)
    assert m.itl_chunk_s.p50 == pytest.approx(0.15)
    assert m.itl_chunk_s.max == pytest.approx(0.6)
    # E2E: B 0.400, C 1.000, G 0.900
    assert m.e2e_s.mean == pytest.approx(2.3 / 3)
    assert m.e2e_s.p50 == pytest.approx(0.9)
    # τ = Σ(e2e − ttft) / Σ(n − 1) = (0.3 + 0.5 + 0.6) / (3 + 5 + 1)
    assert m.itl_token_weighted_s == pytest.approx(1.4 / 9)


def test_concurrency_context_and_chunks(records: list[RequestRecord]) -> None:
    m = compute_probe_metrics(records, window_start_ns=W0, window_end_ns=W1)
    # Little's law: Σ(done − sent) over counted that were sent: 0.401 + 1.0 + 0.998 + 1.0
    assert m.mean_concurrency == pytest.approx(3.399 / 10)
    # Σ(nL + n(n−1)/2): B 406, C 315, D 80, G 21 → 822 over Σn = 13
    assert m.mean_context_per_token == pytest.approx(822 / 13)
    assert m.prompt_tokens_mean == pytest.approx(160 / 3)
    assert m.prompt_tokens_client_mean == pytest.approx(158 / 3)
    # chunks of counted requests: 10 chunks, 13 tokens, two of them multi-token
    assert m.tokens_per_chunk_mean == pytest.approx(1.3)
    assert m.tokens_per_chunk_max == 3
    assert m.multi_token_chunk_share == pytest.approx(0.2)
    assert m.multi_token_chunks is True
    assert m.coalesced_reads == 1
    assert m.usage_fallback_requests == 1
    assert m.timestamp_source == "kernel"
    # send lateness of B, C, D, G: 1 ms, 0, 2 ms, 0
    assert m.send_lateness_s.count == 4
    assert m.send_lateness_s.mean == pytest.approx(0.00075)
    assert m.send_lateness_s.p50 == pytest.approx(0.0005)
    assert m.send_lateness_s.max == pytest.approx(0.002)


def test_slo_attainment_and_goodput(records: list[RequestRecord]) -> None:
    m = compute_probe_metrics(records, window_start_ns=W0, window_end_ns=W1, slo=SLO_400_200)
    # Only B meets TTFT ≤ 0.4 and TPOT ≤ 0.2 (C: TTFT 0.5; G: TPOT 0.6; D, E failed).
    limits = Limits.from_spec(SLO_400_200)
    assert (limits.ttft_s, limits.tpot_s, limits.e2e_s) == (0.4, 0.2, None)
    assert m.slo_attainment == pytest.approx(0.2)
    assert m.goodput_requests_per_s == pytest.approx(0.1)
    # T × the attaining share of the judged requests' tokens: 1.4 × 4/13 (B's 4 of 13)
    assert m.goodput_output_tokens_per_s == pytest.approx(1.4 * 4 / 13)
    # Generous limits: the three successes attain, the two failures never do.
    mg = compute_probe_metrics(
        records, window_start_ns=W0, window_end_ns=W1, slo=SLO(ttft_ms=10_000, tpot_ms=10_000)
    )
    assert mg.slo_attainment == pytest.approx(0.6)
    assert mg.goodput_output_tokens_per_s == pytest.approx(1.4 * 12 / 13)
    assert mg.goodput_output_tokens_per_s <= mg.output_tokens_per_s
    # Without an SLO there is no attainment to report.
    mn = compute_probe_metrics(records, window_start_ns=W0, window_end_ns=W1)
    assert mn.slo_attainment is None and mn.goodput_requests_per_s is None


def test_e2e_limit_and_one_token_outputs() -> None:
    one = rec(0, 1.0, 1.0, [(1.2, 1)], n=1, prompt=3, done=1.2)
    assert tpot_s(one) is None
    lat = RequestLatency.from_record(one)
    assert lat.meets(Limits.from_spec(SLO(ttft_ms=250, tpot_ms=1)))  # one token: TPOT is 0
    assert not lat.meets(Limits.from_spec(SLO(ttft_ms=250, tpot_ms=1, e2e_ms=150)))
    assert lat.meets(Limits.from_spec(SLO(ttft_ms=250, tpot_ms=1, e2e_ms=250)))
    m = compute_probe_metrics([one], window_start_ns=0, window_end_ns=2 * S)
    assert m.tpot_s.count == 0 and m.tpot_s.mean is None
    assert m.itl_token_weighted_s is None  # no inter-token time exists
    assert m.multi_token_chunks is False


def test_empty_window() -> None:
    m = compute_probe_metrics([], window_start_ns=0, window_end_ns=S, slo=SLO())
    assert m.requests_counted == 0
    assert m.output_tokens_per_s == 0.0
    assert m.ttft_s.count == 0
    assert m.slo_attainment is None
    assert m.timestamp_source == "none"


def test_quantile_matches_numpy_and_handles_inf() -> None:
    rng = np.random.default_rng(3)
    for size in (1, 2, 7, 100):
        xs = rng.exponential(size=size).tolist()
        for q in (0.0, 0.5, 0.9, 0.95, 0.99, 1.0):
            assert quantile(xs, q) == pytest.approx(float(np.percentile(xs, q * 100)))
    assert quantile([1.0, math.inf], 0.5) == math.inf
    assert quantile([1.0, 2.0, math.inf], 0.5) == 2.0
    assert quantile([], 0.5) is None
    d = summarize([3.0, 1.0, 2.0])
    assert (d.count, d.mean, d.p50, d.max) == (3, 2.0, 2.0, 3.0)


def test_cancelled_requests_are_neither_failures_nor_misses(records: list[RequestRecord]) -> None:
    """Requests the client cancelled (early stop, Ctrl-C) say nothing about the server: they
    are counted as offered but leave failures, attainment and the verdict alone."""
    cancelled = rec(7, 18.0, 18.0, [(18.2, 1)], n=1, prompt=5, done=18.3)
    cancelled.status, cancelled.error_kind = "cancelled", "cancelled"
    m = compute_probe_metrics(
        [*records, cancelled], window_start_ns=W0, window_end_ns=W1, slo=SLO_400_200
    )
    assert (m.requests_counted, m.requests_ok, m.requests_failed, m.requests_cancelled) == (
        6,
        3,
        2,
        1,
    )
    assert m.errors_by_kind == {"connect": 1, "stall": 1}
    assert m.slo_attainment == pytest.approx(1 / 5)  # B of the 5 judged, as without it
    assert m.counted_requests_per_s == pytest.approx(0.6)
    assert m.output_tokens == 15  # its token arrived in the window: it was delivered
