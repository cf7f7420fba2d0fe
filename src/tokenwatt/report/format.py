"""Number formatting shared by every view: one place decides digits and units.

Each function takes a value in SI base units (seconds, bytes, fractions) and returns a
short string; None always reads as an em dash, never as 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tokenwatt.metrics.boundary import LOW_END_MIN_BELOW_SHORT, SHORT_OUTPUT_COVERAGE

if TYPE_CHECKING:
    from tokenwatt.result import BenchResult, ProbeSummary

__all__ = [
    "DASH",
    "STAR_CAPTION",
    "STAR_SHORT",
    "fmt_bytes",
    "fmt_bytes_per_s",
    "fmt_count",
    "fmt_float",
    "fmt_interval",
    "fmt_ms",
    "fmt_pct",
    "fmt_quantile",
    "fmt_rate",
    "fmt_signed_pct",
    "fmt_tokens_per_s",
    "goodput_headline",
    "higher_passes_note",
    "no_boundary_text",
    "no_failure_seen",
    "rel_change",
    "safe_rate_text",
]

DASH = "—"
# What the star marks: short on the terminal's probe table, whole in the HTML's table and charts.
STAR_SHORT = "* = the headline's probe"
STAR_CAPTION = (
    "* = the headline's probe: the highest search pass that no failure at a lower rate "
    "outranks; drift checks and the single stream do not join the fit, and each probe's "
    "fit_role says why"
)


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
    if stop == "changed":
        return f"no boundary: the server changed during the run{best}"
    if stop == "single_stream_fails":
        return "no boundary: even one request at a time misses the SLO (no rate can pass)"
    if result.interrupted or stop == "interrupted":
        return f"no boundary: interrupted before one was measured{best}"
    if passed:
        return f"no boundary called{best}"
    lowest = min((p.rate_rps for p in result.probes if p.rate_rps is not None), default=None)
    where = f" (lowest rate probed: {fmt_rate(lowest)})" if lowest is not None else ""
    return f"SLO not met at any probed rate{where}"


Interval = tuple[float | None, float | None]


def fmt_interval(
    point: float | None,
    interval: Interval | None,
    confidence: float | None,
    unit: str,
    fmt: Callable[[float | None], str],
) -> str:
    """``13.2 req/s (12.6–13.8, 95 %)``; an open end keeps the point first and shows the
    one end the evidence gives: ``13.2 req/s (≥ 12.6, 95 %)`` or ``13.2 req/s (≤ 13.8, 95 %)``
    (a headline must never read as a bound alone where a point was measured)."""
    if point is None or interval is None or confidence is None:
        return f"{fmt(point)} {unit}"
    lo, hi = interval
    c = f"{confidence * 100:g} %"
    if lo is not None and hi is not None:
        return f"{fmt(point)} {unit} ({fmt(lo)}–{fmt(hi)}, {c})"
    if lo is not None:
        return f"{fmt(point)} {unit} (≥ {fmt(lo)}, {c})"
    if hi is not None:
        return f"{fmt(point)} {unit} (≤ {fmt(hi)}, {c})"
    return f"{fmt(point)} {unit}"


def no_failure_seen(result: BenchResult) -> bool:
    """The search never saw a failing rate above its boundary: the boundary is a lower bound
    (interrupted, stopped at max_rate or max_probes while still growing). Interrupted, error
    and saturated probes are no failures: they never judged the SLO."""
    b = result.boundary
    if result.search is None or b is None or b.rate_rps is None:
        return False
    d = b.rate_rps
    return not any(
        not p.slo_passed
        and not p.interrupted
        and not p.slo_detail.error_probe
        and not p.slo_detail.load_generator_saturated
        and p.rate_rps is not None
        and p.rate_rps > d
        for p in result.probes
    )


def goodput_headline(result: BenchResult, b: ProbeSummary) -> tuple[str, str]:
    """The SLO goodput headline and its detail. The headline is what a probe demonstrated:
    the boundary probe's goodput (it passed the SLO over its window), written as a lower
    bound ``≥ X tok/s (no failing rate found)`` when no rate failed above it. The detail is
    the fitted boundary between the last pass and the first fail, with its interval and the
    goodput there: an estimate, never the headline (a fitted rate may not have been run, or
    may have failed its confirmation within its uncertainty)."""
    measured = f"{fmt_tokens_per_s(b.goodput_output_tokens_per_s)} tok/s"
    main = f"≥ {measured} (no failing rate found)" if no_failure_seen(result) else measured
    if b.goodput_tokens_per_s_at_boundary is None or b.boundary_rate_rps is None:
        return main, ""
    good = fmt_interval(
        b.goodput_tokens_per_s_at_boundary,
        b.goodput_interval_tokens_per_s,
        b.confidence,
        "tok/s",
        fmt_tokens_per_s,
    )
    rate = fmt_interval(b.boundary_rate_rps, b.rate_interval_rps, b.confidence, "req/s", fmt_float)
    lean = "; ".join(x for x in (lean_note(b), short_output_note(result)) if x)
    higher = higher_passes_note(result, b)
    detail = f"fitted boundary {rate}, {good} there" + (f" ({lean})" if lean else "")
    return main, detail + (f"  ·  {higher}" if higher else "")


def short_output_note(result: BenchResult) -> str | None:
    """The coverage such an interval was measured to have where the search kept the low end at
    the short-output distance (``search.low_end_min_below``; metrics.boundary.
    SHORT_OUTPUT_COVERAGE), since its lowest lies under the 90 % a 95 % label allows."""
    s = result.search
    if s is None or s.low_end_min_below != LOW_END_MIN_BELOW_SHORT:
        return None
    lo, hi = SHORT_OUTPUT_COVERAGE
    return f"short outputs: such intervals held {lo:.0%}–{hi:.0%} in virtual time"


def lean_note(b: ProbeSummary) -> str | None:
    """The direction the fitted point may be wrong in (``boundary_rate_leans``), said beside it:
    a point fitted from short windows reads the boundary high (metrics.boundary.
    FITTED_POINT_LEANS), and the headline's one passing window may lie above the long-run
    boundary too, so the reader is sent to the safe rate; None where none is recorded."""
    if b.boundary_rate_leans != "high":
        return None
    return "the point reads high, the headline's window may too: plan on the safe rate"


def higher_passes_note(result: BenchResult, b: ProbeSummary) -> str | None:
    """Why probes that passed above the headline's rate are not the headline, each with its
    ``fit_role`` (a drift check, a pass a lower failure outranks); None when there are none."""
    higher = [
        p for p in result.probes
        if p.slo_passed and p.index != b.index and p.rate_rps is not None
        and b.rate_rps is not None and p.rate_rps > b.rate_rps
    ]  # fmt: skip
    if not higher:
        return None
    parts = []
    for p in higher:
        role = (p.fit_role or "not the headline's probe").replace("joined the fit; ", "")
        parts.append(f"probe {p.index} passed at {fmt_float(p.rate_rps)} req/s: {role}")
    return "higher passes not headlined: " + "; ".join(parts)


def safe_rate_text(result: BenchResult, b: ProbeSummary) -> str | None:
    """The safe rate: the low end of the boundary's interval, with goodput there, or why it
    was not established (``search.unclosed``); with its flag when a drift check at or below
    it failed (``load.safe_rate``); None where no boundary was fitted."""
    if b.boundary_rate_rps is None:
        return None
    conf = f"{b.confidence:.0%}" if b.confidence is not None else "95%"
    unclosed = result.search.unclosed if result.search is not None else None
    flag = b.safe_rate_flag
    if flag is not None:  # a drift check at or below it failed: its direction first
        good = b.goodput_tokens_per_s_at_safe_rate
        there = f", {fmt_tokens_per_s(good)} tok/s goodput there" if good is not None else ""
        now = "withdrawn" if b.safe_rate_rps is None else f"{fmt_float(b.safe_rate_rps)} req/s"
        return f"{now}{there} [{flag.line()}]"
    if b.safe_rate_rps is None:
        return f"not established (the boundary's {conf} interval is open below)" + (
            f": {unclosed}" if unclosed else ""
        )
    good = b.goodput_tokens_per_s_at_safe_rate
    there = f", {fmt_tokens_per_s(good)} tok/s goodput there" if good is not None else ""
    where = f"the low end of the boundary's {conf} interval"
    text = f"{fmt_float(b.safe_rate_rps)} req/s{there} ({where})"
    return text + (f"; {unclosed}" if unclosed else "")
