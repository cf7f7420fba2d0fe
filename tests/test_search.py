"""The boundary search as a pure algorithm, against synthetic queueing models with known answers."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from tokenwatt.load.search import BoundarySearch, ProbeOutcome, probe_seed

MU = 10.0  # service rate, requests/s
LIMIT_S = 1.0  # p99 waiting-time limit


def p99_wait_mm1(rate: float) -> float:
    """M/M/1 FIFO: P(W > t) = ρ·e^(−(μ−λ)t), so the p99 wait is ln(100ρ)/(μ−λ) (0 if ρ ≤ 1%)."""
    if rate >= MU:
        return math.inf
    rho = rate / MU
    return max(0.0, math.log(100 * rho) / (MU - rate))


def true_boundary() -> float:
    """Solve p99_wait(λ) = LIMIT by plain bisection to machine precision (independent of the
    search under test, which bisects geometrically and stops at 5%)."""
    lo, hi = 0.2, MU - 1e-9
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if p99_wait_mm1(mid) <= LIMIT_S:
            lo = mid
        else:
            hi = mid
    return lo


async def exact_probe(rate: float, seed: int) -> ProbeOutcome[float]:
    return ProbeOutcome(p99_wait_mm1(rate) <= LIMIT_S, payload=rate)


def run(search: BoundarySearch[float]):  # type: ignore[no-untyped-def]
    return asyncio.run(search.run())


def test_exact_model_brackets_the_true_boundary() -> None:
    star = true_boundary()
    assert 5.0 < star < 6.0  # λ* ≈ 5.4 for μ = 10 and a 1 s p99
    out = run(BoundarySearch(exact_probe, start_rate_rps=0.5, growth=2.0, precision=0.05))
    assert out.stop_reason == "converged"
    assert out.lo_rps is not None and out.hi_rps is not None
    assert out.lo_rps <= star < out.hi_rps
    assert (out.hi_rps - out.lo_rps) / out.lo_rps < 0.05
    assert out.precision_reached is not None and out.precision_reached < 0.05
    b, f = out.boundary, out.first_failure_above
    assert b is not None and b.passed and b.rate_rps == out.lo_rps
    assert f is not None and not f.passed and f.rate_rps == out.hi_rps
    phases = [s.phase for s in out.steps]
    # 0.5, 1, 2, 4, 8 (fails), then bisection inside [4, 8].
    assert [s.rate_rps for s in out.steps[:5]] == [0.5, 1.0, 2.0, 4.0, 8.0]
    # log2(8/4) = 1 → 0.05 needs ⌈log2(ln 2 / ln 1.05)⌉ = 4 geometric halvings, then one
    # confirmation of the failing edge.
    assert phases == ["grow"] * 5 + ["bisect"] * 4 + ["confirm"]
    assert out.steps[-1].rate_rps == out.hi_rps


def test_without_confirmation_bisection_stops_at_once() -> None:
    out = run(BoundarySearch(exact_probe, start_rate_rps=0.5, confirm=False))
    assert [s.phase for s in out.steps] == ["grow"] * 5 + ["bisect"] * 4


def test_bracket_is_recorded_after_every_step() -> None:
    seen = []
    s = BoundarySearch(exact_probe, start_rate_rps=1.0, on_step=seen.append)
    out = run(s)
    assert seen == out.steps
    for step in out.steps:
        if step.lo_rps is not None and step.hi_rps is not None:
            assert step.lo_rps < step.hi_rps


def test_start_rate_that_fails_descends() -> None:
    out = run(BoundarySearch(exact_probe, start_rate_rps=40.0, precision=0.05))
    assert [s.phase for s in out.steps[:3]] == ["grow", "descend", "descend"]
    assert [s.rate_rps for s in out.steps[:3]] == [40.0, 20.0, 10.0]
    assert out.stop_reason == "converged"
    assert out.lo_rps is not None and out.lo_rps <= true_boundary() < (out.hi_rps or 0)


def test_never_passing_stops_failed_at_start() -> None:
    async def never(rate: float, seed: int) -> ProbeOutcome[None]:
        return ProbeOutcome(False, reason="down")

    out = asyncio.run(BoundarySearch(never, start_rate_rps=1.0, growth=2.0).run())
    assert out.stop_reason == "failed_at_start"
    assert out.lo_rps is None and out.hi_rps == pytest.approx(1 / 32)
    assert len(out.steps) == 6  # 1, 1/2, …, 1/32; 1/64 is below the floor start/growth^5


def test_always_passing_stops_at_max_rate() -> None:
    async def always(rate: float, seed: int) -> ProbeOutcome[None]:
        return ProbeOutcome(True)

    out = asyncio.run(BoundarySearch(always, start_rate_rps=3.0, max_rate_rps=20.0).run())
    assert out.stop_reason == "max_rate"
    assert [s.rate_rps for s in out.steps] == [3.0, 6.0, 12.0, 20.0]
    assert out.lo_rps == 20.0 and out.hi_rps is None


def test_max_probes_keeps_the_bracket() -> None:
    out = run(BoundarySearch(exact_probe, start_rate_rps=0.5, max_probes=6))
    assert out.stop_reason == "max_probes" and len(out.steps) == 6
    assert out.lo_rps is not None and out.hi_rps is not None
    assert out.lo_rps <= true_boundary() < out.hi_rps


def test_noisy_inversion_keeps_a_consistent_bracket() -> None:
    # Passes at 1, 2, 4; fails at 8; between them the edge is 7 (the bracket must end there).
    verdicts = {1.0: True, 2.0: True, 4.0: True, 8.0: False}

    async def scripted(rate: float, seed: int) -> ProbeOutcome[None]:
        if rate in verdicts:
            return ProbeOutcome(verdicts[rate])
        return ProbeOutcome(rate < 7.0)

    out = asyncio.run(BoundarySearch(scripted, start_rate_rps=1.0, precision=0.05).run())
    assert out.stop_reason == "converged"
    assert out.lo_rps is not None and out.hi_rps is not None
    assert out.lo_rps < 7.0 <= out.hi_rps


def test_pass_above_an_earlier_failure_reopens_growth() -> None:
    calls: list[float] = []

    async def flaky(rate: float, seed: int) -> ProbeOutcome[None]:
        calls.append(rate)
        if len(calls) == 2:  # the probe at 2 rps fails once, by noise
            return ProbeOutcome(False)
        return ProbeOutcome(rate <= 5.0)

    out = asyncio.run(BoundarySearch(flaky, start_rate_rps=1.0, precision=0.05).run())
    # The spurious failure at 2 makes bisection converge just below 2; the confirmation
    # probe at 2 passes, growth resumes, and the search ends at the true edge 5.
    assert out.stop_reason == "converged"
    assert out.lo_rps is not None and out.hi_rps is not None
    assert out.lo_rps <= 5.0 < out.hi_rps
    assert "confirm" in [s.phase for s in out.steps]


def test_seeds_are_fresh_per_probe_and_reproducible() -> None:
    seeds: list[int] = []

    async def rec(rate: float, seed: int) -> ProbeOutcome[None]:
        seeds.append(seed)
        return ProbeOutcome(rate < 5.0)

    asyncio.run(BoundarySearch(rec, start_rate_rps=1.0, seed=7).run())
    first = list(seeds)
    assert len(set(first)) == len(first)
    seeds.clear()
    asyncio.run(BoundarySearch(rec, start_rate_rps=1.0, seed=7).run())
    assert seeds == first
    assert probe_seed(7, 1) != probe_seed(8, 1)
    assert all(0 <= s < 2**63 for s in first)


def test_interrupt_keeps_completed_steps() -> None:
    async def dies(rate: float, seed: int) -> ProbeOutcome[None]:
        if rate > 3:
            raise KeyboardInterrupt
        return ProbeOutcome(True)

    s: BoundarySearch[None] = BoundarySearch(dies, start_rate_rps=1.0)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(s.run())
    assert [st.rate_rps for st in s.outcome.steps] == [1.0, 2.0]
    assert s.outcome.lo_rps == 2.0 and s.outcome.stop_reason == "interrupted"


def _mm1_probe(n: int) -> object:
    """A noisy probe: simulate n customers of an M/M/1 queue (Lindley) from the seed and pass
    when the empirical p99 wait is within the limit."""

    async def probe(rate: float, seed: int) -> ProbeOutcome[float]:
        rng = random.Random(seed)
        w, waits = 0.0, []
        for _ in range(n):
            waits.append(w)
            w = max(0.0, w + rng.expovariate(MU) - rng.expovariate(rate))
        waits.sort()
        p99 = waits[math.ceil(0.99 * n) - 1]
        return ProbeOutcome(p99 <= LIMIT_S, payload=p99)

    return probe


def test_noisy_model_is_repeatable_across_seeds() -> None:
    star = true_boundary()
    probe = _mm1_probe(4000)
    found = []
    for seed in range(6):
        out = asyncio.run(
            BoundarySearch(probe, start_rate_rps=1.0, precision=0.05, seed=seed).run()  # type: ignore[arg-type]
        )
        assert out.stop_reason == "converged"
        b, f = out.boundary, out.first_failure_above
        assert b is not None and b.passed and f is not None and not f.passed
        assert out.precision_reached is not None and out.precision_reached < 0.05
        found.append(out.lo_rps)
    # Sampling noise of a p99 from 4000 correlated waits moves the edge by a few percent.
    assert all(abs(x - star) / star < 0.15 for x in found if x is not None), (star, found)
    assert (max(found) - min(found)) / min(found) < 0.2  # type: ignore[type-var, operator]


def test_confirmed_pass_keeps_an_earlier_failure_above_it() -> None:
    # 16 fails; 14.46 fails once by noise, then passes its confirmation: the bracket must go
    # back to [14.46, 16] (16 is still a measured failure), not grow from scratch.
    calls: list[float] = []

    async def probe(rate: float, seed: int) -> ProbeOutcome[None]:
        calls.append(rate)
        if len(calls) == 4:  # the first probe near 14.4 fails by noise
            return ProbeOutcome(False)
        return ProbeOutcome(rate < 15.0)

    out = asyncio.run(BoundarySearch(probe, start_rate_rps=16.0, growth=1.5, precision=0.1).run())
    assert out.stop_reason == "converged"
    assert out.lo_rps is not None and out.hi_rps is not None
    assert out.lo_rps < 15.0 <= out.hi_rps
    assert max(calls) == 16.0  # never grew past the recorded failure
    for s in out.steps:
        if s.lo_rps is not None and s.hi_rps is not None:
            assert s.lo_rps < s.hi_rps


def test_running_out_of_probes_while_descending_is_max_probes() -> None:
    # Every rate fails, and the budget (3) ends the descent long before the rate floor: the
    # search ran out of probes; it did not prove that the lowest rate fails.
    async def never(rate: float, seed: int) -> ProbeOutcome[None]:
        return ProbeOutcome(False, reason="down")

    out = asyncio.run(BoundarySearch(never, start_rate_rps=1.0, growth=2.0, max_probes=3).run())
    assert out.stop_reason == "max_probes"
    assert len(out.steps) == 3 and out.lo_rps is None


def test_step_factor_squares_from_the_first_step_up_to_growth() -> None:
    from tokenwatt.load.search import step_factor

    # by hand: 1.1, 1.1² = 1.21, 1.21² = 1.4641, 1.4641² = 2.1436 → capped at 2
    assert [step_factor(k, 2.0, 1.1) for k in range(5)] == pytest.approx(
        [1.1, 1.21, 1.4641, 2.0, 2.0]
    )
    assert step_factor(3, 2.0, None) == 2.0  # without a first step: growth every time
    assert step_factor(10_000, 3.0, 1.01) == pytest.approx(3.0)  # no overflow on long walks


def test_a_start_near_the_boundary_is_left_in_small_steps() -> None:
    """Start 7.0 fails (boundary 5.92): down by 1.1 (6.364, fails), then 1.21 (5.259, passes),
    then bisection; the classic walk would have probed 3.5 first."""
    out = run(BoundarySearch(exact_probe, start_rate_rps=7.0, first_step=1.1))
    rates = [s.rate_rps for s in out.steps]
    assert rates[:3] == pytest.approx([7.0, 7.0 / 1.1, 7.0 / 1.1 / 1.21])
    assert [s.phase for s in out.steps[:3]] == ["grow", "descend", "descend"]
    assert out.stop_reason == "converged"
    assert out.lo_rps is not None and out.lo_rps <= true_boundary() < (out.hi_rps or 0)
    classic = run(BoundarySearch(exact_probe, start_rate_rps=7.0))
    assert classic.steps[1].rate_rps == 3.5
    assert len(out.steps) < len(classic.steps)


def test_a_walk_that_turns_starts_its_steps_anew() -> None:
    """Start 4.0 passes: up by 1.1, 1.21, 1.4641 (4.4, 5.324, 7.795: fails); the restart
    below a failure that undercuts every pass begins again at 1.1."""
    out = run(BoundarySearch(exact_probe, start_rate_rps=4.0, first_step=1.1))
    assert [s.rate_rps for s in out.steps[:4]] == pytest.approx(
        [4.0, 4.4, 4.4 * 1.21, 4.4 * 1.21 * 1.4641]
    )
    calls: list[float] = []

    async def faster_later(rate: float, seed: int) -> ProbeOutcome[None]:
        calls.append(rate)  # the server holds 5.9 req/s for three probes, then 100
        return ProbeOutcome(rate <= (5.9 if len(calls) <= 3 else 100.0))

    out2 = asyncio.run(
        BoundarySearch(faster_later, start_rate_rps=7.0, first_step=1.1, max_probes=11).run()
    )
    phases = [st.phase for st in out2.steps]
    # 7 F, 6.364 F, 5.259 P (the walk down), 5.785 P and 6.067 P (bisection), 6.364 P
    # (confirmed: the failure goes), 6.675 P, 7.0 P (confirmed: no failure is left), then the
    # walk up starts anew at ×1.1 (7.7), then ×1.21 and ×1.4641 (the walk down had taken two).
    assert phases[7:] == ["confirm", "grow", "grow", "grow"]
    assert out2.steps[7].rate_rps == pytest.approx(7.0)
    assert [st.rate_rps for st in out2.steps[8:]] == pytest.approx([7.7, 9.317, 13.641], rel=1e-4)
