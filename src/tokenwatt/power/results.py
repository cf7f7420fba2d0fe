"""What the monitor answers: energy per scope over a window, and power over time for plots.

Flags (strings, so they travel into result files unchanged):

    modelled        not a measurement (the constant source)
    window_short    window < WINDOW_SHORT_PERIODS × the source's update period
    partial         readings did not cover the whole window; the gap is filled at the
                    channel's mean power over what was covered (see ``coverage``)
    counter_reset   a counter went down (driver reload, exporter restart): that segment was
                    dropped and filled like ``partial``
    counter_wrap    a counter wrapped and was corrected (information, not a fault)
    gap             reads were missing for a while inside the window (or at its edge, for a
                    counter)
    read_errors     some reads failed inside the window
    zero_energy     a counter did not move over the window
    missing_device  a device gave no reading at all over the window (energy is None)
    no_samples      nothing usable over the window (energy is None)

Scopes are never added to each other: module ⊃ gpu ⊃ memory and node ⊃ everything, so a
"total across scopes" would count the same joules twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenwatt.power.base import SourceKind

__all__ = [
    "INVALID_FLAGS",
    "PRIMARY_ORDER",
    "WINDOW_SHORT_PERIODS",
    "EnergyReport",
    "PowerSeries",
    "ScopeEnergy",
]

# The edge interpolation errs by at most about one update period's worth of the power
# swing at each end, so ten periods keep that below a few percent for realistic swings.
WINDOW_SHORT_PERIODS = 10
# Flags that make a figure unfit to rank configurations by.
INVALID_FLAGS = frozenset(
    {
        "window_short",
        "partial",
        "counter_reset",
        "gap",
        "zero_energy",
        "missing_device",
        "no_samples",
    }
)
# Which scope leads the report when several were measured: the accelerators first (what
# MLPerf-style GPU-only tokens per joule compare), then wider, then parts.
PRIMARY_ORDER = ("gpu", "module", "node", "wall", "cpu", "memory", "dram")


@dataclass(frozen=True, slots=True)
class ScopeEnergy:
    """One source's energy in one scope over a window, summed over its devices."""

    scope: str
    source: str  # nvml, amdsmi, prometheus, redfish, rapl, constant, sim
    source_detail: str  # e.g. the metric and URL
    kind: SourceKind
    measured: bool  # False: modelled (constant)
    energy_j: float | None  # over the whole window; None when nothing usable
    mean_power_w: float | None  # energy_j / window
    window_s: float
    devices: int
    samples_used: int
    coverage: float  # lowest fraction of the window any device's readings covered
    update_period_s: float  # max(expected, observed)
    flags: tuple[str, ...]
    per_device_j: dict[str, float | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """Measured, and no flag that makes the number unreliable."""
        return self.measured and self.energy_j is not None and not INVALID_FLAGS & set(self.flags)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "source": self.source,
            "source_detail": self.source_detail,
            "kind": self.kind,
            "measured": self.measured,
            "modelled": not self.measured,
            "energy_j": self.energy_j,
            "mean_power_w": self.mean_power_w,
            "window_s": self.window_s,
            "devices": self.devices,
            "samples_used": self.samples_used,
            "coverage": self.coverage,
            "update_period_s": self.update_period_s,
            "flags": list(self.flags),
            "valid": self.valid,
            "per_device_j": dict(self.per_device_j),
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class EnergyReport:
    """Energy over exactly [start_ns, end_ns] (the run's monotonic clock).

    ``scopes`` holds one entry per scope: the first measured source in spec order that
    covers it (a modelled one only where nothing measured does). ``sources`` holds every
    (source, scope) pair, so that two sources of the same scope can be compared.
    """

    start_ns: int
    end_ns: int
    scopes: dict[str, ScopeEnergy]
    sources: tuple[ScopeEnergy, ...]
    primary_scope: str | None
    warnings: tuple[str, ...] = ()

    @property
    def window_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def primary(self) -> ScopeEnergy | None:
        return self.scopes.get(self.primary_scope) if self.primary_scope else None

    @property
    def measured(self) -> bool:
        """True when the headline figure is a measurement (not modelled, not missing)."""
        p = self.primary
        return p is not None and p.measured and p.energy_j is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "window_s": self.window_s,
            "primary_scope": self.primary_scope,
            "measured": self.measured,
            "scopes": {k: v.to_dict() for k, v in self.scopes.items()},
            "sources": [s.to_dict() for s in self.sources],
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, slots=True)
class PowerSeries:
    """Mean power per time bin, per scope (summed over devices), for a plot.

    ``t_s`` are bin centres in seconds from ``start_ns``; a value is None where no reading
    covered the bin.
    """

    start_ns: int
    end_ns: int
    t_s: tuple[float, ...]
    power_w: dict[str, tuple[float | None, ...]]
    sources: dict[str, str]  # scope → source name
    primary_scope: str | None = None

    def primary_points(self) -> list[tuple[float, float]]:
        """(t_s, W) pairs of the primary scope with the empty bins left out."""
        if self.primary_scope is None:
            return []
        ys = self.power_w.get(self.primary_scope, ())
        return [(t, y) for t, y in zip(self.t_s, ys, strict=False) if y is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "t_s": list(self.t_s),
            "power_w": {k: list(v) for k, v in self.power_w.items()},
            "sources": dict(self.sources),
            "primary_scope": self.primary_scope,
        }
