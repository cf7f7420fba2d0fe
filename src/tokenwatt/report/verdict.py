"""A/B verdicts: is run B better than run A, by how much, and how sure.

Each figure a result states comes with an interval at its confidence (a probe's figures: batch
means over time blocks, Student's t with blocks − 1 degrees of freedom; the boundary rate: the
likelihood-ratio interval of ``metrics.boundary``). The verdict works on the log of the ratio
B/A: each side's standard error is recovered from its own interval (its log width ÷ 2 × its
quantile), the two are added in quadrature (the runs measured apart), and the difference's
interval uses Welch–Satterthwaite's degrees of freedom. An interval that excludes 0 calls the
difference; one that holds 0 says no difference is detectable and how long each run would
have to measure to resolve one (standard errors shrink as 1/√time).

A verdict is only meaningful when the runs differ in the settings under test and nothing else:
``untestable_differences`` names every other difference, and the caller refuses to call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from tokenwatt.metrics.intervals import t_quantile
from tokenwatt.report.compare import _CHECKED, _NAMED_ABOVE, _SPEC_SECTIONS, _spec_sections
from tokenwatt.result import BenchResult, FigureIntervals, ProbeSummary

__all__ = [
    "BOUNDARY_SPREAD",
    "DETECT_FLOOR",
    "SEED_KEYS",
    "VERDICT_FIGURES",
    "AbVerdicts",
    "Estimate",
    "Verdict",
    "compare_estimates",
    "headline_estimates",
    "paired_design",
    "result_verdicts",
    "untestable_differences",
]

# The smallest relative difference the "would need ~N min" hint sizes for: below it a
# measured difference of nearly zero would ask for unbounded time.
DETECT_FLOOR = 0.02
# The spec keys that draw the random schedule: they may differ (a rerun), and when equal the
# runs saw the same prompts at the same moments (a paired design).
SEED_KEYS = frozenset({"workload.seed", "sim.seed"})
# The settings of the server under test: a verdict compares them, so they may differ.
_UNDER_TEST_SECTIONS = frozenset({"sim"})
# The resolved figures ``report.compare`` checks, by the spec key that declares each under test.
_CHECKED_KEYS = {
    "models": "model.source",
    "accelerators": "hardware.accelerator",
    "GPU counts": "hardware.gpus",
    "replicas": "hardware.replicas",
    "SLOs": "slo",
}
# The fitted boundary's interval is narrower than seeded searches of one server scatter: in
# virtual time (benchmarks/compare_verdicts.py) the fitted rate's seed-to-seed standard
# deviation was 1.7-1.8 × the standard error its stated interval implies on the dense case
# and 2.6 × on the MoE case. A verdict on the boundary (and on goodput at it) widens that
# error by the larger, and the methodology says so; the probe figures' batch-means intervals
# were not narrower than their spread and are used as stated.
BOUNDARY_SPREAD = 2.6
_DOF_NORMAL = 1000  # beyond this many degrees of freedom, the normal quantile


@dataclass(frozen=True, slots=True)
class Estimate:
    """One figure of one run: its point, its interval at ``confidence`` (None end: open),
    its degrees of freedom (None: a large-sample interval), and the seconds that measured it."""

    value: float
    low: float | None
    high: float | None
    confidence: float
    dof: int | None
    measured_s: float | None

    def log_se(self) -> float | None:
        """The standard error of ln(value), from the interval's log width; None when the
        interval is open, or an end is not positive."""
        if self.low is None or self.high is None or self.low <= 0 or self.value <= 0:
            return None
        return math.log(self.high / self.low) / (2.0 * _quantile(self.confidence, self.dof))


@dataclass(frozen=True, slots=True)
class Verdict:
    """B against A for one figure: ``change`` = B/A − 1 with its interval at ``confidence``;
    ``called``: the interval excludes 0; ``need_s``: per-run measuring time that would resolve
    a difference of ``resolve`` (not called); ``reason``: why there is no verdict at all."""

    figure: str
    change: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = 0.95
    called: bool = False
    need_s: float | None = None
    resolve: float | None = None
    reason: str | None = None

    def text(self) -> str:
        """One line: the call, the no-difference line with its time, or why not."""
        if self.reason is not None or self.change is None:
            return f"{self.figure}: no verdict ({self.reason})"
        conf = f"{self.confidence * 100:.0f} %"
        if self.called:
            assert self.low is not None and self.high is not None
            return (
                f"{self.figure}: B − A = {_pct(self.change)} "
                f"({_pct(self.low)}…{_pct(self.high)}, {conf})"
            )
        need = ""
        if self.need_s is not None and self.resolve is not None:
            need = f" (would need ~{_minutes(self.need_s)} per run to resolve ±{self.resolve:.0%})"
        return (
            f"{self.figure}: no difference detectable at this precision{need}; "
            f"B − A = {_pct(self.change)} ({_pct(self.low or 0)}…{_pct(self.high or 0)}, {conf})"
        )


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _quantile(confidence: float, dof: float | None) -> float:
    p = (1.0 + confidence) / 2.0
    if dof is None or dof > _DOF_NORMAL:
        return NormalDist().inv_cdf(p)
    return t_quantile(p, max(1, round(dof)))


def _welch_dof(a: Estimate, b: Estimate, va: float, vb: float) -> float | None:
    """Welch–Satterthwaite: the degrees of freedom of va + vb (None: large sample)."""
    if a.dof is None and b.dof is None:
        return None
    den = sum(v * v / d for v, d in ((va, a.dof), (vb, b.dof)) if d is not None)
    return None if den <= 0 else (va + vb) ** 2 / den


def compare_estimates(figure: str, a: Estimate | str, b: Estimate | str) -> Verdict:
    """B against A on the log-ratio scale (module docstring); a string side: why that run
    has no estimate."""
    if isinstance(a, str) or isinstance(b, str):
        return Verdict(figure, reason=f"A: {a}" if isinstance(a, str) else f"B: {b}")
    sa, sb = a.log_se(), b.log_se()
    if sa is None or sb is None:
        return Verdict(figure, reason=f"{'A' if sa is None else 'B'}: interval open at an end")
    va, vb = sa * sa, sb * sb
    se = math.sqrt(va + vb)
    conf = min(a.confidence, b.confidence)
    q = _quantile(conf, _welch_dof(a, b, va, vb))
    d = math.log(b.value / a.value)
    lo, hi = d - q * se, d + q * se
    called = lo > 0 or hi < 0
    need, resolve = None, None
    times = [t for t in (a.measured_s, b.measured_s) if t is not None and t > 0]
    if not called and times:
        resolve = max(abs(math.expm1(d)), DETECT_FLOOR)
        need = sum(times) / len(times) * (q * se / math.log1p(resolve)) ** 2
    return Verdict(
        figure, math.expm1(d), math.expm1(lo), math.expm1(hi), conf, called, need, resolve
    )


def _probe_estimate(
    p: ProbeSummary | None, value: float | None, pick: Callable[[FigureIntervals], object]
) -> Estimate | str:
    """A probe figure with its batch-means interval (t with blocks − 1 degrees of freedom)."""
    if p is None or value is None or value <= 0:
        return "not measured"
    iv = p.intervals
    span = pick(iv) if iv is not None else None
    if iv is None or not isinstance(span, tuple):
        return "no interval stated"
    return Estimate(
        value, span[0], span[1], iv.confidence, max(1, iv.blocks - 1), iv.blocks * iv.block_s
    )


def _fitted(
    value: float | None,
    span: tuple[float | None, float | None] | None,
    confidence: float | None,
    search_s: float | None,
) -> Estimate | str:
    """A figure at the fitted boundary with its likelihood-ratio interval (large sample),
    measured by the whole search."""
    if value is None:
        return "no fitted boundary"
    if span is None or span[0] is None or span[1] is None:
        return "no interval stated" if span is None else "interval open at an end"
    conf = confidence or 0.95
    stated = Estimate(value, span[0], span[1], conf, None, search_s)
    se = stated.log_se()
    if se is None:
        return "interval open at an end"
    half = _quantile(conf, None) * se * BOUNDARY_SPREAD  # centred on the point, on the log scale
    return Estimate(value, value * math.exp(-half), value * math.exp(half), conf, None, search_s)


def _scaled(at_boundary: Estimate | str, probe: Estimate | str) -> Estimate | str:
    """Goodput at the fitted boundary is the rate × the probe's goodput per request/s; its
    interval (``load.bench``) scales the rate's alone. The per-request factor is noisy too
    (tokens received in the window against requests counted in it), so its share is added
    in quadrature, bounded above by the probe goodput's own relative error (which holds the
    arrivals' noise the factor divides out: conservative)."""
    if isinstance(at_boundary, str) or isinstance(probe, str):
        return at_boundary
    s_rate, s_probe = at_boundary.log_se(), probe.log_se()
    if s_rate is None or s_probe is None:
        return at_boundary
    se = math.hypot(s_rate, s_probe)
    q = _quantile(at_boundary.confidence, None)
    v = at_boundary.value
    conf = at_boundary.confidence
    return Estimate(
        v, v * math.exp(-q * se), v * math.exp(q * se), conf, None, at_boundary.measured_s
    )


