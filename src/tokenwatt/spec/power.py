"""Where power and energy are read from. The sources themselves live in ``tokenwatt.power``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tokenwatt.spec._base import Section

Scope = Literal["gpu", "module", "memory", "cpu", "dram", "node", "wall"]


class NvmlSource(Section):
    kind: Literal["nvml"] = "nvml"
    devices: list[int | str] | None = Field(
        None, description="GPU indices or UUIDs; None: all visible GPUs"
    )


class AmdSmiSource(Section):
    kind: Literal["amdsmi"] = "amdsmi"
    devices: list[int | str] | None = Field(None, description="GPU indices or UUIDs; None: all")


class PrometheusSource(Section):
    kind: Literal["prometheus"] = "prometheus"
    url: str = Field(description="metrics URL, e.g. http://host:9400/metrics (dcgm-exporter)")
    metric: str = Field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        description="metric name; an energy counter or a power gauge",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="keep only series whose labels match all of these"
    )
    type: Literal["auto", "energy_counter", "power_gauge"] = Field(
        "auto", description="auto: from the name (…ENERGY…/_joules counter, else gauge)"
    )
    unit: Literal["auto", "mJ", "J", "W", "mW"] = Field(
        "auto", description="auto: DCGM energy is mJ, DCGM power is W, *_joules is J"
    )
    scope: Scope = Field("gpu", description="what the figure covers")
    interval_s: float = Field(0.5, gt=0, description="scrape period, s")


class RedfishSource(Section):
    kind: Literal["redfish"] = "redfish"
    url: str = Field(description="BMC base URL, e.g. https://bmc.example")
    path: str = Field(
        "/redfish/v1/Chassis/1/EnvironmentMetrics",
        description="resource holding PowerWatts and/or EnergyJoules",
    )
    username_env: str | None = Field(None, description="env var holding the BMC user name")
    password_env: str | None = Field(None, description="env var holding the BMC password")
    verify_tls: bool = Field(True, description="check the BMC's certificate")
    scope: Scope = Field("node")
    interval_s: float = Field(1.0, gt=0)


class RaplSource(Section):
    kind: Literal["rapl"] = "rapl"
    root: str = Field("/sys/class/powercap", description="powercap sysfs root")
    domains: list[str] | None = Field(
        None, description="zone names to sum (package-0, dram, …); None: all packages and dram"
    )


class ConstantSource(Section):
    kind: Literal["constant"] = "constant"
    watts_per_gpu: float | None = Field(
        None, gt=0, description="stated watts per GPU; None: the accelerator's TDP (modelled)"
    )


class SimSource(Section):
    """The built-in simulator's energy counter, read over its /metrics like any exporter."""

    kind: Literal["sim"] = "sim"


PowerSourceSpec = Annotated[
    NvmlSource
    | AmdSmiSource
    | PrometheusSource
    | RedfishSource
    | RaplSource
    | ConstantSource
    | SimSource,
    Field(discriminator="kind"),
]


class PowerSection(Section):
    sources: list[PowerSourceSpec] = Field(
        default_factory=list,
        description="power sources to read; empty: the simulator's counter for endpoint 'sim', "
        "else tokens per joule is reported as not measured",
    )
    optional: bool = Field(
        False, description="carry on without a source that fails at start (else the run stops)"
    )
    sample_interval_s: float = Field(0.1, gt=0, description="sampling period for samplers, s")
