"""Any Prometheus exporter: dcgm-exporter's energy counter or power gauge, or a named metric.

Each matching series (one per GPU on dcgm-exporter, keyed by its labels) becomes a channel,
so counter resets are tracked per GPU; the report sums them. The exporter serves cached
values: dcgm-exporter refreshes them every collection interval (default 30 s), and scraping
faster returns the same number again, which the monitor de-duplicates and then notices as a
slow update period (flagging short windows). The simulator's energy counter is read the
same way (``kind: sim``).
"""

from __future__ import annotations

from tokenwatt.errors import PowerSourceError
from tokenwatt.httpget import HttpError
from tokenwatt.power.base import Channel, PowerSource, Sample, Scope, SourceKind
from tokenwatt.promscrape import parse_page, scrape_text
from tokenwatt.spec import redact_text

__all__ = ["SIM_ENERGY_METRIC", "PrometheusPower"]

SIM_ENERGY_METRIC = "tokenwatt_sim_energy_joules_total"
_SCALE = {"J": 1.0, "mJ": 1e-3, "W": 1.0, "mW": 1e-3}
_DCGM_HINT = (
    "dcgm-exporter refreshes every collection interval (-c / DCGM_EXPORTER_INTERVAL, "
    "default 30000 ms): lower it or lengthen the window"
)
_DEVICE_LABELS = ("gpu", "UUID", "device", "gpu_uuid", "instance")


def _base(name: str) -> str:
    return name.removesuffix("_total")


def _auto_unit(metric: str) -> str | None:
    up = metric.upper()
    low = _base(metric).lower()
    if up.startswith("DCGM_FI_"):
        return "mJ" if "ENERGY" in up else "W"
    if low.endswith("_joules"):
        return "J"
    if low.endswith("_millijoules"):
        return "mJ"
    if low.endswith("_watts"):
        return "W"
    if low.endswith("_milliwatts"):
        return "mW"
    return None


def _device(labels: dict[str, str]) -> str:
    for key in _DEVICE_LABELS:
        if labels.get(key):
            return f"{key}={labels[key]}"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "total"


class PrometheusPower(PowerSource):
    """Scrapes one metric from a Prometheus text endpoint on every poll."""

    name = "prometheus"

    def __init__(
        self,
        *,
        url: str,
        metric: str,
        labels: dict[str, str] | None = None,
        type_: str = "auto",
        unit: str = "auto",
        scope: Scope = "gpu",
        interval_s: float = 0.5,
        name: str = "prometheus",
        field: str = "power.sources[]",
    ) -> None:
        super().__init__()
        self.name = name
        self.url = url
        self.metric = metric
        self.labels = dict(labels or {})
        self._type = type_
        self._unit = unit
        self._scope: Scope = scope
        self._field = field
        self.poll_interval_s = interval_s
        self.update_period_s = interval_s
        self.timeout_s = min(max(2 * interval_s, 1.0), 10.0)
        self.detail = f"{metric} @ {redact_text(url)}"
        if self.labels:
            self.detail += " " + ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        self.slow_hint = _DCGM_HINT if metric.upper().startswith("DCGM_") else ""
        self._keys: dict[tuple[tuple[str, str], ...], int] = {}
        self._scale = 1.0

    def _fail(self, what: str) -> PowerSourceError:
        return PowerSourceError(f"power source {self.name} ({self._field}): {what}")

    def _series(self, text: str) -> tuple[str | None, list[tuple[dict[str, str], float]]]:
        """The family type and every matching (labels, value) of ``metric`` in ``text``."""
        want = _base(self.metric)
        page = parse_page(text, only=want)  # only the lines about this metric
        fam_type: str | None = None
        found: list[tuple[dict[str, str], float]] = []
        for name, series in page.series.items():
            if _base(name) != want:
                continue
            for labels, value in series:
                if any(labels.get(k) != v for k, v in self.labels.items()):
                    continue
                fam_type = page.types[name]
                found.append((labels, value))
        return fam_type, found

    def _scrape(self) -> tuple[int, str]:
        return scrape_text(self.url, timeout_s=self.timeout_s)

    def open(self) -> None:
        safe = redact_text(self.url)
        try:
            _, text = self._scrape()
        except HttpError as exc:
            raise self._fail(
                f"{safe} did not answer ({exc}); check that the exporter is running and the URL"
            ) from None
        try:
            fam_type, found = self._series(text)
        except ValueError as exc:
            raise self._fail(f"{safe} did not serve Prometheus text ({exc})") from None
        if not found:
            want = f"{self.metric}{self.labels or ''}"
            others = sorted(
                {
                    ln.split("{")[0].split(" ")[0]
                    for ln in text.splitlines()
                    if ln
                    and not ln.startswith("#")
                    and any(w in ln.upper() for w in ("ENERGY", "POWER", "JOULE", "WATT"))
                }
            )[:6]
            hint = f"; similar metrics there: {', '.join(others)}" if others else ""
            raise self._fail(f"{safe} has no series {want}{hint}")
        kind: SourceKind
        if self._type == "energy_counter":
            kind = "energy_counter"
        elif self._type == "power_gauge":
            kind = "power_sampler"
        elif fam_type == "counter" or any(w in self.metric.lower() for w in ("energy", "joule")):
            kind = "energy_counter"
        else:
            kind = "power_sampler"
        unit = self._unit if self._unit != "auto" else _auto_unit(self.metric)
        if unit is None:
            raise self._fail(
                f"cannot tell the unit of {self.metric}; set unit: J, mJ, W or mW in the spec"
            )
        if (kind == "energy_counter") != (unit in ("J", "mJ")):
            raise self._fail(
                f"unit {unit} does not fit a {kind.replace('_', ' ')}; set type and unit together"
            )
        self.kind = kind
        self.unit = unit
        self._scale = _SCALE[unit]
        found.sort(key=lambda lv: _device(lv[0]))
        chans: list[Channel] = []
        for labels, _ in found:
            self._keys[tuple(sorted(labels.items()))] = len(chans)
            chans.append(Channel(device=_device(labels), scope=self._scope))
        self.channels = tuple(chans)

    def read(self) -> list[Sample]:
        t, text = self._scrape()
        _, found = self._series(text)
        out: list[Sample] = []
        for labels, value in found:
            idx = self._keys.get(tuple(sorted(labels.items())))
            if idx is not None:  # series that appeared after the start are not followed
                out.append(Sample(idx, t, value * self._scale))
        return out
