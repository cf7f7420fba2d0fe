"""The SLO-boundary search: the highest Poisson rate at which the SLO still holds.

A pure algorithm over ``async probe(rate_rps, seed) -> ProbeOutcome``: it knows nothing of
HTTP, so it is tested in milliseconds against synthetic latency models and driven for real by
``tokenwatt.load.bench``. Like MLPerf LoadGen's FindPeakPerformance it brackets, then bisects:

1. grow: probe at the start rate and multiply by ``growth`` while the SLO holds
   (if the start rate already fails, divide by ``growth`` until a rate passes). With
   ``first_step`` (a start estimated near the boundary: ``tokenwatt bench``'s closed-loop
   staircase, or the spec's own start rate), the walk away from the start takes small steps
   first, each the square of the last, up to ``growth`` (``step_factor``): a pass costs
   ≥ 194 requests at any rate, so a probe far below the boundary is the expensive mistake,
   and a start near it is most likely to be off by a little;
2. bisect: probe the geometric mean of the highest passing rate ``lo`` and the lowest failing
   rate ``hi`` until (hi − lo)/lo < ``precision``;
3. confirm: probe ``hi`` once more with a fresh seed. Bisection never looks above a failure
   again, so one spurious failure (noise, a hiccup) would otherwise pin the boundary below the
   truth; if the rerun passes, it becomes the new ``lo`` and the search goes on above it
   (bisecting toward the next recorded failure, or growing if there is none).

Rates as counted: a Poisson schedule in a short window delivers more or fewer arrivals than
offered (a probe offered 8.72 req/s once held 6.87 in its window), so a verdict speaks for the
rate the server actually saw: the **counted** rate (requests scheduled in the window ÷ window;
"achieved" names the successes alone). ``bracket_rate`` places it: a pass counts at the
counted rate when that is lower than offered by more than Poisson noise explains (two
standard deviations of a Poisson count, 2·r/√n for n requests), a failure at the counted
rate when it is that much higher; within the noise the offered rate stands (it is the
better estimate of the load). A pass never moves up and a failure never moves down, so noise
cannot widen the claim.

A probe whose outcome has ``halt`` set (an error probe: the endpoint is broken; or a
saturated load generator: the load was not offered) is neither a pass nor a failure: it is
recorded as a step, leaves the bracket as it was, and ends the search with that stop reason.
No boundary is ever called from it.

The boundary is ``lo``: a rate that was measured to pass, with a measured failure at most
``precision`` above it. Verdicts are noisy near the boundary; the bracket comes from the latest
verdict at each rate, a newer verdict overriding older ones it contradicts (``_record``).

Every probe gets a fresh schedule seed derived from the run's seed and the probe's index, so
no two probes replay the same arrivals and a rerun replays them all.

**Fit mode** (every outcome carries ``evidence``: its counted rate, judged requests and misses
per limit, as ``tokenwatt bench`` supplies). Once a failure brackets the boundary, the next
rate comes from the measurements: ``metrics.boundary.fit_boundary`` fits each limit's miss
fraction against rate (monotone) and gives the boundary with a confidence interval whose ends
are probed rates; the search probes the interval's geometric middle (or, when a probe already
sits within precision/2 of it, the fitted point) and stops when the interval's half width is
within ``precision`` of its point. No confirmation re-run: a rate already measured is probed
again only when both candidates have been measured (the data there are undecided or
contradict each other), and then both measurements enter the fit together; in the
two-sided search, at most once: after that its reported interval decides (below). The
one-sided search keeps pooling there: its D = 1 ends sit at probed rates and narrow only by
more counts at them.

**Two-sided** (``two_sided``, what ``tokenwatt bench`` runs): the search above stops on its
own interval (D = 1, ends at probed rates) at its resolution, min(``precision``, 5 %); the
interval the user reads (``metrics.boundary.reported_boundary``: the low end through the
design effect D = 5) is then usually open below. The search goes on (``_close_next``) until
its reported interval (``metrics.boundary.two_sided_boundary``: the low end at a probed rate
through D = ``TWO_SIDED_DESIGN_EFFECT`` = 4) is closed at both ends and its half width is
within ``precision`` of its point. That interval decides the stop also while the D = 1 fit is
still open (too few counts at a failure to place its high end): a plain bracket within
``precision`` does not stop it.
An open high end gets a probe at point × (1 + precision); otherwise the low end gets its probe
``low_end_min_below`` + 1 % below the point at every precision (``low_end_target``; 12 %, or
22 % for short outputs, ``metrics.boundary.low_end_min_below``), where the reported low end may
lie (``two_sided_boundary``'s ``min_below``). At a precision tighter than that allows, the
search stops once the point and the high end are within precision and the low end there is
established, and ``SearchOutcome.unclosed`` says why the interval is wider than asked. That
probe's window is long enough
for the low end at once (``want_judged``: the clean requests the end still needs,
``LOW_END_CLEAN`` less those already judged clean from its rate up to the lowest failure; its
pass may not close the window sooner, a failure still stops it at once): one warm-up and one
drain instead of one per ~280 requests. If a miss there leaves the end short, the rate is
probed again (the counts pool) until it is established. The low end is probed well below the
point on purpose: the point of short windows leans high (the long-run boundary at 0.86–0.93 ×
the point in virtual time), and a search that kept probing just below it until a clean window
closed the low end selected the optimistic windows (coverage fell to 8–72 %; at ±5 % with the
low end 4–6 % below, 29–44 %). When ``max_probes`` or ``max_time_s`` runs out
first, ``SearchOutcome.unclosed`` says which end was not established and why.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from tokenwatt.metrics.boundary import (
    BOUNDARY_CONFIDENCE,
    LOW_END_MIN_BELOW,
    TWO_SIDED_DESIGN_EFFECT,
    BoundaryFit,
    Evidence,
    fit_boundary,
    profile_threshold,
    two_sided_boundary,
)

__all__ = [
    "LOW_END_CLEAN",
    "LOW_END_MIN_BELOW",
    "NOISE_SIGMAS",
    "BoundarySearch",
    "Phase",
    "ProbeOutcome",
    "SearchOutcome",
    "SearchStep",
    "StopReason",
    "bracket_rate",
    "drift_check_plan",
    "low_end_clean",
    "low_end_target",
    "probe_seed",
    "step_factor",
    "step_role",
    "unclosed_line",
]

P = TypeVar("P")
Phase = Literal["grow", "descend", "bisect", "confirm", "fit", "check"]
StopReason = Literal[
    "converged",
    "max_probes",
    "max_rate",
    "failed_at_start",
    "interrupted",
    "error",
    "saturated",
    "changed",
    "max_time",
]
Halt = Literal["error", "saturated"]
_MASK64 = (1 << 64) - 1


def probe_seed(run_seed: int, index: int) -> int:
    """A 63-bit seed for probe ``index`` of a run (splitmix64 of the pair): distinct per probe,
    identical across reruns with the same run seed."""
    z = ((run_seed & _MASK64) * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


@dataclass(frozen=True, slots=True)
class ProbeOutcome(Generic[P]):
    """What the search needs from one probe: the verdict. ``payload`` carries whatever the
    caller wants back (its measured summary); the search only stores it."""

    passed: bool
    reason: str | None = None
    payload: P | None = None
    halt: Halt | None = None  # error probe or saturated sender: stop, judge nothing
    counted_rps: float | None = None  # requests scheduled in the window ÷ window (counted)
    requests: int | None = None  # how many: the Poisson count behind ``counted_rps``
    evidence: Evidence | None = None  # misses per limit at the counted rate (fit mode)


class _HaltedError(Exception):
    """A probe said ``halt``: the search ends where it is."""


# The search's own (D = 1) stop before the two-sided phase: never coarser than this, so the
# fit's point is placed as well as the coverage of the reported interval was measured with.
RESOLUTION = 0.05
LOW_MARGIN = 0.01  # the low end's probe sits this fraction (of the point) inside the target
NOISE_SIGMAS = 2.0  # how far (in Poisson standard deviations) counted may stray unremarked


def low_end_clean(design_effect: float) -> int:
    """The clean requests at p99 that establish the two-sided interval's low end through
    ``design_effect`` D: its cut loses n · −ln(0.99) / D > χ²₁(95 %)/2
    (``metrics.boundary.two_sided_boundary``)."""
    return math.ceil(profile_threshold(0.95) * design_effect / -math.log1p(-0.01))


LOW_END_CLEAN = low_end_clean(TWO_SIDED_DESIGN_EFFECT)  # D = 4: n ≥ 765


def low_end_target(
    point_rps: float,
    high_rps: float,
    precision: float,
    min_below: float = LOW_END_MIN_BELOW,
    fixed: bool = True,
) -> tuple[float, bool]:
    """The two-sided low end's probe rate, and whether ``min_below`` placed it: exactly
    ``min_below`` + ``LOW_MARGIN`` below the point at every precision (``fixed``), where the
    reported low end may lie (``metrics.boundary.two_sided_boundary``). Why there: the point,
    fitted from short windows, leans high, so a low end nearer it lay above the long-run
    boundary in most searches at ±5 %; farther down, where a coarse precision allows, the
    interval holds the boundary in nearly every search, wider than its 95 % says
    (docs/validation.md, "The low end's probe at one distance"). Below about ±9 % the half
    width is then wider than asked. ``fixed`` False: the rate whose established pass leaves the
    half width within precision, point × (1 − 2·precision + ``LOW_MARGIN``) + (high − point),
    where that lies farther down (the benchmarks' ``--low-end-by-precision``)."""
    floor = point_rps * (1.0 - min_below - LOW_MARGIN)
    target = point_rps * (1.0 - 2.0 * precision + LOW_MARGIN) + (high_rps - point_rps)
    if fixed or target > floor:
        return floor, True
    return target, False


def step_factor(k: int, growth: float, first_step: float | None) -> float:
    """The k-th step's factor (k = 0, 1, …) of a walk from a rate: ``growth`` every time, or
    with ``first_step`` f₀: f₀^(2^k), up to ``growth`` (1.1, 1.21, 1.46, 2, 2, … for f₀ = 1.1,
    growth 2): a walk of n steps covers as much log rate as about n − log₂(ln g / ln f₀) steps
    of ``growth``, and the first ones probe close to where it started."""
    if first_step is None:
        return growth
    return math.exp(min(math.log(growth), math.log(first_step) * 2.0 ** min(k, 60)))


_WHY = {
    "max_probes": "search.max_probes ran out",
    "max_time": "the time limit (--max-time) ran out",
    "changed": "the server changed during the run",
    "max_rate": "the SLO still held at search.max_rate_rps",
    "failed_at_start": "no rate passed",
    "interrupted": "the run was interrupted",
    "error": "the endpoint failed",
    "saturated": "the load generator could not offer the load",
    "converged": (
        "the low end is never placed closer than {min_below:.0%} below the point; "
        "closer, the interval labelled 95 % was measured to hold the boundary far less often"
    ),
}


def unclosed_line(
    rep: BoundaryFit, precision: float, stop: str, min_below: float = LOW_END_MIN_BELOW
) -> str | None:
    """One line naming the end of the reported interval not established (open, or farther
    from the point than ``precision``) and why the search stopped before it was (for a
    converged search: the low end's distance ``min_below``); None when both ends are
    established."""
    point = rep.rate_rps
    if point is None:
        return f"no boundary was placed: {_WHY.get(stop, stop).format(min_below=min_below)}"
    low, high = rep.low_rps, rep.high_rps
    half = rep.relative_half_width
    if low is not None and high is not None and half is not None:
        if half <= precision:
            return None
        far = "low" if point - low >= high - point else "high"
        what = f"the half width is {half:.0%}, the {far} end farther from the point"
    else:
        what = " and ".join(f"the {n} end is open" for n, e in (("low", low), ("high", high))
                            if e is None)  # fmt: skip
    why = _WHY.get(stop, stop).format(min_below=min_below)
    return f"{what} (asked ±{precision:.0%}): {why}"


def bracket_rate(offered_rps: float, outcome: ProbeOutcome[P]) -> float:
    """The rate a verdict speaks for (see the module docstring): the offered rate, or the
    counted one where it differs beyond Poisson noise in the direction that weakens the
    verdict (a pass at a lower load, a failure at a higher one)."""
    a, n = outcome.counted_rps, outcome.requests
    if a is None or not n or not math.isfinite(a) or a <= 0:
        return offered_rps
    noise = NOISE_SIGMAS * offered_rps / math.sqrt(n)
    if outcome.passed and a < offered_rps - noise:
        return a
    if not outcome.passed and a > offered_rps + noise:
        return a
    return offered_rps


@dataclass(frozen=True, slots=True)
class SearchStep(Generic[P]):
    index: int  # 1-based probe number within the search
    rate_rps: float
    seed: int
    phase: Phase
    outcome: ProbeOutcome[P]
    lo_rps: float | None  # bracket after this probe
    hi_rps: float | None
    bracket_rps: float | None = None  # the rate its verdict was placed at (bracket_rate)

    @property
    def placed_rps(self) -> float:
        return self.rate_rps if self.bracket_rps is None else self.bracket_rps

    @property
    def passed(self) -> bool:
        return self.outcome.passed


@dataclass(slots=True)
class SearchOutcome(Generic[P]):
    steps: list[SearchStep[P]] = field(default_factory=list)
    lo_rps: float | None = None  # highest passing rate: the boundary
    hi_rps: float | None = None  # lowest failing rate above it
    stop_reason: StopReason = "interrupted"
    precision_target: float = 0.05
    fit: BoundaryFit | None = None  # fit mode: the boundary with its interval
    evidence: list[Evidence] = field(default_factory=list)  # fit mode: each probe, as placed
    reported: BoundaryFit | None = None  # two-sided: the reported interval at the stop
    unclosed: str | None = None  # two-sided: which end was not established, and why

    @property
    def precision_reached(self) -> float | None:
        """Fit mode: the interval's half width over its point (the reported interval's when the
        search was two-sided); else the bracket's width."""
        if self.reported is not None and self.reported.relative_half_width is not None:
            return self.reported.relative_half_width
        if self.fit is not None and self.fit.relative_half_width is not None:
            return self.fit.relative_half_width
        if self.lo_rps is None or self.hi_rps is None:
            return None
        return (self.hi_rps - self.lo_rps) / self.lo_rps

    @property
    def boundary(self) -> SearchStep[P] | None:
        """The probe that measured ``lo`` (the last one at that rate)."""
        for step in reversed(self.steps):
            if step.passed and step.placed_rps == self.lo_rps:
                return step
        return None

    @property
    def first_failure_above(self) -> SearchStep[P] | None:
        for step in reversed(self.steps):
            if not step.passed and step.placed_rps == self.hi_rps:
                return step
        return None


ProbeFn = Callable[[float, int], Awaitable[ProbeOutcome[P]]]


class BoundarySearch(Generic[P]):
    """Bracket-then-bisect over the offered rate. ``outcome`` is kept current after every probe,
    so a caller interrupted mid-search (Ctrl-C) still has every completed step."""

    def __init__(
        self,
        probe: ProbeFn[P],
        *,
        start_rate_rps: float,
        growth: float = 2.0,
        precision: float = 0.05,
        max_rate_rps: float = 10_000.0,
        max_probes: int = 20,
        seed: int = 0,
        min_rate_rps: float | None = None,
        confirm: bool = True,
        allowed: float | None = None,
        confidence: float = BOUNDARY_CONFIDENCE,
        design_effect: float = 1.0,
        low_end_design_effect: float = TWO_SIDED_DESIGN_EFFECT,
        low_end_min_below: float = LOW_END_MIN_BELOW,
        low_end_fixed: bool = True,
        on_step: Callable[[SearchStep[P]], None] | None = None,
        first_step: float | None = None,
        two_sided: bool = False,
        max_time_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(start_rate_rps) and start_rate_rps > 0):
            raise ValueError(f"start_rate_rps must be > 0, got {start_rate_rps}")
        if growth <= 1:
            raise ValueError(f"growth must be > 1, got {growth}")
        if not 0 < precision < 1:
            raise ValueError(f"precision must be in (0, 1), got {precision}")
        if first_step is not None and first_step <= 1:
            raise ValueError(f"first_step must be > 1, got {first_step}")
        self._probe = probe
        self.start_rate_rps = min(start_rate_rps, max_rate_rps)
        self.growth = growth
        self.precision = precision
        self.max_rate_rps = max_rate_rps
        self.max_probes = max_probes
        self.seed = seed
        # Descending below the start: give up after five growth steps down by default.
        self.min_rate_rps = (
            min_rate_rps if min_rate_rps is not None else self.start_rate_rps / growth**5
        )
        self.confirm = confirm
        self.allowed = allowed  # α, the allowed miss fraction: fit mode needs it
        self.confidence = confidence
        self.design_effect = design_effect
        self.low_end_design_effect = low_end_design_effect  # the two-sided low end's D
        # The low end's probe exactly this far below the point (at least, ``low_end_fixed``
        # False); the bench sets it from the output tokens measured (``low_end_min_below``).
        self.low_end_min_below = low_end_min_below
        self.low_end_fixed = low_end_fixed
        self._evidence: list[Evidence] = []
        self._fit_mode = allowed is not None
        self._confirmed: set[float] = set()
        self._verdicts: dict[float, bool] = {}
        self._on_step = on_step
        self.outcome: SearchOutcome[P] = SearchOutcome(precision_target=precision)
        self.current_phase: Phase = "grow"  # of the probe in flight, for progress displays
        # Of the probe in flight: the judged requests its pass should gather before the window
        # may close (the two-sided low end's long window); None: the sequential verdict alone.
        self.want_judged: int | None = None
        self.first_step = first_step
        self._walk: tuple[int, int] = (0, 0)  # (direction, steps taken in it)
        self.two_sided = two_sided
        self.max_time_s = max_time_s
        self._clock = clock
        self._t0 = clock()
        # The D = 1 stop: at precision, or at RESOLUTION when the reported interval decides.
        self.resolution = min(precision, RESOLUTION) if two_sided else precision

    def _factor(self, direction: int) -> float:
        """The factor of the next step of a walk up (+1) or down (−1) from a rate:
        ``step_factor`` of the steps already taken in this direction (a turn starts anew)."""
        d, k = self._walk
        k = k + 1 if d == direction else 0
        self._walk = (direction, k)
        return step_factor(k, self.growth, self.first_step)

    async def _run_one(self, rate: float, phase: Phase, want_judged: int | None = None) -> bool:
        out = self.outcome
        index = len(out.steps) + 1
        seed = probe_seed(self.seed, index)
        self.current_phase, self.want_judged = phase, want_judged
        try:
            result = await self._probe(rate, seed)
        finally:
            self.want_judged = None
        placed = bracket_rate(rate, result)
        if result.halt is not None:
            out.stop_reason = result.halt
        else:
            self._record(placed, result.passed)
            self._add_evidence(result, placed)
        step = SearchStep(index, rate, seed, phase, result, out.lo_rps, out.hi_rps, placed)
        out.steps.append(step)
        if self._on_step is not None:
            self._on_step(step)
        if result.halt is not None:
            raise _HaltedError
        return result.passed

    def _record(self, rate: float, passed: bool) -> None:
        """Keep the latest verdict per rate; a new verdict overrides older ones it contradicts
        (a pass overrides failures at or below its rate, a failure passes at or above it), so
        noise never leaves a failing rate below a passing one. Then lo = the highest passing
        rate, hi = the lowest failing rate (necessarily above lo)."""
        v = self._verdicts
        if passed:
            for r in [r for r, ok in v.items() if not ok and r <= rate]:
                del v[r]
        else:
            for r in [r for r, ok in v.items() if ok and r >= rate]:
                del v[r]
        v[rate] = passed
        out = self.outcome
        out.lo_rps = max((r for r, ok in v.items() if ok), default=None)
        out.hi_rps = min((r for r, ok in v.items() if not ok), default=None)

    def _add_evidence(self, result: ProbeOutcome[P], placed_rps: float) -> None:
        """The probe's counts, at the rate its verdict is placed at (``bracket_rate``: the
        counted rate only where it differs beyond Poisson noise)."""
        if result.evidence is None:
            self._fit_mode = False  # one probe without counts: the plain bracket decides
            return
        e = result.evidence
        self._evidence.append(Evidence(placed_rps, e.judged, e.misses, e.in_flight))
        self.outcome.evidence = list(self._evidence)
        if self._fit_mode and self.allowed is not None:
            self.outcome.fit = fit_boundary(
                self._evidence, self.allowed, self.confidence, self.design_effect
            )

    def _fit_next(self) -> tuple[float, Phase] | None:
        """Fit mode: the next rate, or None when the interval is narrow enough (its half width
        within the resolution of its point) or, two-sided, when the rate it asks for has been
        measured twice already (the two-sided search re-measures a rate at most once)."""
        fit = self.outcome.fit
        if fit is None or fit.rate_rps is None:
            return None
        half = fit.relative_half_width
        if half is not None and half <= self.resolution:
            return None
        measured = [e.rate_rps for e in self._evidence]

        def times(r: float) -> int:  # windows measured within half the resolution of r
            return sum(abs(math.log(r / m)) < self.resolution / 2 for m in measured)

        lo, hi = fit.low_rps, fit.high_rps
        middle = math.sqrt(lo * hi) if lo is not None and hi is not None else fit.rate_rps
        for r in (middle, fit.rate_rps):
            if times(r) == 0:
                return min(r, self.max_rate_rps), "fit"
        if self.two_sided and times(middle) >= 2:
            # Measured twice there already: the reported interval decides from here on (its
            # own probes close its ends); a third window at the D = 1 fit's point only pools.
            return None
        return min(middle, self.max_rate_rps), "confirm"

    def _close_next(self) -> tuple[float, str] | None:
        """Two-sided: the next rate and the end it is for, or None when the reported interval
        is closed at both ends and within ``precision`` of its point (module docstring)."""
        assert self.allowed is not None
        rep = two_sided_boundary(
            self._evidence, self.allowed, self.confidence, self.low_end_design_effect,
            self.low_end_min_below,
        )  # fmt: skip
        self.outcome.reported = rep
        point, low, high = rep.rate_rps, rep.low_rps, rep.high_rps
        if point is None:
            return None
        if high is None:  # open above: a probe above the point, to fail there
            return min(point * (1.0 + self.precision), self.max_rate_rps), "high"
        half = rep.relative_half_width
        if low is not None and half is not None and half <= self.precision:
            return None
        target, floored = self._low_target(point, high)
        if low is not None and low >= target * math.exp(-self.precision / 4):
            if floored and high - point <= self.precision * point:
                return None  # the low end where it may be, the high end within precision
            # The low end is where it can be: the high end is too far; probe between.
            return min(math.sqrt(point * high), self.max_rate_rps), "high"
        # Pool with a rate already measured just above the target (never below it: an end
        # there would leave the half width over precision).
        top = min(target * math.exp(self.precision / 4), point * (1.0 - self.low_end_min_below))
        near = [e.rate_rps for e in self._evidence if target <= e.rate_rps <= top]
        return (min(near) if near else target), "low"

    def _low_target(self, point: float, high: float) -> tuple[float, bool]:
        return low_end_target(
            point, high, self.precision, self.low_end_min_below, self.low_end_fixed
        )

    def _low_end_wanted(self, rate: float) -> int | None:
        """The clean judged requests the low end's probe at ``rate`` should gather:
        ``low_end_clean`` of its D less those judged clean from ``rate`` up to the lowest failure
        (None: none wanted beyond the sequential verdict's own)."""
        assert self.allowed is not None
        allowed = self.allowed

        def clean(e: Evidence) -> bool:
            return all(e.counts(k)[1] == 0 for k in e.misses)

        def failed(e: Evidence) -> bool:
            return any(m > allowed * n for n, m in (e.counts(k) for k in e.misses))

        first_fail = min((e.rate_rps for e in self._evidence if failed(e)), default=math.inf)
        have = sum(e.judged for e in self._evidence
                   if rate <= e.rate_rps < first_fail and clean(e))  # fmt: skip
        want = low_end_clean(self.low_end_design_effect) - have
        return want if want > 0 else None

    def _time_left(self) -> bool:
        return self.max_time_s is None or self._clock() - self._t0 < self.max_time_s

    def _budget_left(self) -> bool:
        return len(self.outcome.steps) < self.max_probes and self._time_left()

    def _out_of_budget(self) -> StopReason:
        """Why no probe more may run: the probe count or the time limit."""
        return "max_time" if not self._time_left() else "max_probes"

    async def run(self) -> SearchOutcome[P]:
        try:
            return await self._run()
        except _HaltedError:
            return self.outcome
        finally:
            self._settle_ends()

    def _settle_ends(self) -> None:
        """Two-sided: the reported interval at the stop and, unless it is closed and within
        ``precision``, which end was not established and why (the stop reason)."""
        out = self.outcome
        if not self.two_sided or self.allowed is None or not self._evidence:
            return
        rep = two_sided_boundary(
            self._evidence, self.allowed, self.confidence, self.low_end_design_effect,
            self.low_end_min_below,
        )  # fmt: skip
        out.reported = rep
        out.unclosed = unclosed_line(rep, self.precision, out.stop_reason, self.low_end_min_below)

    async def _run(self) -> SearchOutcome[P]:
        out = self.outcome
        rate = self.start_rate_rps
        passed = await self._run_one(rate, "grow")
        # Descend while the start rate fails.
        while not passed:
            rate /= self._factor(-1)
            if not self._budget_left():
                out.stop_reason = self._out_of_budget()
                return out
            if rate < self.min_rate_rps:
                out.stop_reason = "failed_at_start"
                return out
            passed = await self._run_one(rate, "descend")
        # Grow while passing (only if nothing above has failed yet).
        while out.hi_rps is None:
            if not self._budget_left():
                out.stop_reason = self._out_of_budget()
                return out
            lo = out.lo_rps
            assert lo is not None
            if lo >= self.max_rate_rps:
                out.stop_reason = "max_rate"
                return out
            await self._run_one(min(lo * self._factor(+1), self.max_rate_rps), "grow")
            if out.lo_rps is None:  # a failure undercut the last pass: start over lower
                return await self._restart_below()
        return await self._bisect()

    async def _restart_below(self) -> SearchOutcome[P]:
        out = self.outcome
        hi = out.hi_rps
        assert hi is not None
        rate = hi
        while out.lo_rps is None:
            rate /= self._factor(-1)
            if not self._budget_left():
                out.stop_reason = self._out_of_budget()
                return out
            if rate < self.min_rate_rps:
                out.stop_reason = "failed_at_start"
                return out
            await self._run_one(rate, "descend")
        return await self._bisect()

    async def _bisect(self) -> SearchOutcome[P]:
        out = self.outcome
        while True:
            lo, hi = out.lo_rps, out.hi_rps
            if lo is None:
                return await self._restart_below()
            if hi is None:
                # A pass above the old failure removed it: grow again from there.
                if not self._budget_left():
                    out.stop_reason = self._out_of_budget()
                    return out
                if lo >= self.max_rate_rps:
                    out.stop_reason = "max_rate"
                    return out
                await self._run_one(min(lo * self._factor(+1), self.max_rate_rps), "grow")
                continue
            if self._fit_mode and out.fit is not None and out.fit.relative_half_width is not None:
                nxt = self._fit_next()
                close = self._close_next() if nxt is None and self.two_sided else None
                if nxt is None and close is None:
                    out.stop_reason, out.unclosed = "converged", None
                    return out
                if not self._budget_left():
                    out.stop_reason = self._out_of_budget()
                    return out
                if nxt is None and close is not None:
                    await self._run_close(close)
                else:
                    assert nxt is not None
                    await self._run_one(*nxt)
                continue
            if not self._budget_left():
                out.stop_reason = self._out_of_budget()
                return out
            if (hi - lo) / lo >= self.precision:
                await self._run_one(math.sqrt(lo * hi), "bisect")
            elif self.confirm and hi not in self._confirmed:
                self._confirmed.add(hi)
                await self._run_one(hi, "confirm")
            elif (close := self._close_plain()) is not None:
                await self._run_close(close)
            else:
                out.stop_reason = "converged"
                return out

    def _close_plain(self) -> tuple[float, str] | None:
        """Two-sided, with the D = 1 fit still open: the plain bracket's stop is not the
        search's; the reported interval decides it (``_close_next``), as it does once the fit
        has closed. None when the search is not two-sided or has no counts to fit."""
        if not (self.two_sided and self._fit_mode and self._evidence):
            return None
        return self._close_next()

    async def _run_close(self, close: tuple[float, str]) -> None:
        """One probe for an end of the reported interval; the low end's with its long window."""
        rate, end = close
        want = self._low_end_wanted(rate) if end == "low" else None
        await self._run_one(rate, "fit", want_judged=want)


CHECK_ROLE = (
    "not joined: a drift check (re-test or confirmation) after the search; checks never join "
    "the fit (their long windows near the boundary cost the interval its coverage)"
)


def drift_check_plan(
    retest_rps: float, fitted_rps: float, precision: float
) -> list[tuple[float, str]]:
    """The drift checks after a converged search, as (rate, kind): a re-test at the
    boundary probe's rate and a confirmation at the fitted point, the confirmation left out
    when the re-test's rate lies within the search's precision of the fitted point
    (|re-test − point| < ``precision`` · point: inside the reported interval's stated half
    width around it). Two such rates are one boundary position at the precision the search
    was asked for, and both checks are read by their median TPOT against the same
    neighbours on the search's curve, so the confirmation would measure the latency level
    the re-test already did; the re-test alone caught every 10× slow-down in the drift
    record (docs/validation.md, "The second drift check")."""
    plan = [(retest_rps, "re-test")]
    if abs(retest_rps - fitted_rps) >= precision * fitted_rps:
        plan.append((fitted_rps, "confirmation"))
    return plan


SINGLE_STREAM_ROLE = "not joined: the single-stream point (one request at a time, no rate)"


def step_role(out: SearchOutcome[P], index: int) -> str:
    """Whether search probe ``index`` joined the boundary fit and, where it did not or where
    it passed above the headline's probe, why (the result's ``fit_role``)."""
    step = next((s for s in out.steps if s.index == index), None)
    if step is None:
        return "not joined: not a search probe"
    if step.outcome.halt == "error":
        return "not joined: an error probe (the endpoint failed); it ended the search"
    if step.outcome.halt == "saturated":
        return "not joined: the load generator could not offer its rate; it ended the search"
    if step.outcome.evidence is None:
        return "not joined: no counts (the bracket alone decided)"
    b = out.boundary
    if b is not None and b.index == index:
        return (
            "joined the fit; the headline's probe (*): the highest pass no lower failure outranks"
        )
    if step.passed and out.lo_rps is not None and step.placed_rps > out.lo_rps:
        below = [s for s in out.steps if not s.passed and s.outcome.halt is None
                 and s.index != index and s.placed_rps <= step.placed_rps]  # fmt: skip
        by = f" (probe {below[-1].index} at {below[-1].placed_rps:.3g} req/s)" if below else ""
        return f"joined the fit; a pass above the headline's rate, outranked by a failure{by}"
    return "joined the fit"
