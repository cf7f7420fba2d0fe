"""How each power source measured a window, whether to trust it, and where the joules went.

Two public figures for the same model, GPU count and load differed by 1.47× through method
alone: an energy counter or sampled power, which window, GPUs only or the whole node. So every
figure carries its method record and a validity verdict (InferenceX marks each power series
valid or not; MLPerf's power group asks for the method, the sampling rate and prefill vs
generation energy):

    method             energy_counter (integrates on the device; edges interpolated) or
                       sampled_power (trapezoids over readings: misses what falls between)
    achieved period    median gap between value *changes* inside the window (a stale
                       exporter repeats values: that is not a reading)
    checks             enough_samples (≥ MIN_SAMPLES changes, window ≥ 10 periods),
                       monotone_counter (no reset inside the window), no_gaps (reads covered
                       the whole window on every device), idle_floor (no device below
                       IDLE_FLOOR_FRACTION × TDP: a GPU never idles at ~0 W, that reading is a
                       stalled or wrong sensor), ceiling (no device above CEILING_FACTOR ×
                       TDP: a wrong unit or scope); floor and ceiling only for GPU scopes with
                       a catalog TDP, else "not checked"
    busy / idle        the window split by the client's activity: busy while any request was
                       in flight, idle otherwise
    prefill / decode   busy time split again: some request awaiting its first token
                       (prefill-heavy) or every request decoding (decode-only)

A split is only given where the source can resolve it: its period must not exceed the median
length of the shorter class's intervals, else the split is None with the reason. The busy and
idle (or prefill and decode) energies are scaled to add up to the window's energy exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

from tokenwatt.power.integrate import integrate
from tokenwatt.result import EnergyAudit, EnergyCheck

__all__ = [
    "CEILING_FACTOR",
    "COUNTER_SPAN_NS",
    "GPU_SCOPES",
    "IDLE_FLOOR_FRACTION",
    "MIN_SAMPLES",
    "ChannelData",
    "audit_scope",
    "clip_union",
    "subtract",
]

Interval = tuple[int, int]
Method = Literal["energy_counter", "sampled_power", "modelled"]
# Fewer distinct readings than this inside a window cannot show a load's shape.
MIN_SAMPLES = 10
# A datacenter GPU idles at 10-25 % of its TDP (H100 SXM ~70 W of 700 W); a device reading
# under 3 % is a stalled or zeroed sensor, not an idle GPU.
IDLE_FLOOR_FRACTION = 0.03
# Board power limits hold the average near TDP; NVML's 1 s average and DCGM's counters stay
# within ~10 %, instantaneous samples spike higher: 1.3 × TDP is a wrong unit or scope.
CEILING_FACTOR = 1.3
GPU_SCOPES = frozenset({"gpu", "memory"})
# A counter's power for the floor and ceiling checks is averaged over spans this long.
COUNTER_SPAN_NS = 250_000_000


@dataclass(frozen=True, slots=True)
class ChannelData:
    """One device's de-duplicated readings (J or W) and its counter modulus."""

    device: str
    t_ns: Sequence[int]
    values: Sequence[float]
    change_t_ns: Sequence[int]  # stamps of value changes only (no repeated tail)
    wrap_j: float | None = None


def clip_union(intervals: Sequence[Interval], a: int, b: int) -> list[Interval]:
    """The union of ``intervals`` inside [a, b], sorted and disjoint."""
    out: list[Interval] = []
    for lo, hi in sorted((max(x, a), min(y, b)) for x, y in intervals):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def subtract(base: Sequence[Interval], cut: Sequence[Interval]) -> list[Interval]:
    """``base`` minus ``cut``; both sorted and disjoint."""
    out: list[Interval] = []
    j = 0
    for lo, hi in base:
        cur = lo
        while j < len(cut) and cut[j][1] <= cur:
            j += 1
        k = j
        while k < len(cut) and cut[k][0] < hi:
            if cut[k][0] > cur:
                out.append((cur, cut[k][0]))
            cur = max(cur, cut[k][1])
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return out


def _span_s(iv: Sequence[Interval]) -> float:
    return sum(h - lo for lo, h in iv) / 1e9


