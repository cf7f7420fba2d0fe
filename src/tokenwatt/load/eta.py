"""How long a bench has left: the probe in flight and the probes still to come.

Pure arithmetic over what the search already knows, for the live progress line
("probe 3 of ≤ 10 · 12.5 req/s · 40 s left in this probe · about 3 min to go"):

* **This probe.** Its window closes when it is ``min_duration_s`` long *and* holds
  ``min_requests`` counted requests (or ``max_requests``, or at ``max_duration_s``): at
  ``rate`` requests per second the window still needs
  ``max(min_duration_s − elapsed, (min_requests − counted) / rate)``, capped by what is left of
  ``max_duration_s``; a warm-up adds what is left of it; the drain adds the tail of a request's
  lifetime (the latest probe's E2E p99, within ``drain_timeout_s``), less the time already
  drained. A sequential verdict may close the window sooner: the figure is an upper estimate.
* **The probes to come.** Once a failure brackets the boundary, ``lo`` and ``hi`` shrink by
  about half (in log rate) per probe until the width reaches the search's precision
  (``ln(1 + 2·precision)`` for the interval's half width, ``ln(1 + precision)`` for the
  bracket's width): ``⌈log2(ln(hi/lo) / width)⌉`` probes, the one in flight among them. While
  the search still grows or descends, the probe in flight is assumed to be the one that
  brackets it, leaving ``⌈log2(ln(growth) / width)⌉`` (an upper estimate: a walk from an
  estimated start steps by less than ``growth`` at first, ``load.search.step_factor``). Then
  the drift checks (a re-test and a confirmation) in sequential mode. Never more than
  ``max_probes`` allows. In sequential mode the bisection's width is the search's own
  resolution, ``ln(1 + 2·min(precision, 5 %))``, and the two-sided search adds the probe that
  establishes the interval's low end (``close_probes``): its cut must lose more than
  χ²₁(95 %)/2 · D (D = ``TWO_SIDED_DESIGN_EFFECT`` = 4) of log-likelihood, i.e.
  ``LOW_END_CLEAN`` = 765 clean requests at p99 at or above the low end's probe, less the
  clean requests already judged near the boundary (passes within 2·precision + 5 % of the
  lowest failure). That probe is one long window (``load.search``, ``want_judged``): one
  probe, whose window holds what the end still
  needs beyond the ``PASS_JUDGED`` = 280 of a decided pass (194 to decide, the rest
  drained), ``close_extra_s`` = (765 − clean − 280) / rate seconds more than a search probe;
  both fall to nothing as the clean requests come, and the probe in flight, when it is that
  window, is counted by its own time left. The drift checks are an upper estimate: the
  confirmation is left out when the re-test's rate lies within the precision of the fitted
  point (``load.search.drift_check_plan``).
* **Each probe to come** lasts as long as the finished search probes did on average (their
  wall time, sequential early stops included); before any finished, a full-length probe at
  the current rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenwatt.load.probe import ProbeProgress
from tokenwatt.load.search import LOW_END_CLEAN, RESOLUTION
from tokenwatt.spec import ProbeSettings, SearchSettings

__all__ = [
    "DRIFT_CHECKS",
    "LOW_END_CLEAN",
    "PASS_JUDGED",
    "Eta",
    "bound_probes",
    "close_extra_s",
    "close_probes",
    "duration_text",
    "full_probe_s",
    "probe_left_s",
    "probes_to_come",
    "progress_text",
    "search_plan_text",
]

DRIFT_CHECKS = 2  # sequential mode: the re-test and the confirmation after the search
PASS_JUDGED = 280  # requests a passing probe judges: 194 decide it, the drain adds the rest


def _window_s(
    min_duration_s: float,
    min_requests: int,
    max_requests: int | None,
    max_duration_s: float,
    rate_rps: float | None,
    *,
    elapsed_s: float = 0.0,
    counted: int = 0,
) -> float:
    """The rest of a window ``elapsed_s`` long holding ``counted`` requests."""
    by_time = min_duration_s - elapsed_s
    if max_requests is not None:
        by_time = 0.0  # the window is N requests, not a duration
    wanted = max_requests if max_requests is not None else min_requests
    by_count = 0.0
    if rate_rps is not None and rate_rps > 0:
        by_count = (wanted - counted) / rate_rps
    left = max(by_time, by_count, 0.0)
    return min(left, max(max_duration_s - elapsed_s, 0.0))


def full_probe_s(settings: ProbeSettings, rate_rps: float | None, drain_s: float) -> float:
    """A whole probe at ``rate_rps``: warm-up, a full window, the drain."""
    window = _window_s(
        settings.min_duration_s,
        settings.min_requests,
        None,
        settings.max_duration_s,
        rate_rps,
    )
    return settings.warmup_s + window + min(drain_s, settings.drain_timeout_s)


def probe_left_s(
    p: ProbeProgress,
    *,
    warmup_s: float,
    rate_rps: float | None,
    drain_s: float,
    drain_timeout_s: float,
) -> float | None:
    """What is left of the probe in flight (see the module doc); ``rate_rps`` None (closed
    loop): the rate counted so far in the window; None while there is none to go by."""
    drain = min(drain_s, drain_timeout_s)
    if rate_rps is None:
        if p.phase != "drain" and not (p.window_elapsed_s > 0 and p.counted > 0):
            return None
        rate_rps = p.counted / p.window_elapsed_s if p.window_elapsed_s > 0 else None
    if p.phase == "drain":
        drained = p.elapsed_s - warmup_s - p.window_elapsed_s
        return max(drain - drained, 0.0)
    window_args = (p.min_duration_s, p.min_requests, p.max_requests, p.max_duration_s, rate_rps)
    if p.phase == "warmup":
        return max(warmup_s - p.elapsed_s, 0.0) + _window_s(*window_args) + drain
    left = _window_s(*window_args, elapsed_s=p.window_elapsed_s, counted=p.counted)
    return left + drain


def bound_probes(search: SearchSettings) -> int:
    """The most probes a bench runs after its single-stream point: the search's
    ``max_probes`` and, in sequential mode, the drift checks."""
    return search.max_probes + (DRIFT_CHECKS if search.sequential else 0)


def close_probes(search: SearchSettings, clean_near: int) -> int:
    """The two-sided search's probe that establishes the low end (module doc): one long
    window while ``clean_near`` clean requests near the boundary fall short of
    ``LOW_END_CLEAN``; 0 once they do not, or without the two-sided search."""
    return int(search.sequential and clean_near < LOW_END_CLEAN)


def close_extra_s(search: SearchSettings, clean_near: int, rate_rps: float | None) -> float:
    """How much longer than a decided pass the low end's long window lasts at ``rate_rps``:
    the clean requests it still needs beyond ``PASS_JUDGED``, sent at that rate (module doc);
    0 when no such probe is to come or no rate is known."""
    if not close_probes(search, clean_near) or not rate_rps or rate_rps <= 0:
        return 0.0
    return max(LOW_END_CLEAN - clean_near - PASS_JUDGED, 0) / rate_rps


def probes_to_come(
    search: SearchSettings,
    *,
    index: int,
    checks_started: int,
    lo_rps: float | None,
    hi_rps: float | None,
    clean_near: int = 0,
    low_end_in_flight: bool = False,
) -> int:
    """Probes after the one in flight (number ``index``, 1-based; ``checks_started`` of
    them drift checks; ``low_end_in_flight``: it is the low end's long window), as the module
    doc estimates them."""
    checks = DRIFT_CHECKS if search.sequential else 0
    if checks_started > 0:
        return max(checks - checks_started, 0)
    close = 0 if low_end_in_flight else close_probes(search, clean_near)
    if search.sequential:
        width = math.log1p(2 * min(search.precision, RESOLUTION))
    else:
        width = math.log1p(search.precision)
    if lo_rps is not None and hi_rps is not None and hi_rps > lo_rps > 0:
        span = math.log(hi_rps / lo_rps)
        left = max(math.ceil(math.log2(span / width)) - 1, 0)
    else:
        left = max(math.ceil(math.log2(math.log(search.growth) / width)), 0)
    left = min(left + close, max(search.max_probes - index, 0))
    return left + checks


@dataclass(frozen=True, slots=True)
class Eta:
    """The progress line's figures."""

    index: int
    bound: int
    rate_rps: float | None
    left_s: float  # in the probe in flight
    to_go_s: float | None  # the whole bench; None: not estimable yet

    @staticmethod
    def of(
        *,
        index: int,
        bound: int,
        rate_rps: float | None,
        left_s: float,
        to_come: int,
        per_probe_s: float,
        extra_s: float = 0.0,
    ) -> Eta:
        """``extra_s``: time beyond ``to_come`` probes of ``per_probe_s`` (``close_extra_s``)."""
        return Eta(index, bound, rate_rps, left_s, left_s + to_come * per_probe_s + extra_s)


def duration_text(s: float) -> str:
    """Seconds under 100 s, whole minutes under 100 min, hours and minutes beyond."""
    if s < 99.5:
        return f"{max(s, 0.0):.0f} s"
    minutes = round(s / 60)
    if minutes < 100:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def progress_text(eta: Eta) -> str:
    """``probe 3 of ≤ 10 · 12.5 req/s · 40 s left in this probe · about 3 min to go``."""
    parts = [f"probe {eta.index} of ≤ {eta.bound}"]
    if eta.rate_rps is not None:
        parts.append(f"{eta.rate_rps:.3g} req/s")
    parts.append(f"{duration_text(eta.left_s)} left in this probe")
    if eta.to_go_s is not None:
        parts.append(f"about {duration_text(eta.to_go_s)} to go")
    return " · ".join(parts)


def search_plan_text(search: SearchSettings, *, rate_rps: float | None, drain_s: float) -> str:
    """Before the first search probe: what the chosen precision will take, from the probe
    count ``probes_to_come`` estimates with nothing learnt yet, each probe a warm-up, the
    window a decided pass needs at the start rate (``PASS_JUDGED`` requests; without
    ``search.sequential`` a whole window, ``full_probe_s``) and the drain, plus the low
    end's long window beyond a pass (``close_extra_s``); the live line refines it from the
    probes' own wall times as they finish."""
    n = 1 + probes_to_come(search, index=1, checks_started=0, lo_rps=None, hi_rps=None)
    per_probe = full_probe_s(search.probe, rate_rps, drain_s)
    if search.sequential and rate_rps:  # a decided pass closes its window at ~PASS_JUDGED
        per_probe = search.probe.warmup_s + PASS_JUDGED / rate_rps + drain_s
    total = n * per_probe + close_extra_s(search, 0, rate_rps)
    limit = search.max_time_s
    capped = f", capped by --max-time {duration_text(limit)}" if limit is not None else ""
    return (
        f"±{search.precision:.0%} asked: about {n} probes, about {duration_text(total)}"
        f"{capped} (an estimate; it updates as the search learns)"
    )
