"""How many distinct experts a step's tokens hit, per MoE layer: the MoE weight traffic.

Every token picks ``k`` of ``E`` experts in every MoE layer, independently of other tokens
and layers. A step reads each expert that at least one of its T tokens picked. Drawing
T × k experts per layer per step in numpy costs O(L·T·k) and dominates a 10 ms step at
large batch, so the samplers below draw the per-layer distinct count from its law:

- ``uniform``: each token's k-subset is uniform. The count after t tokens is a Markov chain
  (the next token adds j new experts with hypergeometric probability C(d, k−j)·C(E−d, j) /
  C(E, k) when d are already hit), so its exact distribution for every T is precomputed
  once; a step then costs one uniform draw per layer. Exact in law, mean
  E·(1 − (1 − k/E)^T).
- ``zipf:S``: the expert of popularity rank r is chosen by a token with probability
  π_r = min(1, c·r^−S), c set so Σ π_r = k (probability-proportional-to-size sampling of k
  distinct experts, e.g. systematic sampling). Expert r is hit by T tokens with
  probability 1 − (1 − π_r)^T exactly; the sampler draws the experts independently with
  those probabilities (exact marginals and mean; it ignores the small negative correlation
  between experts inside one token, so the per-step spread is slightly wide).

``explicit_distinct`` draws every token's experts one by one: the slow reference the tests
compare the fast samplers against.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from tokenwatt.geometry.routing import ExpertLoad

__all__ = [
    "DistinctExperts",
    "UniformRouting",
    "ZipfRouting",
    "explicit_distinct",
    "make_routing",
    "systematic_choice",
    "zipf_inclusion",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_SATURATED = 1.0 - 1e-13  # P(all experts hit) beyond which T is treated as saturating


class DistinctExperts:
    """Sampler interface: ``total(T)`` = Σ over MoE layers of distinct experts hit."""

    layers: int
    experts: int
    k: int

    def sample(self, tokens: int) -> IntArray:  # pragma: no cover - interface
        raise NotImplementedError

    def total(self, tokens: int) -> int:
        if tokens <= 0 or self.layers == 0:
            return 0
        return int(self.sample(tokens).sum())

    def expected_per_layer(self, tokens: int) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def inclusion(self) -> FloatArray:
        """π_r: the chance one token picks expert r in a layer (every layer alike; sums to
        k). The /metrics per-expert counters split routed tokens by it."""
        return np.full(self.experts, self.k / self.experts) if self.experts else np.zeros(0)


class UniformRouting(DistinctExperts):
    """Exact law of the distinct count under uniform top-k routing (see module doc)."""

    def __init__(self, experts: int, k: int, layers: int, rng: np.random.Generator) -> None:
        if not 1 <= k <= experts:
            raise ValueError(f"experts_per_token {k} must be in [1, experts={experts}]")
        self.experts, self.k, self.layers, self.rng = experts, k, layers, rng
        e = experts
        total = math.comb(e, k)
        # trans[j, d] = P(the next token adds j new experts | d already hit)
        trans = np.zeros((k + 1, e + 1))
        for d in range(e + 1):
            for j in range(k + 1):
                if k - j <= d and j <= e - d:
                    trans[j, d] = math.comb(d, k - j) * math.comb(e - d, j) / total
        self._trans = trans
        first = np.zeros(e + 1)
        first[k] = 1.0
        self._pmf: list[FloatArray] = [first]  # index t-1 → law after t tokens
        self._cdf: list[FloatArray] = [np.cumsum(first)]
        self._saturated_at: int | None = 1 if k == e else None

    def _extend(self, tokens: int) -> None:
        e = self.experts
        while len(self._pmf) < tokens and self._saturated_at is None:
            prev = self._pmf[-1]
            nxt = np.zeros(e + 1)
            for j in range(self.k + 1):
                contrib = prev * self._trans[j]
                if j == 0:
                    nxt += contrib
                else:
                    nxt[j:] += contrib[:-j]
            nxt /= nxt.sum()
            self._pmf.append(nxt)
            self._cdf.append(np.cumsum(nxt))
            if nxt[e] >= _SATURATED:
                self._saturated_at = len(self._pmf)

    def pmf(self, tokens: int) -> FloatArray:
        """Exact law of the distinct count of one layer after ``tokens`` tokens."""
        if tokens <= 0:
            out = np.zeros(self.experts + 1)
            out[0] = 1.0
            return out
        self._extend(tokens)
        return self._pmf[min(tokens, len(self._pmf)) - 1]

    def sample(self, tokens: int) -> IntArray:
        if tokens <= 0:
            return np.zeros(self.layers, dtype=np.int64)
        self._extend(tokens)
        if self._saturated_at is not None and tokens >= self._saturated_at:
            return np.full(self.layers, self.experts, dtype=np.int64)
        cdf = self._cdf[tokens - 1]
        u = self.rng.random(self.layers) * cdf[-1]
        idx: IntArray = np.searchsorted(cdf, u, side="right").astype(np.int64)
        return np.minimum(idx, self.experts)

    def expected_per_layer(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        return self.experts * (1.0 - (1.0 - self.k / self.experts) ** tokens)


def zipf_inclusion(experts: int, k: int, s: float) -> FloatArray:
    """Per-token inclusion probabilities π_r = min(1, c·r^−s) with Σ π = k (rank order): the
    geometry's one definition (``ExpertLoad.zipf``), which the MBU routing band also uses."""
    row: FloatArray = ExpertLoad.zipf(experts, k, s).inclusion[0]
    return row


