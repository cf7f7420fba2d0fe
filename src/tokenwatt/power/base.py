"""The one interface every power source implements.

A source is opened once at the start of a run (where a missing library or a dead URL must
fail loudly), then read repeatedly from its own background thread by ``PowerMonitor``. It
never integrates anything itself: it returns raw readings, normalised to joules (energy
counters) or watts (power samplers) and stamped on the run's monotonic clock.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

from tokenwatt.clock import now_ns, stamp_between
from tokenwatt.spec.power import Scope

__all__ = ["Channel", "PowerSource", "Sample", "Scope", "SourceKind", "now_ns", "stamp_between"]

SourceKind = Literal["energy_counter", "power_sampler"]


@dataclass(frozen=True, slots=True)
class Channel:
    """One series a source reports: a device (GPU, package, BMC resource) in one scope.

    ``wrap_j`` is the counter's modulus in joules where it wraps (RAPL's
    ``max_energy_range_uj``); None where it does not (a decrease is then a reset).
    """

    device: str
    scope: Scope
    wrap_j: float | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one channel: J for counters (cumulative), W for samplers."""

    channel: int
    t_ns: int
    value: float


class PowerSource(ABC):
    """Base of every source. Subclasses set the class attributes and fill ``channels`` in
    ``open``.

    Attributes:
        name: short source name used in reports (nvml, amdsmi, prometheus, …).
        kind: energy_counter (cumulative J) or power_sampler (W).
        unit: the vendor's native unit, for provenance (mJ, mW, uJ, W, J).
        update_period_s: how often the vendor refreshes the figure (expected; the monitor
            also measures it).
        poll_interval_s: how often the monitor reads it.
        measured: False for a modelled figure (the constant source).
    """

    name: str = "source"
    kind: SourceKind = "energy_counter"
    unit: str = "J"
    update_period_s: float = 0.1
    poll_interval_s: float = 0.1
    measured: bool = True

    @staticmethod
    def clock() -> int:
        """The source's clock (the run's monotonic clock; a test may substitute its own)."""
        return now_ns()

    def __init__(self) -> None:
        self.channels: tuple[Channel, ...] = ()
        self.notes: list[str] = []
        self.detail: str = ""

    @abstractmethod
    def open(self) -> None:
        """Probe the source and take a first reading; raise ``PowerSourceError`` (one line,
        naming the source and the fix) when it cannot be used."""

    @abstractmethod
    def read(self) -> list[Sample]:
        """One reading of every channel that answered. May raise on a transient failure; the
        monitor counts it and carries on."""

    def close(self) -> None:  # noqa: B027 - most sources hold nothing to release
        """Release the vendor library or connection."""

    def describe(self) -> dict[str, object]:
        """Provenance for the result file (never credentials)."""
        return {
            "name": self.name,
            "detail": self.detail,
            "kind": self.kind,
            "measured": self.measured,
            "unit": self.unit,
            "update_period_s": self.update_period_s,
            "poll_interval_s": self.poll_interval_s,
            "channels": [
                {"device": c.device, "scope": c.scope, "wrap_j": c.wrap_j} for c in self.channels
            ],
            "notes": list(self.notes),
        }

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
