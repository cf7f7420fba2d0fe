"""Did the server change during the run? Two checks after the search, each a binomial test.

A search reads probes taken minutes apart as one curve. A server that slows down halfway (a
neighbour on the GPU, thermal throttling, a cache that filled) leaves the passes from before
the change standing, and the boundary they imply is stale. So after the search the run probes
again:

* **re-test**: the highest rate that passed earlier. Its new misses are compared with its old
  ones: the server changed when the new count is improbable under the old probe's own upper
  bound, P(X ≥ v_new | n_new, u_old) < 1 − ``DRIFT_CONFIDENCE``, where u_old is the
  Clopper–Pearson upper bound (at ``DRIFT_CONFIDENCE``) of the old miss fraction;
* **confirmation**: the fitted boundary rate. The fit allows there, per limit, a miss fraction
  up to the highest of the curves its confidence set holds (``metrics.boundary.
  miss_fraction_upper``); the server changed when the new count is improbable even at that.
  A fit whose interval is wide allows much, and the confirmation then catches only a large
  change: the check is exactly as sharp as the boundary it confirms.

Both use a stricter confidence (99 %) than a verdict, since a false alarm throws the whole run
away, and both read counts through a design effect (``DRIFT_DESIGN_EFFECT``, D = 4: n
requests of a window as n/D independent ones; the boundary interval's low end used the same
D until its ends moved between probes, ``metrics.boundary.REPORTED_DESIGN_EFFECT``). Misses in
one window come in bursts (a queue that builds fails its neighbours together), so raw binomial
counts are far too sure: README's flag form against a healthy simulator, confirming at 14.4
req/s between a pass at 13.9 and a fail at 14.6, saw 11 of 172 over the TPOT limit against
6 of 187 at 14.6 — p ≤ 0.81 % as independent draws, an everyday spread for correlated ones.
A server that got *faster* is not caught (a pass at the boundary is what the fit
expects half the time); one that got slower by the factor that matters is.
"""

from __future__ import annotations

from tokenwatt.metrics.boundary import binomial_upper as _upper
from tokenwatt.metrics.slo import binomial_sf

__all__ = [
    "DRIFT_CONFIDENCE",
    "DRIFT_DESIGN_EFFECT",
    "binomial_upper",
    "changed_against",
    "changed_since",
    "effective_counts",
]

DRIFT_CONFIDENCE = 0.99
# Calibrated on the burst case below and worked by hand in tests/test_drift.py at D = 4; the
# boundary's own D changed with its interval's ends (coverage, docs/methodology.md), this one
# was not re-measured and stays.
DRIFT_DESIGN_EFFECT = 4.0


def binomial_upper(misses: int, n: int, confidence: float = DRIFT_CONFIDENCE) -> float:
    """Clopper–Pearson one-sided upper bound (``metrics.boundary.binomial_upper``)."""
    return _upper(misses, n, confidence)


def effective_counts(
    n: int, misses: int, design_effect: float = DRIFT_DESIGN_EFFECT
) -> tuple[int, int]:
    """(n, misses) as independent draws: each divided by the design effect, rounded (n ≥ 1
    where there was any request; a miss count above zero stays at least 1)."""
    if n <= 0:
        return 0, 0
    n_eff = max(1, round(n / design_effect))
    v_eff = min(n_eff, max(1 if misses > 0 else 0, round(misses / design_effect)))
    return n_eff, v_eff


def _line(name: str, v: int, n: int, ref: float, where: str) -> str:
    return f"{name}: {v} of {n} requests over the limit {where}, improbable at p ≤ {ref:.2%}"


def changed_since(
    before: tuple[int, dict[str, int]],
    after: tuple[int, dict[str, int]],
    where: str,
    confidence: float = DRIFT_CONFIDENCE,
) -> str | None:
    """A line when ``after`` (judged, misses per limit) is improbable given ``before``."""
    n0, m0 = before
    n1, m1 = after
    for name, v1 in m1.items():
        e0, k0 = effective_counts(n0, m0.get(name, 0))
        e1, k1 = effective_counts(n1, v1)
        u = binomial_upper(k0, e0, confidence)
        if k1 > 0 and binomial_sf(k1, e1, u) < 1.0 - confidence:
            return _line(name, v1, n1, u, where)
    return None


def changed_against(
    upper: dict[str, float],
    after: tuple[int, dict[str, int]],
    where: str,
    confidence: float = DRIFT_CONFIDENCE,
) -> str | None:
    """A line when ``after`` is improbable at each limit's allowed ``upper`` miss fraction."""
    n1, m1 = after
    for name, v1 in m1.items():
        ref = upper.get(name, 1.0)
        e1, k1 = effective_counts(n1, v1)
        if k1 > 0 and binomial_sf(k1, e1, ref) < 1.0 - confidence:
            return _line(name, v1, n1, ref, where)
    return None
