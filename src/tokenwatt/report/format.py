"""Number formatting shared by every view: one place decides digits and units.

Each function takes a value in SI base units (seconds, bytes, fractions) and returns a
short string; None always reads as an em dash, never as 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenwatt.result import BenchResult

__all__ = [
    "DASH",
    "fmt_bytes",
    "fmt_bytes_per_s",
    "fmt_count",
    "fmt_float",
    "fmt_ms",
    "fmt_pct",
    "fmt_quantile",
    "fmt_rate",
    "fmt_signed_pct",
    "fmt_tokens_per_s",
    "no_boundary_text",
    "rel_change",
]

DASH = "—"


def _ok(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def fmt_float(x: float | None, digits: int = 3) -> str:
    """``digits`` significant figures, thousands separated; ∞ spelled out."""
    if x is None:
        return DASH
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if math.isnan(x):
        return DASH
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{x:,.{decimals}f}"


def fmt_count(n: int | None) -> str:
    return DASH if n is None else f"{n:,}"


def fmt_ms(seconds: float | None) -> str:
    """Latency in milliseconds: 3 significant figures, at most 1 decimal above 10 ms."""
    if not _ok(seconds):
        return fmt_float(seconds)
    assert seconds is not None
    ms = seconds * 1e3
    if abs(ms) >= 100:
        return f"{ms:,.0f} ms"
    if abs(ms) >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def fmt_pct(fraction: float | None, decimals: int = 1) -> str:
    if not _ok(fraction):
        return fmt_float(fraction)
    assert fraction is not None
    return f"{fraction * 100:.{decimals}f}%"


def fmt_signed_pct(fraction: float | None) -> str:
    """A relative change: +4.2%, −13.0%, ±0.0%."""
    if not _ok(fraction):
        return DASH
    assert fraction is not None
    v = fraction * 100
    if round(v, 1) == 0:
        return "±0.0%"
    return f"+{v:.1f}%" if v > 0 else f"−{-v:.1f}%"


def fmt_rate(rps: float | None) -> str:
    return DASH if not _ok(rps) else f"{fmt_float(rps)} req/s"


def fmt_tokens_per_s(x: float | None) -> str:
    """Throughputs: whole tokens above 100/s, else 3 significant figures."""
    if not _ok(x):
        return fmt_float(x)
    assert x is not None
    return f"{x:,.0f}" if abs(x) >= 100 else fmt_float(x)


_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_bytes(n: float | None, unit: str = "B") -> str:
    """SI prefixes (1 GB = 10^9 B), as the accelerator catalog states bandwidth."""
    if not _ok(n):
        return fmt_float(n)
    assert n is not None
    for scale, prefix in _SI:
        if abs(n) >= scale:
            return f"{fmt_float(n / scale)} {prefix}{unit}"
    return f"{fmt_float(n)} {unit}"


def fmt_bytes_per_s(n: float | None) -> str:
    return fmt_bytes(n, "B/s")


def fmt_quantile(q: float) -> str:
    """0.99 → p99, 0.995 → p99.5 (labels only; code keeps q in [0, 1])."""
    return f"p{q * 100:g}"


def rel_change(value: float | None, base: float | None) -> float | None:
    """(value − base) / base; None when either is missing or the base is 0."""
    if not _ok(value) or not _ok(base) or base == 0:
        return None
    assert value is not None and base is not None
    return (value - base) / abs(base)


def no_boundary_text(result: BenchResult) -> str:
    """Why there is no boundary: never "SLO not met" when the search stopped for another
    reason (an error probe, a saturated sender, an interruption) or a probe passed."""
    stop = result.search.stop_reason if result.search is not None else None
    passed = [p.rate_rps for p in result.probes if p.slo_passed and p.rate_rps is not None]
    best = f"; highest passing rate {fmt_rate(max(passed))}" if passed else ""
    if stop == "error":
        return f"no boundary: an error probe stopped the run (endpoint broken){best}"
    if stop == "saturated":
        return f"no boundary: the load generator could not offer the load{best}"
    if result.interrupted or stop == "interrupted":
        return f"no boundary: interrupted before one was measured{best}"
    if passed:
        return f"no boundary called{best}"
    lowest = min((p.rate_rps for p in result.probes if p.rate_rps is not None), default=None)
    where = f" (lowest rate probed: {fmt_rate(lowest)})" if lowest is not None else ""
    return f"SLO not met at any probed rate{where}"
