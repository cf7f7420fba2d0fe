"""Power and energy: one module per source behind one interface, and a monitor that samples
them on background threads and reports energy over any window of the run's monotonic clock.

    open_power(section, gpus=, accelerator=, sim_metrics_url=) -> PowerMonitor (started)
    PowerMonitor.energy(start_ns, end_ns) -> EnergyReport      per scope, with flags
    PowerMonitor.samples(start_ns, end_ns) -> PowerSeries      power over time, for plots

See docs/methodology.md for what each source measures and how a window is integrated.
"""

from __future__ import annotations

from tokenwatt.power.base import Channel, PowerSource, Sample, SourceKind
from tokenwatt.power.factory import build_source, open_power
from tokenwatt.power.monitor import NOT_MEASURED, PowerMonitor
from tokenwatt.power.results import (
    INVALID_FLAGS,
    PRIMARY_ORDER,
    WINDOW_SHORT_PERIODS,
    EnergyReport,
    PowerSeries,
    ScopeEnergy,
)

__all__ = [
    "INVALID_FLAGS",
    "NOT_MEASURED",
    "PRIMARY_ORDER",
    "WINDOW_SHORT_PERIODS",
    "Channel",
    "EnergyReport",
    "PowerMonitor",
    "PowerSeries",
    "PowerSource",
    "Sample",
    "ScopeEnergy",
    "SourceKind",
    "build_source",
    "open_power",
]
