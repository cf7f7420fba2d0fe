"""The two-sided low end in one long window: the search asks the low end's probe for the clean
requests the end still needs (``BoundarySearch.want_judged``), and ``tokenwatt bench`` holds
that probe's pass until it has judged them, instead of one short probe (a warm-up and a drain
each) per ~280 requests.

The server is the noise-free miss curve of ``test_search_two_sided``: round(n · p(r)) of n
judged requests miss, p(r) = 1 % · (r / 10)^40, so the true boundary is 10 req/s.
"""

from __future__ import annotations

import asyncio
import math

from builders import ttft_record
from tokenwatt.load.bench import _close_after, _long_window
from tokenwatt.load.search import LOW_END_CLEAN, BoundarySearch, ProbeOutcome
from tokenwatt.metrics.boundary import Evidence
from tokenwatt.metrics.sequential import SequentialStop
from tokenwatt.metrics.slo import Limits
from tokenwatt.spec import ProbeSettings
from virtual_probe import CASES, VirtualProbe

TRUE_RPS = 10.0
N = 300  # what a short probe judges


def outcome(rate: float, n: int) -> ProbeOutcome[None]:
    misses = min(round(n * 0.01 * (rate / TRUE_RPS) ** 40), n)
    ev = Evidence(rate, n, {"tpot_p99": misses})
    return ProbeOutcome(misses <= 0.01 * n, counted_rps=rate, requests=n, evidence=ev)


def test_low_end_clean_by_hand() -> None:
    # n · −ln(0.99) / 4 > χ²₁(95 %)/2 = 3.8415 / 2: n > 1.92073 · 4 / 0.0100503 = 764.4
    # (D = TWO_SIDED_DESIGN_EFFECT = 4)
    assert LOW_END_CLEAN == 765
    assert math.ceil(1.920729 * 4 / -math.log(0.99)) == LOW_END_CLEAN


def run_search(
    honour: bool, n_judged: int = N
) -> tuple[BoundarySearch[None], list[tuple[float, int | None, int]]]:
    """A two-sided search at ±10 %; each probe judges ``n_judged`` requests, or (``honour``)
    as many as the search wants of it when that is more, as ``tokenwatt bench`` does."""
    asked: list[tuple[float, int | None, int]] = []  # (rate, wanted, judged)

    async def probe(rate: float, seed: int) -> ProbeOutcome[None]:
        want = s.want_judged
        n = max(n_judged, want or 0) if honour else n_judged
        asked.append((rate, want, n))
        return outcome(rate, n)

    s: BoundarySearch[None] = BoundarySearch(
        probe, start_rate_rps=8.0, allowed=0.01, first_step=1.1, precision=0.10,
        two_sided=True, max_probes=40,
    )  # fmt: skip
    asyncio.run(s.run())
    return s, asked


def test_the_low_end_is_established_by_one_long_window() -> None:
    s, asked = run_search(honour=True)
    out, rep = s.outcome, s.outcome.reported
    assert out.stop_reason == "converged" and out.unclosed is None
    assert rep is not None and rep.low_rps is not None and rep.high_rps is not None
    assert rep.low_rps <= TRUE_RPS <= rep.high_rps
    assert rep.relative_half_width is not None and rep.relative_half_width <= 0.10
    wanted = [(k, a) for k, a in enumerate(asked) if a[1] is not None]
    # one probe asked for more than the sequential verdict's own, at the low end, and only one
    # probe was run at that rate
    assert len(wanted) == 1
    k, (rate, want, judged) = wanted[0]
    assert rate == rep.low_rps
    assert sum(1 for a in asked if a[0] == rate) == 1
    # what it asked for, by hand: 765 less the clean requests judged before it from its rate
    # up to the lowest failure
    first_fail = min(r for r, _, n in asked[:k] if not outcome(r, n).passed)
    clean_before = sum(n for r, _, n in asked[:k]
                       if rate <= r < first_fail and outcome(r, n).evidence.misses["tpot_p99"] == 0)  # type: ignore[union-attr]  # fmt: skip
    assert want == LOW_END_CLEAN - clean_before and judged == want > N


def test_the_long_window_saves_probes_over_short_ones() -> None:
    """A probe that ignores the request (250 requests each) still closes the end, by pooling
    short probes at the same rate: more probes, the same interval. (At 300 requests a probe, one
    short probe at the low end with the clean passes above it already holds the 765 clean
    requests D = 4 asks for.)"""
    long_s, long_asked = run_search(honour=True, n_judged=250)
    short_s, short_asked = run_search(honour=False, n_judged=250)
    assert short_s.outcome.stop_reason == "converged"
    short_rep, long_rep = short_s.outcome.reported, long_s.outcome.reported
    assert short_rep is not None and long_rep is not None
    assert short_rep.low_rps == long_rep.low_rps
    at_low = sum(1 for a in short_asked if a[0] == short_rep.low_rps)
    assert at_low == 2  # one short probe there left the end open; the second closed it
    assert sum(1 for a in long_asked if a[0] == long_rep.low_rps) == 1
    assert len(long_asked) == len(short_asked) - (at_low - 1)


def test_the_bench_holds_the_pass_until_the_wanted_requests_are_judged() -> None:
    limits = Limits("percentile", 0.5, None, None, 0.99, 0.9)
    fast = [ttft_record(i, 0.1) for i in range(300)]
    plain, held = SequentialStop(limits), SequentialStop(limits)
    assert _close_after(plain, None)(fast[:194])  # the sequential verdict alone: 194 decide
    close = _close_after(held, 300)
    assert not close(fast[:194]) and not close(fast[:299])
    assert close(fast)
    # a failure still stops the probe at once
    assert held.should_stop([ttft_record(i, 0.9) for i in range(3)])


def test_the_long_window_raises_the_request_minimum_only() -> None:
    base = ProbeSettings(warmup_s=10.0, min_duration_s=60.0, min_requests=200)
    assert _long_window(base, None) is base and _long_window(base, 150) is base
    longer = _long_window(base, 680)
    assert longer.min_requests == 680
    assert longer.model_dump(exclude={"min_requests"}) == base.model_dump(exclude={"min_requests"})


def test_the_virtual_probe_holds_its_pass_as_the_bench_does() -> None:
    """``virtual_probe.VirtualProbe`` (the coverage runs' probe) honours the search's request:
    well below the dense case's boundary (~13 req/s) a pass is decided on 194 requests; asked
    for 500, the same seed's pass judges at least 500."""

    async def never(rate: float, seed: int) -> ProbeOutcome[None]:
        raise AssertionError("not called")

    probe = VirtualProbe(CASES["dense"], lifetimes=3.0)
    plain = asyncio.run(probe(6.0, 7))
    probe.search = BoundarySearch(never, start_rate_rps=6.0, allowed=0.01)  # type: ignore[arg-type]
    probe.search.want_judged = 500
    held = asyncio.run(probe(6.0, 7))
    assert plain.passed and held.passed
    assert plain.evidence is not None and held.evidence is not None
    assert plain.evidence.judged < 300 and held.evidence.judged >= 500
