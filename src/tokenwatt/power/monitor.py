"""Runs every opened source on its own thread and answers energy questions about any window.

Vendor calls (NVML, AMD SMI, sysfs, HTTP scrapes) block, so each source is polled from a
background thread and never from the event loop that times requests. Readings are kept
de-duplicated as they arrive: a value equal to the previous one is not a new measurement
(the vendor had not refreshed it), so only the first reading of each value is stored, plus
the latest repeat as a "tail" that says the value still held then. Energy over a window is
then computed from those points by ``integrate`` (counter deltas or trapezoids, edges
interpolated), per channel, summed per scope.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from tokenwatt.clock import now_ns
from tokenwatt.power.audit import ChannelData, audit_scope
from tokenwatt.power.base import PowerSource
from tokenwatt.power.integrate import integrate, observed_period_ns
from tokenwatt.power.results import (
    PRIMARY_ORDER,
    WINDOW_SHORT_PERIODS,
    EnergyReport,
    PowerSeries,
    ScopeEnergy,
)
from tokenwatt.result import EnergyAudit

__all__ = ["GAP_POLLS", "NOT_MEASURED", "PowerMonitor"]

logger = logging.getLogger(__name__)

# Reads further apart than this many poll periods leave a gap worth flagging.
GAP_POLLS = 4
# A source whose figure changes this many times slower than it should gets a note.
STALE_FACTOR = 3
NOT_MEASURED = "no power source configured: tokens per joule not measured"


class _Series:
    """One channel's de-duplicated readings (first reading of each value) plus the tail."""

    __slots__ = ("gaps", "last_read_ns", "t", "tail_ns", "v")

    def __init__(self) -> None:
        self.t = array("q")
        self.v = array("d")
        self.tail_ns: int | None = None  # latest repeat of v[-1], if newer than t[-1]
        self.last_read_ns: int | None = None
        self.gaps: list[tuple[int, int]] = []

    def add(self, t_ns: int, value: float, gap_ns: int) -> None:
        if not math.isfinite(value) or value < 0:
            return
        if self.last_read_ns is not None:
            if t_ns <= self.last_read_ns:
                return
            if t_ns - self.last_read_ns > gap_ns:
                self.gaps.append((self.last_read_ns, t_ns))
        self.last_read_ns = t_ns
        if self.v and value == self.v[-1]:
            self.tail_ns = t_ns
        else:
            self.t.append(t_ns)
            self.v.append(value)
            self.tail_ns = None

    def snapshot(self) -> _Snap:
        t, v = self.t.tolist(), self.v.tolist()
        change_t = list(t)
        if self.tail_ns is not None:
            t.append(self.tail_ns)
            v.append(v[-1])
        return _Snap(t, v, change_t, list(self.gaps))


@dataclass(slots=True)
class _Snap:
    t: list[int]
    v: list[float]
    change_t: list[int]  # stamps of value changes only (no tail): the refresh cadence
    gaps: list[tuple[int, int]]


@dataclass(slots=True)
class _State:
    source: PowerSource
    series: list[_Series]
    errors: list[int] = field(default_factory=list)
    last_error: str | None = None
    last_read_ns: int = 0
    thread: threading.Thread | None = None


def _overlaps(gaps: Sequence[tuple[int, int]], a: int, b: int, *, counter: bool) -> bool:
    for g0, g1 in gaps:
        if counter:
            # A counter's total across a gap is exact; only an edge inside it is guessed.
            if g0 < a < g1 or g0 < b < g1:
                return True
        elif g0 < b and g1 > a:
            return True
    return False


