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
away. A server that got *faster* is not caught (a pass at the boundary is what the fit
expects half the time); one that got slower by the factor that matters is.
"""

from __future__ import annotations

from tokenwatt.metrics.boundary import binomial_upper as _upper
from tokenwatt.metrics.slo import binomial_sf

__all__ = ["DRIFT_CONFIDENCE", "binomial_upper", "changed_against", "changed_since"]

DRIFT_CONFIDENCE = 0.99


def binomial_upper(misses: int, n: int, confidence: float = DRIFT_CONFIDENCE) -> float:
    """Clopper–Pearson one-sided upper bound (``metrics.boundary.binomial_upper``)."""
    return _upper(misses, n, confidence)


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
        u = binomial_upper(m0.get(name, 0), n0, confidence)
        if v1 > 0 and binomial_sf(v1, n1, u) < 1.0 - confidence:
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
        if v1 > 0 and binomial_sf(v1, n1, ref) < 1.0 - confidence:
            return _line(name, v1, n1, ref, where)
    return None
