"""Linux RAPL energy counters from powercap sysfs: CPU packages and DRAM.

Each zone ``<root>/intel-rapl:N[:M]`` (the same names on AMD CPUs) has ``name``
(package-N, core, uncore, dram, psys), ``energy_uj`` (a µJ counter) and
``max_energy_range_uj`` (where it wraps: a few hundred kJ, minutes at full load, so the
monitor must poll faster than that and add the range back on each wrap). Reading
``energy_uj`` needs root on kernels patched for CVE-2020-8694.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power.base import Channel, PowerSource, Sample, Scope, stamp_between

__all__ = ["RaplPower"]

_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")


def _scope(name: str) -> Scope | None:
    if name.startswith("package") or name in ("core", "uncore"):
        return "cpu"
    if name == "dram":
        return "dram"
    if name == "psys":
        return "node"
    return None


class RaplPower(PowerSource):
    """Reads the chosen RAPL zones' ``energy_uj`` on every poll."""

    name = "rapl"
    kind = "energy_counter"
    unit = "uJ"
    update_period_s = 0.001  # RAPL refreshes about every millisecond

    def __init__(
        self,
        *,
        root: str = "/sys/class/powercap",
        domains: list[str] | None = None,
        poll_interval_s: float = 0.1,
        field: str = "power.sources[]",
    ) -> None:
        super().__init__()
        self.root = Path(root)
        self.domains = domains
        self.poll_interval_s = poll_interval_s
        self._field = field
        self._files: list[Path] = []
        self.detail = str(self.root)

    def _fail(self, what: str) -> PowerSourceError:
        return PowerSourceError(f"power source rapl ({self._field}): {what}")

    def _zones(self) -> list[tuple[str, str, Path]]:
        """(zone id, name, directory) of every RAPL zone under root, in order."""
        try:
            entries = sorted(self.root.iterdir())
        except OSError:
            return []
        out = []
        for d in entries:
            m = _ZONE.match(d.name)
            if not m:
                continue  # intel-rapl-mmio:* repeats the package zone on some Intel CPUs
            try:
                name = (d / "name").read_text().strip()
            except OSError:
                continue
            out.append((d.name, name, d))
        return out

    def open(self) -> None:
        zones = self._zones()
        if not zones:
            raise self._fail(
                f"no RAPL zones under {self.root} (not a Linux host with powercap, or sysfs "
                "not mounted in this container); set root or drop this source"
            )
        chosen: list[tuple[str, str, Path]] = []
        if self.domains is None:
            chosen = [z for z in zones if z[1].startswith("package") or z[1] == "dram"]
        else:
            names = {z[1] for z in zones}
            unknown = [d for d in self.domains if d not in names]
            if unknown:
                raise self._fail(
                    f"no zone named {', '.join(unknown)}; zones here: {', '.join(sorted(names))}"
                )
            chosen = [z for z in zones if z[1] in self.domains]
            has_package = any(z[1].startswith("package") for z in chosen)
            if has_package and any(z[1] in ("core", "uncore") for z in chosen):
                raise self._fail(
                    "core/uncore are parts of package: list the package or its parts, not both"
                )
        chans: list[Channel] = []
        for zone, name, d in chosen:
            scope = _scope(name)
            if scope is None:
                raise self._fail(f"zone {name} has no known scope; leave it out of domains")
            f = d / "energy_uj"
            try:
                int(f.read_text())
            except PermissionError:
                raise self._fail(
                    f"cannot read {f} (permission denied; root only since CVE-2020-8694): "
                    f"run as root or `sudo chmod a+r {self.root}/intel-rapl:*/energy_uj`"
                ) from None
            except (OSError, ValueError) as exc:
                raise self._fail(f"cannot read {f} ({exc})") from None
            try:
                wrap = int((d / "max_energy_range_uj").read_text()) * 1e-6
            except (OSError, ValueError):
                wrap = None
            m = _ZONE.match(zone)
            # top-level zones are named uniquely (package-N, psys); subzones repeat per socket
            device = f"{name}-{m.group(1)}" if m and m.group(2) is not None else name
            chans.append(Channel(device=device, scope=scope, wrap_j=wrap))
            self._files.append(f)
        if not chans:
            raise self._fail(f"no package or dram zone under {self.root}; name them in domains")
        self.channels = tuple(chans)
        self.detail = f"{self.root} ({', '.join(c.device for c in chans)})"

    def read(self) -> list[Sample]:
        out: list[Sample] = []
        for i, f in enumerate(self._files):
            t0 = now_ns()
            raw = f.read_text()
            t1 = now_ns()
            out.append(Sample(i, stamp_between(t0, t1), int(raw) * 1e-6))
        return out
