"""From the spec's ``power`` section to a running ``PowerMonitor``.

Every source is opened (probed) before the run starts, so that a missing library or a dead
URL stops the run at once with one line naming the source and the fix, unless
``power.optional`` is true, in which case the source is skipped and the report says so.
"""

from __future__ import annotations

import logging

from tokenwatt.errors import PowerSourceError
from tokenwatt.hardware import Accelerator
from tokenwatt.power.amdsmi import AmdSmiPower
from tokenwatt.power.base import PowerSource
from tokenwatt.power.constant import ConstantPower
from tokenwatt.power.monitor import PowerMonitor
from tokenwatt.power.nvml import NvmlPower
from tokenwatt.power.prometheus import SIM_ENERGY_METRIC, PrometheusPower
from tokenwatt.power.rapl import RaplPower
from tokenwatt.power.redfish import RedfishPower
from tokenwatt.spec.power import (
    AmdSmiSource,
    ConstantSource,
    NvmlSource,
    PowerSection,
    PowerSourceSpec,
    PrometheusSource,
    RaplSource,
    RedfishSource,
    SimSource,
)

__all__ = ["build_source", "open_power"]

logger = logging.getLogger(__name__)


def build_source(
    spec: PowerSourceSpec,
    *,
    sample_interval_s: float,
    gpus: int,
    accelerator: Accelerator | None,
    sim_metrics_url: str | None,
    field: str = "power.sources[]",
) -> PowerSource:
    """The (unopened) source for one spec entry."""
    if isinstance(spec, NvmlSource):
        return NvmlPower(
            devices=spec.devices, scope=spec.scope, poll_interval_s=sample_interval_s, field=field
        )
    if isinstance(spec, AmdSmiSource):
        return AmdSmiPower(devices=spec.devices, poll_interval_s=sample_interval_s, field=field)
    if isinstance(spec, PrometheusSource):
        return PrometheusPower(
            url=spec.url,
            metric=spec.metric,
            labels=spec.labels,
            type_=spec.type,
            unit=spec.unit,
            scope=spec.scope,
            interval_s=spec.interval_s,
            field=field,
        )
    if isinstance(spec, RedfishSource):
        return RedfishPower(
            url=spec.url,
            paths=spec.paths,
            reading=spec.reading,
            username_env=spec.username_env,
            password_env=spec.password_env,
            verify_tls=spec.verify_tls,
            scope=spec.scope,
            interval_s=spec.interval_s,
            field=field,
        )
    if isinstance(spec, RaplSource):
        return RaplPower(
            root=spec.root, domains=spec.domains, poll_interval_s=sample_interval_s, field=field
        )
    if isinstance(spec, ConstantSource):
        return ConstantPower(
            gpus=gpus,
            watts_per_gpu=spec.watts_per_gpu,
            accelerator=accelerator,
            poll_interval_s=sample_interval_s,
            field=field,
        )
    if isinstance(spec, SimSource):
        if sim_metrics_url is None:
            raise PowerSourceError(
                f"power source sim ({field}) reads the built-in simulator; use endpoint url: sim, "
                "or a prometheus source with the simulator's /metrics URL"
            )
        src = PrometheusPower(
            url=sim_metrics_url,
            metric=SIM_ENERGY_METRIC,
            type_="energy_counter",
            unit="J",
            scope="gpu",
            interval_s=sample_interval_s,
            name="sim",
            field=field,
        )
        src.notes.append(f"the simulator's power model over its {gpus} GPU(s), read as an exporter")
        return src
    raise PowerSourceError(f"{field}: unknown power source kind {spec!r}")  # pragma: no cover


def open_power(
    section: PowerSection,
    *,
    gpus: int,
    accelerator: Accelerator | None,
    sim_metrics_url: str | None,
) -> PowerMonitor:
    """Open every source of ``section`` and return a started monitor (close it when done).

    No sources: the simulator's energy counter when ``sim_metrics_url`` is given, else a
    monitor that reports "not measured". Raises ``PowerSourceError`` (one line) for a source
    that cannot be opened, unless ``section.optional``.
    """
    specs: list[PowerSourceSpec] = list(section.sources)
    if not specs and sim_metrics_url is not None:
        specs = [SimSource()]
    opened: list[PowerSource] = []
    warnings: list[str] = []
    for i, spec in enumerate(specs):
        field = f"power.sources[{i}]"
        try:
            src = build_source(
                spec,
                sample_interval_s=section.sample_interval_s,
                gpus=gpus,
                accelerator=accelerator,
                sim_metrics_url=sim_metrics_url,
                field=field,
            )
            src.open()
        except PowerSourceError as exc:
            if not section.optional:
                for s in opened:
                    s.close()
                raise
            msg = f"{exc} (skipped: power.optional is true)"
            logger.warning("%s", msg)
            warnings.append(msg)
            continue
        opened.append(src)
    if specs and not opened:
        warnings.append("every power source failed to open: tokens per joule not measured")
    monitor = PowerMonitor(opened, warnings=warnings)
    monitor.start()
    return monitor
