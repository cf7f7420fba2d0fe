"""Arrival schedules: statistics (Poisson gaps pass a KS test, gamma CV = 1/√k), no rescaling,
reproducibility from the seed, and the errors a bad combination gives."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tokenwatt.errors import SpecError
from tokenwatt.spec.workload import Concurrency, Constant, Gamma, Poisson
from tokenwatt.traffic.arrivals import ClosedLoop, OpenLoopSchedule, make_arrivals


def gaps_s(schedule: OpenLoopSchedule, n: int) -> np.ndarray:
    offs = np.asarray([0, *schedule.first(n)], dtype=np.int64)
    return np.diff(offs) / 1e9


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_poisson_gaps_are_exponential(seed: int) -> None:
    rate = 25.0
    g = gaps_s(OpenLoopSchedule("poisson", rate, seed), 5000)
    res = stats.kstest(g, "expon", args=(0, 1 / rate))
    assert res.pvalue > 0.001, res
    # mean gap within 4 standard errors of 1/λ (SE of an exponential mean: (1/λ)/√n)
    assert abs(g.mean() - 1 / rate) < 4 * (1 / rate) / np.sqrt(len(g))


def test_ks_check_has_power() -> None:
    """The same check rejects gaps that are not exponential (gamma k=4 with the same mean)."""
    rate = 25.0
    g = gaps_s(OpenLoopSchedule("gamma", rate, 0, burstiness=4.0), 5000)
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue < 1e-6


@pytest.mark.parametrize("k", [0.25, 0.5, 2.0, 8.0])
def test_gamma_mean_and_cv(k: float) -> None:
    rate = 10.0
    g = gaps_s(OpenLoopSchedule("gamma", rate, 7, burstiness=k), 20000)
    assert g.mean() == pytest.approx(1 / rate, rel=0.05)
    cv = g.std() / g.mean()
    assert cv == pytest.approx(1 / np.sqrt(k), rel=0.05)
    assert stats.kstest(g, "gamma", args=(k, 0, 1 / (rate * k))).pvalue > 0.001


def test_gamma_with_k_one_is_poisson_in_distribution() -> None:
    g = gaps_s(OpenLoopSchedule("gamma", 5.0, 11, burstiness=1.0), 5000)
    assert stats.kstest(g, "expon", args=(0, 0.2)).pvalue > 0.001


def test_constant_is_exact() -> None:
    offs = OpenLoopSchedule("constant", 3.0, 0).first(3001)
    assert offs[0] == round(1e9 / 3)
    assert offs[2999] == 1_000_000_000_000  # the 3000th arrival at exactly 1000 s, no drift
    assert len(set(np.diff(offs).tolist()) - {333_333_333, 333_333_334}) == 0


def test_poisson_is_not_rescaled_to_end_on_time() -> None:
    """The count in a fixed window varies like a Poisson count (variance ≈ mean), and the N-th
    arrival does not land on N/λ."""
    rate, horizon_ns = 20.0, 10 * 10**9
    counts = []
    for seed in range(200):
        it = OpenLoopSchedule("poisson", rate, seed).offsets_ns()
        c = 0
        while next(it) < horizon_ns:
            c += 1
        counts.append(c)
    counts_a = np.asarray(counts)
    assert counts_a.mean() == pytest.approx(200, rel=0.03)
    dispersion = counts_a.var(ddof=1) / counts_a.mean()
    assert 0.7 < dispersion < 1.3
    assert OpenLoopSchedule("poisson", rate, 0).first(200)[-1] != 10 * 10**9


def test_reproducible_and_prefix_stable() -> None:
    a = OpenLoopSchedule("poisson", 50.0, 42)
    b = OpenLoopSchedule("poisson", 50.0, 42)
    long = a.first(10_000)  # crosses block boundaries
    assert b.first(10_000) == long
    assert a.first(10) == long[:10]
    assert all(np.diff(long) > 0)
    assert OpenLoopSchedule("poisson", 50.0, 43).first(10) != long[:10]


def test_make_arrivals_choices_and_errors() -> None:
    assert make_arrivals(Poisson(), rate_rps=2.0, seed=1) == OpenLoopSchedule("poisson", 2.0, 1)
    g = make_arrivals(Gamma(burstiness=0.5), rate_rps=2.0, seed=1)
    assert isinstance(g, OpenLoopSchedule) and (g.kind, g.burstiness) == ("gamma", 0.5)
    c = make_arrivals(Constant(), rate_rps=2.0, seed=1)
    assert isinstance(c, OpenLoopSchedule) and c.kind == "constant"
    assert make_arrivals(Concurrency(concurrency=4), rate_rps=None, seed=1) == ClosedLoop(4)
    assert make_arrivals(Poisson(), rate_rps=None, seed=1, concurrency=1) == ClosedLoop(1)
    with pytest.raises(SpecError, match="give a rate"):
        make_arrivals(Poisson(), rate_rps=None, seed=1)
    with pytest.raises(SpecError, match="takes no rate"):
        make_arrivals(Concurrency(concurrency=2), rate_rps=3.0, seed=1)
    with pytest.raises(SpecError, match="positive"):
        make_arrivals(Poisson(), rate_rps=0.0, seed=1)
    with pytest.raises(SpecError, match="positive"):
        make_arrivals(Poisson(), rate_rps=float("inf"), seed=1)