def _energy_over(chans: Sequence[ChannelData], iv: Sequence[Interval], counter: bool) -> float:
    total = 0.0
    for ch in chans:
        for lo, hi in iv:
            total += integrate(ch.t_ns, ch.values, lo, hi, counter=counter, wrap=ch.wrap_j).energy_j
    return total


def _powers(ch: ChannelData, a: int, b: int, counter: bool) -> list[float]:
    """The device's power readings inside [a, b] (W): the samples, or a counter's ΔE/Δt over
    spans of at least COUNTER_SPAN_NS (reset segments left out). A counter read every 10 ms
    through a scrape with ms of jitter gives per-read powers off by ×3 either way: the
    energy is exact, the instantaneous power is not, so the floor and ceiling judge spans."""
    pts = [(t, v) for t, v in zip(ch.t_ns, ch.values, strict=True) if a <= t <= b]
    if not counter:
        return [v for _, v in pts]
    out = []
    span = min(COUNTER_SPAN_NS, (b - a) // 2)
    start = 0
    for k in range(1, len(pts)):
        (t0, v0), (t1, v1) = pts[start], pts[k]
        if v1 < pts[k - 1][1]:  # a reset: start afresh after it
            start = k
            continue
        if t1 - t0 >= span and t1 > t0:
            out.append((v1 - v0) / ((t1 - t0) / 1e9))
            start = k
    return out


def _period_s(chans: Sequence[ChannelData], a: int, b: int) -> float | None:
    steps = []
    for ch in chans:
        ts = [t for t in ch.change_t_ns if a <= t <= b]
        steps += [t1 - t0 for t0, t1 in itertools.pairwise(ts)]
    return median(steps) / 1e9 if steps else None


def _check(name: str, passed: bool | None, detail: str) -> EnergyCheck:
    return EnergyCheck(name=name, passed=passed, detail=detail)


def _checks(
    *,
    flags: Sequence[str],
    counter: bool,
    samples: int,
    gpu_scope: bool,
    tdp_w: float | None,
    powers: tuple[float | None, float | None],
) -> list[EnergyCheck]:
    """The five checks; ``flags`` are the monitor's for the same window (one definition of a
    gap, a reset, a short window: ``power.results``)."""
    lo, hi = powers
    short = "window_short" in flags
    holes = sorted(set(flags) & {"gap", "partial", "missing_device", "no_samples"})
    out = [
        _check(
            "enough_samples",
            samples >= MIN_SAMPLES and not short,
            f"{samples} readings in the window (≥ {MIN_SAMPLES})"
            + ("; the window is under 10 refresh periods" if short else ""),
        ),
        _check(
            "monotone_counter",
            "counter_reset" not in flags if counter else None,
            (
                "a counter went down (reset) inside the window"
                if "counter_reset" in flags
                else "never decreased"
            )
            if counter
            else "a power sampler has no counter",
        ),
        _check("no_gaps", not holes, ", ".join(holes) or "reads covered the window"),
    ]
    if not gpu_scope or tdp_w is None or lo is None or hi is None:
        why = (
            "not a GPU scope"
            if not gpu_scope
            else "no TDP in the catalog"
            if tdp_w is None
            else "no power readings"
        )
        out += [_check("idle_floor", None, why), _check("ceiling", None, why)]
        return out
    floor, ceiling = IDLE_FLOOR_FRACTION * tdp_w, CEILING_FACTOR * tdp_w
    out += [
        _check("idle_floor", lo >= floor, f"lowest {lo:.1f} W per device (≥ {floor:.1f} W)"),
        _check("ceiling", hi <= ceiling, f"highest {hi:.1f} W per device (≤ {ceiling:.1f} W)"),
    ]
    return out


def _split(
    chans: Sequence[ChannelData],
    parts: tuple[Sequence[Interval], Sequence[Interval]],
    *,
    counter: bool,
    period_s: float,
    energy_j: float | None,
) -> tuple[float | None, float | None, str | None]:
    """Energy of two complementary interval sets, scaled to add up to ``energy_j``; None with
    the reason where the source's period is coarser than the shorter set's intervals."""
    if energy_j is None:
        return None, None, "no energy over the window"
    first, second = parts
    if not first or not second:  # one class is empty: nothing to resolve
        return (energy_j, 0.0, None) if first else (0.0, energy_j, None)
    short = min((first, second), key=_span_s)
    typical_s = median(h - lo for lo, h in short) / 1e9
    if period_s > typical_s:
        note = (
            f"the source refreshes every {period_s:.3g} s; the intervals to split are "
            f"~{typical_s:.3g} s: too coarse to tell apart"
        )
        return None, None, note
    e1 = _energy_over(chans, first, counter)
    e2 = _energy_over(chans, second, counter)
    if e1 + e2 <= 0:
        return None, None, "no energy integrated inside the intervals"
    return energy_j * e1 / (e1 + e2), energy_j * e2 / (e1 + e2), None


def _verdict(
    checks: Sequence[EnergyCheck], *, measured: bool, counter: bool, energy_j: float | None
) -> tuple[Method, bool, str]:
    """The method's name, whether the figure is valid, and the verdict line."""
    failed = [c for c in checks if c.passed is False]
    method: Method = (
        "modelled" if not measured else "energy_counter" if counter else "sampled_power"
    )
    valid = measured and energy_j is not None and not failed
    if valid:
        return method, True, "valid"
    reasons = [f"{c.name}: {c.detail}" for c in failed]
    reasons += [] if measured else ["modelled, not measured"]
    reasons += ["no energy over the window"] if energy_j is None else []
    return method, False, "; ".join(reasons)


def audit_scope(
    *,
    source: str,
    scope: str,
    kind: str,
    measured: bool,
    chans: Sequence[ChannelData],
    window: Interval,
    expected_period_s: float,
    flags: Sequence[str],
    energy_j: float | None,
    busy: Sequence[Interval] = (),
    prefill: Sequence[Interval] = (),
    tdp_w: float | None = None,
) -> EnergyAudit:
    """Method, checks, verdict and the busy/idle and prefill/decode split of one scope.

    ``busy`` and ``prefill`` are raw per-request intervals (run clock, ns); they are united and
    clipped to the window here. ``tdp_w`` is per device.
    """
    a, b = window
    counter = kind == "energy_counter"
    samples = sum(sum(1 for t in ch.change_t_ns if a <= t <= b) for ch in chans)
    achieved = _period_s(chans, a, b)
    powers = [p for ch in chans for p in _powers(ch, a, b, counter)]
    lo_hi = (min(powers), max(powers)) if powers else (None, None)
    gpu_scope = scope in GPU_SCOPES
    checks = _checks(
        flags=flags,
        counter=counter,
        samples=samples,
        gpu_scope=gpu_scope,
        tdp_w=tdp_w,
        powers=lo_hi,
    )
    method, valid, verdict = _verdict(checks, measured=measured, counter=counter, energy_j=energy_j)
    busy_iv = clip_union(busy, a, b)
    idle_iv = subtract([(a, b)], busy_iv)
    pre_iv = clip_union(prefill, a, b)
    dec_iv = subtract(busy_iv, pre_iv)
    period = max(expected_period_s, achieved or 0.0)
    busy_j, idle_j, note1 = _split(
        chans, (busy_iv, idle_iv), counter=counter, period_s=period, energy_j=energy_j
    )
    pre_j, dec_j, note2 = _split(
        chans, (pre_iv, dec_iv), counter=counter, period_s=period, energy_j=busy_j
    )
    return EnergyAudit(
        source=source,
        scope=scope,
        method=method,
        gpus_only=gpu_scope,
        devices=[ch.device for ch in chans],
        window_s=(b - a) / 1e9,
        samples_in_window=samples,
        expected_period_s=expected_period_s,
        achieved_period_s=achieved,
        min_power_w=lo_hi[0],
        max_power_w=lo_hi[1],
        tdp_w=tdp_w,
        checks=checks,
        valid=valid,
        verdict=verdict,
        busy_s=_span_s(busy_iv),
        idle_s=_span_s(idle_iv),
        busy_energy_j=busy_j,
        idle_energy_j=idle_j,
        prefill_s=_span_s(pre_iv),
        decode_s=_span_s(dec_iv),
        prefill_energy_j=pre_j,
        decode_energy_j=dec_j,
        split_note=note1 or note2,
    )
