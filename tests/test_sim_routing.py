"""The fast distinct-expert samplers against token-by-token draws."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tokenwatt.sim.routing import (
    UniformRouting,
    ZipfRouting,
    explicit_distinct,
    make_routing,
    systematic_choice,
    zipf_inclusion,
)


@pytest.mark.parametrize(("experts", "k"), [(128, 8), (32, 4), (8, 2), (256, 8)])
@pytest.mark.parametrize("tokens", [1, 2, 7, 64, 300])
def test_uniform_law_has_the_closed_form_mean(experts: int, k: int, tokens: int) -> None:
    r = UniformRouting(experts, k, layers=1, rng=np.random.default_rng(0))
    pmf = r.pmf(tokens)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    mean = float(np.arange(experts + 1) @ pmf)
    assert mean == pytest.approx(experts * (1 - (1 - k / experts) ** tokens), rel=1e-9)


def test_uniform_law_matches_token_by_token_draws() -> None:
    experts, k, tokens, n = 16, 4, 5, 3000
    rng = np.random.default_rng(1)
    explicit = np.array([explicit_distinct(experts, k, tokens, rng) for _ in range(n)])
    pmf = UniformRouting(experts, k, 1, np.random.default_rng(2)).pmf(tokens)
    support = np.nonzero(pmf > 1e-4)[0]
    observed = np.array([(explicit == d).sum() for d in support])
    expected = pmf[support] / pmf[support].sum() * observed.sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_uniform_sampler_draws_from_its_law() -> None:
    r = UniformRouting(32, 4, layers=20_000, rng=np.random.default_rng(3))
    draws = r.sample(6)
    pmf = r.pmf(6)
    support = np.nonzero(pmf > 1e-4)[0]
    observed = np.array([(draws == d).sum() for d in support])
    expected = pmf[support] / pmf[support].sum() * observed.sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    assert r.sample(1).tolist() == [4] * 20_000  # one token: exactly k
    assert (r.sample(100_000) == 32).all()  # saturated


def test_zipf_inclusion_probabilities() -> None:
    pi = zipf_inclusion(128, 8, 1.2)
    assert pi.sum() == pytest.approx(8.0)
    assert (pi <= 1.0).all() and (np.diff(pi) <= 1e-15).all()
    steep = zipf_inclusion(16, 4, 3.0)  # the top expert would exceed 1: capped
    assert steep[0] == 1.0 and steep.sum() == pytest.approx(4.0)


def test_systematic_sampling_has_the_stated_marginals() -> None:
    experts, k, n = 16, 4, 4000
    pi = zipf_inclusion(experts, k, 1.0)
    rng = np.random.default_rng(4)
    hits = np.zeros(experts)
    for _ in range(n):
        chosen = systematic_choice(pi, rng)
        assert len(set(chosen.tolist())) == k  # k distinct experts per token
        hits[chosen] += 1
    assert np.abs(hits / n - pi).max() < 4 * np.sqrt(0.25 / n)


def test_zipf_sampler_mean_matches_token_by_token_draws() -> None:
    experts, k, s, tokens = 32, 4, 1.2, 6
    fast = ZipfRouting(experts, k, layers=40_000, s=s, rng=np.random.default_rng(5))
    pi = fast.pi
    rng = np.random.default_rng(6)
    explicit = [explicit_distinct(experts, k, tokens, rng, pi) for _ in range(3000)]
    exact = float((1 - (1 - pi) ** tokens).sum())
    assert fast.expected_per_layer(tokens) == pytest.approx(exact)
    assert float(fast.sample(tokens).mean()) == pytest.approx(exact, rel=0.01)
    assert float(np.mean(explicit)) == pytest.approx(exact, rel=0.02)
    uniform = experts * (1 - (1 - k / experts) ** tokens)
    assert exact < uniform  # skew means collisions


def test_dense_models_have_no_experts() -> None:
    r = make_routing(0, 0, 0, None, np.random.default_rng(0))
    assert r.total(100) == 0