class ZipfRouting(DistinctExperts):
    """Skewed routing with exact per-expert hit probabilities (see module doc)."""

    def __init__(
        self, experts: int, k: int, layers: int, s: float, rng: np.random.Generator
    ) -> None:
        if not 1 <= k <= experts:
            raise ValueError(f"experts_per_token {k} must be in [1, experts={experts}]")
        self.experts, self.k, self.layers, self.s, self.rng = experts, k, layers, s, rng
        self.pi = zipf_inclusion(experts, k, s)
        with np.errstate(divide="ignore"):  # π = 1: never missed, log(0) = −inf on purpose
            self._log_miss = np.log1p(-self.pi)
        self._cache: dict[int, FloatArray] = {}

    def hit_probability(self, tokens: int) -> FloatArray:
        p = self._cache.get(tokens)
        if p is None:
            p = -np.expm1(self._log_miss * tokens)
            if len(self._cache) < 65536:
                self._cache[tokens] = p
        return p

    def sample(self, tokens: int) -> IntArray:
        if tokens <= 0:
            return np.zeros(self.layers, dtype=np.int64)
        p = self.hit_probability(tokens)
        hits = self.rng.random((self.layers, self.experts)) < p
        out: IntArray = hits.sum(axis=1).astype(np.int64)
        return out

    def expected_per_layer(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        return float(self.hit_probability(tokens).sum())

    def inclusion(self) -> FloatArray:
        return self.pi


class _NoMoE(DistinctExperts):
    def __init__(self) -> None:
        self.layers, self.experts, self.k = 0, 0, 0

    def sample(self, tokens: int) -> IntArray:
        return np.zeros(0, dtype=np.int64)

    def expected_per_layer(self, tokens: int) -> float:
        return 0.0


def make_routing(
    experts: int, k: int, layers: int, zipf_s: float | None, rng: np.random.Generator
) -> DistinctExperts:
    if layers <= 0 or experts <= 0 or k <= 0:
        return _NoMoE()
    if zipf_s is None:
        return UniformRouting(experts, k, layers, rng)
    return ZipfRouting(experts, k, layers, zipf_s, rng)


def systematic_choice(pi: FloatArray, rng: np.random.Generator) -> IntArray:
    """One token's experts under PPS routing: exactly round(Σπ) distinct, expert r with
    probability π_r (systematic sampling over a random order of the experts)."""
    experts = len(pi)
    k = round(float(pi.sum()))
    order = rng.permutation(experts)
    cum = np.concatenate(([0.0], np.cumsum(pi[order])))
    points = rng.random() + np.arange(k)
    chosen = np.minimum(np.searchsorted(cum, points, side="right") - 1, experts - 1)
    out: IntArray = order[chosen].astype(np.int64)
    return out


def explicit_distinct(
    experts: int,
    k: int,
    tokens: int,
    rng: np.random.Generator,
    pi: FloatArray | None = None,
) -> int:
    """One layer, token by token: uniform k-subsets, or PPS sampling with ``pi``."""
    hit = np.zeros(experts, dtype=bool)
    for _ in range(tokens):
        if pi is None:
            hit[rng.choice(experts, size=k, replace=False)] = True
        else:
            hit[systematic_choice(pi, rng)] = True
    return int(hit.sum())