class PowerMonitor:
    """Samples every source on a background thread; answers ``energy`` and ``samples``.

    Use as a context manager, or call ``start()`` and ``close()``. A monitor with no sources
    is valid: it reports "not measured".
    """

    def __init__(self, sources: Sequence[PowerSource], *, warnings: Sequence[str] = ()) -> None:
        self._states = [_State(s, [_Series() for _ in s.channels]) for s in sources]
        self._warnings = list(warnings)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._running = False
        self._closed = False

    # lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._running or self._closed:
            return
        self._running = True
        for st in self._states:
            st.thread = threading.Thread(
                target=self._loop, args=(st,), name=f"tokenwatt-power-{st.source.name}", daemon=True
            )
            st.thread.start()

    def close(self) -> None:
        """Stop sampling and release the sources. What was sampled stays queryable."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for st in self._states:
            if st.thread is not None:
                st.thread.join(timeout=30)
        for st in self._states:
            try:
                st.source.close()
            except Exception as exc:  # closing must never lose the measurements
                logger.warning("power source %s did not close cleanly: %s", st.source.name, exc)
        self._running = False

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # sampling ----------------------------------------------------------------------------

    def _read(self, st: _State) -> None:
        """One read of one source, stored; a failing read is counted, never raised."""
        src = st.source
        gap_ns = GAP_POLLS * max(1, int(src.poll_interval_s * 1e9))
        try:
            samples = src.read()
        except Exception as exc:  # a failing read is data (counted), never a crash
            t = src.clock()
            with self._cond:
                st.errors.append(t)
                st.last_error = str(exc)
                n = len(st.errors)
            if n == 1 or n % 100 == 0:
                logger.warning("power source %s: read failed (%d so far): %s", src.name, n, exc)
            return
        with self._cond:
            for s in samples:
                st.series[s.channel].add(s.t_ns, s.value, gap_ns)
                st.last_read_ns = max(st.last_read_ns, s.t_ns)
            self._cond.notify_all()

    def _loop(self, st: _State) -> None:
        period_ns = max(1, int(st.source.poll_interval_s * 1e9))
        next_ns = now_ns()
        while not self._stop.is_set():
            self._read(st)
            next_ns += period_ns
            now = now_ns()
            next_ns = max(next_ns, now)  # fell behind (slow read): skip, don't burst
            self._stop.wait((next_ns - now) / 1e9)

    def _wait_past(self, end_ns: int, max_wait_s: float | None) -> None:
        """Block until every running source has read past ``end_ns`` + one update period, so
        the window's right edge lies between readings rather than after the last one."""
        if not self._running or self._closed or not self._states:
            return
        periods = [max(st.source.update_period_s, st.source.poll_interval_s) for st in self._states]
        if max_wait_s is None:
            max_wait_s = min(5.0, 2 * max(periods) + 0.2)
        deadline = now_ns() + int(max_wait_s * 1e9)
        targets = [end_ns + int(p * 1e9) for p in periods]
        with self._cond:
            while not self._stop.is_set():
                if all(
                    st.last_read_ns >= tgt for st, tgt in zip(self._states, targets, strict=True)
                ):
                    return
                left = deadline - now_ns()
                if left <= 0:
                    return
                self._cond.wait(left / 1e9)

    def poll_once(self) -> None:
        """Read every source once on the calling thread (tests; a monitor not started)."""
        for st in self._states:
            self._read(st)

    def wait_ready(self, timeout_s: float = 5.0) -> bool:
        """Block until every source has at least one reading (start a probe only then, so the
        window's left edge is covered). False if the timeout passed first."""
        deadline = now_ns() + int(timeout_s * 1e9)
        with self._cond:
            while not all(st.last_read_ns for st in self._states):
                left = deadline - now_ns()
                if left <= 0 or self._stop.is_set():
                    return False
                self._cond.wait(left / 1e9)
        return True

    # queries -----------------------------------------------------------------------------

    def readings(self, source: int = 0, channel: int = 0) -> list[tuple[int, float]]:
        """The stored (t_ns, value) points of one channel: the first reading of each value,
        plus the latest repeat. Values in J (counters) or W (samplers)."""
        with self._cond:
            snap = self._states[source].series[channel].snapshot()
        return list(zip(snap.t, snap.v, strict=True))

    @property
    def sources(self) -> tuple[PowerSource, ...]:
        return tuple(st.source for st in self._states)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self._warnings)

    @property
    def measured(self) -> bool:
        """True when at least one source measures (rather than models) power."""
        return any(st.source.measured for st in self._states)

    def energy(
        self, start_ns: int, end_ns: int, *, wait: bool = True, max_wait_s: float | None = None
    ) -> EnergyReport:
        """Energy over exactly [start_ns, end_ns] (``time.perf_counter_ns`` stamps).

        With ``wait`` (default) this blocks briefly (at most ``max_wait_s``; default about two
        update periods, never over 5 s) until each source has read past ``end_ns``. Call it
        from a thread or use ``energy_async`` inside an event loop.
        """
        if end_ns < start_ns:
            raise ValueError(f"window ends before it starts ({start_ns} > {end_ns})")
        if wait:
            self._wait_past(end_ns, max_wait_s)
        entries = [e.energy for e in self._entries(start_ns, end_ns)]
        scopes = _choose(entries)
        warnings = list(self._warnings)
        if not self._states:
            warnings.append(NOT_MEASURED)
        return EnergyReport(
            start_ns=start_ns,
            end_ns=end_ns,
            scopes=scopes,
            sources=tuple(entries),
            primary_scope=_primary(scopes),
            warnings=tuple(warnings),
        )

    async def energy_async(
        self, start_ns: int, end_ns: int, *, max_wait_s: float | None = None
    ) -> EnergyReport:
        """``energy`` off the event loop (the wait for the last readings must not block it)."""
        return await asyncio.to_thread(self.energy, start_ns, end_ns, max_wait_s=max_wait_s)

    def samples(self, start_ns: int, end_ns: int, *, max_points: int = 300) -> PowerSeries:
        """Mean power per bin over [start_ns, end_ns] for each scope's chosen source, summed
        over devices: ``max_points`` equal bins, each the energy in the bin ÷ its length."""
        bins = max(1, max_points)
        span = max(0, end_ns - start_ns)
        edges = [start_ns + span * k // bins for k in range(bins + 1)]
        t_s = tuple((edges[k] + edges[k + 1]) / 2e9 - start_ns / 1e9 for k in range(bins))
        found = self._entries(start_ns, end_ns)
        chosen = _choose([e.energy for e in found])
        power: dict[str, tuple[float | None, ...]] = {}
        names: dict[str, str] = {}
        for e in found:
            scope = e.energy.scope
            if chosen.get(scope) is not e.energy:
                continue
            src = e.source
            chans = [i for i, c in enumerate(src.channels) if c.scope == scope]
            counter = src.kind == "energy_counter"
            row: list[float | None] = []
            for k in range(bins):
                lo, hi = edges[k], edges[k + 1]
                total: float | None = 0.0
                for i in chans:
                    snap = e.snaps[i]
                    part = integrate(
                        snap.t, snap.v, lo, hi, counter=counter, wrap=src.channels[i].wrap_j
                    )
                    if part.covered_ns <= 0 or total is None:
                        total = None
                        continue
                    total += part.energy_j / (part.covered_ns / 1e9)
                row.append(total)
            power[scope] = tuple(row)
            names[scope] = src.name
        return PowerSeries(
            start_ns=start_ns,
            end_ns=end_ns,
            t_s=t_s,
            power_w=power,
            sources=names,
            primary_scope=_primary(chosen),
        )

    def audit(
        self,
        start_ns: int,
        end_ns: int,
        *,
        busy: Sequence[tuple[int, int]] = (),
        prefill: Sequence[tuple[int, int]] = (),
        tdp_w: float | None = None,
    ) -> list[EnergyAudit]:
        """Every (source, scope)'s method record, validity verdict and energy split over the
        window (``power.audit``), from the same readings and flags as ``energy``. Call after
        ``energy`` for the same window (it does not wait for late readings)."""
        out = []
        for e in self._entries(start_ns, end_ns):
            src, en = e.source, e.energy
            chans = [
                ChannelData(c.device, e.snaps[i].t, e.snaps[i].v, e.snaps[i].change_t, c.wrap_j)
                for i, c in enumerate(src.channels)
                if c.scope == en.scope
            ]
            out.append(
                audit_scope(
                    source=src.name,
                    scope=en.scope,
                    kind=src.kind,
                    measured=src.measured,
                    chans=chans,
                    window=(start_ns, end_ns),
                    expected_period_s=src.update_period_s,
                    flags=en.flags,
                    energy_j=en.energy_j,
                    busy=busy,
                    prefill=prefill,
                    tdp_w=tdp_w,
                )
            )
        return out

    def describe(self) -> dict[str, Any]:
        """Provenance for the result file: each source, its channels, notes and read errors."""
        out = []
        with self._cond:
            for st in self._states:
                d = st.source.describe()
                d["read_errors"] = len(st.errors)
                d["last_error"] = st.last_error
                out.append(d)
        return {"sources": out, "warnings": list(self._warnings), "measured": self.measured}

    # internals ---------------------------------------------------------------------------

    def _entries(self, a: int, b: int) -> list[_Entry]:
        with self._cond:
            snaps = [
                ([s.snapshot() for s in st.series], sum(1 for t in st.errors if a <= t <= b))
                for st in self._states
            ]
        out: list[_Entry] = []
        for st, (chan_snaps, errors) in zip(self._states, snaps, strict=True):
            for scope in dict.fromkeys(c.scope for c in st.source.channels):
                energy = _scope_energy(st.source, chan_snaps, scope, a, b, read_errors=errors)
                out.append(_Entry(st.source, chan_snaps, energy))
        return out


@dataclass(slots=True)
class _Entry:
    source: PowerSource
    snaps: list[_Snap]
    energy: ScopeEnergy


def _scope_energy(
    src: PowerSource, snaps: list[_Snap], scope: str, a: int, b: int, *, read_errors: int
) -> ScopeEnergy:
    window_ns = b - a
    window_s = window_ns / 1e9
    counter = src.kind == "energy_counter"
    flags: set[str] = set()
    notes = list(src.notes)
    per_device: dict[str, float | None] = {}
    period_s = src.update_period_s
    coverage = 1.0
    points = 0
    total = 0.0
    missing = 0
    chans = [(i, c) for i, c in enumerate(src.channels) if c.scope == scope]
    for i, ch in chans:
        snap = snaps[i]
        obs = observed_period_ns(snap.change_t)
        if obs is not None:
            period_s = max(period_s, obs / 1e9)
        if window_ns <= 0:
            per_device[ch.device] = None
            missing += 1
            coverage = 0.0
            continue
        part = integrate(snap.t, snap.v, a, b, counter=counter, wrap=ch.wrap_j)
        points += part.points
        if part.wraps:
            flags.add("counter_wrap")
        if part.resets:
            flags.add("counter_reset")
        if _overlaps(snap.gaps, a, b, counter=counter):
            flags.add("gap")
        cov = part.covered_ns / window_ns
        coverage = min(coverage, cov)
        if part.covered_ns <= 0:
            per_device[ch.device] = None
            missing += 1
            continue
        if counter and part.energy_j == 0 and not part.resets:
            flags.add("zero_energy")
        if cov < 1.0:
            # fill what readings did not cover (edges, reset segments) at the mean power
            e = part.energy_j / (part.covered_ns / 1e9) * window_s
        else:
            e = part.energy_j
        per_device[ch.device] = e
        total += e
    energy = _total_and_flags(
        src,
        flags,
        notes,
        total,
        missing=missing,
        channels=len(chans),
        coverage=coverage,
        read_errors=read_errors,
        window_s=window_s,
        period_s=period_s,
    )
    mean_w = energy / window_s if energy is not None and window_s > 0 else None
    return ScopeEnergy(
        scope=scope,
        source=src.name,
        source_detail=src.detail,
        kind=src.kind,
        measured=src.measured,
        energy_j=energy,
        mean_power_w=mean_w,
        window_s=window_s,
        devices=len(chans),
        samples_used=points,
        coverage=max(0.0, min(1.0, coverage)),
        update_period_s=period_s,
        flags=tuple(sorted(flags)),
        per_device_j=per_device,
        notes=tuple(notes),
    )


def _total_and_flags(
    src: PowerSource,
    flags: set[str],
    notes: list[str],
    total: float,
    *,
    missing: int,
    channels: int,
    coverage: float,
    read_errors: int,
    window_s: float,
    period_s: float,
) -> float | None:
    """The scope's energy (None unless every device has a figure) and the window-level flags
    and notes, added in place: why a figure is missing, partial, short or stale."""
    if coverage < 0.999:
        flags.add("partial")
    energy: float | None = total
    if missing == channels:
        energy = None
        flags.add("no_samples")
        flags.discard("partial")
    elif missing:
        energy = None
        flags.add("missing_device")
    if read_errors:
        flags.add("read_errors")
    if window_s < WINDOW_SHORT_PERIODS * period_s:
        flags.add("window_short")
    if not src.measured:
        flags.add("modelled")
    if period_s > STALE_FACTOR * src.update_period_s:
        hint = getattr(src, "slow_hint", "")
        notes.append(
            f"the figure changed only every ~{period_s:.3g} s (expected ~{src.update_period_s:.3g}"
            f" s){'; ' + hint if hint else ''}"
        )
    return energy


def _choose(entries: Sequence[ScopeEnergy]) -> dict[str, ScopeEnergy]:
    """Per scope: the first measured source with a figure, else the first measured, else
    the first (modelled) one, in spec order."""
    out: dict[str, ScopeEnergy] = {}
    for scope in dict.fromkeys(e.scope for e in entries):
        cands = [e for e in entries if e.scope == scope]
        out[scope] = (
            next((e for e in cands if e.measured and e.energy_j is not None), None)
            or next((e for e in cands if e.measured), None)
            or cands[0]
        )
    return out


def _primary(scopes: dict[str, Any]) -> str | None:
    return next((s for s in PRIMARY_ORDER if s in scopes), None)