def headline_estimates(h: ProbeSummary | None, search_s: float | None) -> dict[str, Estimate | str]:
    """The figures a verdict compares, from the headline probe: SLO goodput at the fitted
    boundary where a search fitted one (else the probe's own, only where it met the SLO), the
    boundary rate, tokens per joule and MBU. ``search_s``: every probe's window together."""
    good = h if h is not None and h.slo_passed else None
    probe_goodput = _probe_estimate(
        good,
        good.goodput_output_tokens_per_s if good else None,
        lambda iv: iv.goodput_output_tokens_per_s,
    )
    goodput = probe_goodput
    if h is not None and h.goodput_tokens_per_s_at_boundary is not None:
        goodput = _scaled(
            _fitted(
                h.goodput_tokens_per_s_at_boundary,
                h.goodput_interval_tokens_per_s,
                h.confidence,
                search_s,
            ),
            probe_goodput,
        )
    return {
        "SLO goodput": goodput,
        "boundary rate": _fitted(
            h.boundary_rate_rps if h else None,
            h.rate_interval_rps if h else None,
            h.confidence if h else None,
            search_s,
        ),
        "tokens per joule": _probe_estimate(
            h, h.tokens_per_joule if h else None, lambda iv: iv.tokens_per_joule
        ),
        "MBU": _probe_estimate(h, h.mbu if h else None, lambda iv: iv.mbu),
    }


def _estimates(r: BenchResult) -> dict[str, Estimate | str]:
    return headline_estimates(r.headline_probe, sum(p.window_s for p in r.probes) or None)


def _sim_or_none(r: BenchResult, key: str) -> str | None:
    flat = _spec_sections(r)
    section = key.split(".", 1)[0]
    return flat.get(section, {}).get(key)


def paired_design(a: BenchResult, b: BenchResult) -> bool:
    """The runs drew the same schedule: same workload seed (and simulator seed when both
    were simulated). Same seeds with identical workloads send the same prompts at the same
    offsets, so what the schedule contributes cancels in B − A."""
    keys = ["workload.seed"] + (["sim.seed"] if a.simulated and b.simulated else [])
    return all(_sim_or_none(a, k) == _sim_or_none(b, k) for k in keys)


def untestable_differences(
    labels: Sequence[str], results: Sequence[BenchResult], under_test: Sequence[str] = ()
) -> list[str]:
    """Every difference between the runs other than the settings under test (the endpoint,
    the simulator's settings, the seeds, and the dotted keys in ``under_test``): one line
    each, naming the field and each run's value. Empty: a verdict may be called."""
    allowed = SEED_KEYS | set(under_test)
    out = []
    for what, key in _CHECKED:
        values = [key(r) for r in results]
        if len(set(values)) > 1 and _CHECKED_KEYS[what] not in allowed:
            shown = "; ".join(f"{lab} {v}" for lab, v in zip(labels, values, strict=True))
            out.append(f"{what} ({shown})")
    flat = [_spec_sections(r) for r in results]
    for section, _ in _SPEC_SECTIONS:
        if section in _UNDER_TEST_SECTIONS:
            continue
        keys = sorted(set().union(*(f[section] for f in flat)) - _NAMED_ABOVE - allowed)
        for k in keys:
            values = [f[section].get(k, "—") for f in flat]
            if len(set(values)) > 1:
                shown = "; ".join(f"{lab} {v}" for lab, v in zip(labels, values, strict=True))
                out.append(f"{k} ({shown})")
    return out


VERDICT_FIGURES = ("SLO goodput", "boundary rate", "tokens per joule", "MBU")


@dataclass(frozen=True, slots=True)
class AbVerdicts:
    """B (``labels[1]``) against A (``labels[0]``): the refusals (non-empty: the specs differ
    beyond the settings under test, no verdict called), each figure's verdict, the design."""

    labels: tuple[str, str]
    refused: tuple[str, ...]
    verdicts: tuple[Verdict, ...]
    paired: bool


def result_verdicts(
    labels: Sequence[str], results: Sequence[BenchResult], under_test: Sequence[str] = ()
) -> AbVerdicts:
    """The second run against the first on each figure of ``VERDICT_FIGURES``."""
    a, b = results[0], results[1]
    pair = (labels[0], labels[1])
    refused = tuple(untestable_differences(pair, (a, b), under_test))
    if refused:
        return AbVerdicts(pair, refused, (), paired_design(a, b))
    ea, eb = _estimates(a), _estimates(b)
    verdicts = tuple(compare_estimates(f, ea[f], eb[f]) for f in VERDICT_FIGURES)
    return AbVerdicts(pair, (), verdicts, paired_design(a, b))
