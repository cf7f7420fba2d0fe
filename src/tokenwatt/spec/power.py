"""Where power and energy are read from. The sources themselves live in ``tokenwatt.power``.

Each entry of ``sources`` names one way of reading power (``kind``); the run reads them all on
background threads and reports energy per scope over each probe's window
(docs/methodology.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from tokenwatt.spec._base import Section

# a poll faster than 1 ms is a busy loop; slower than an hour leaves no sample in a probe
MIN_INTERVAL_S = 0.001
MAX_INTERVAL_S = 3600.0

Scope = Literal["gpu", "module", "memory", "cpu", "dram", "node", "wall"]


class NvmlSource(Section):
    """NVIDIA GPUs through NVML (``pip install 'tokenwatt[nvidia]'``)."""

    kind: Literal["nvml"] = "nvml"
    devices: list[int | str] | None = Field(
        None, description="GPU indices or UUIDs (GPU-…); None: all visible GPUs"
    )
    scope: Scope | None = Field(
        None,
        description="None: gpu, or module on Grace superchips (GH200/GB200), whose readings "
        "include the CPU",
    )


class AmdSmiSource(Section):
    """AMD GPUs through AMD SMI (``pip install 'tokenwatt[amd]'``)."""

    kind: Literal["amdsmi"] = "amdsmi"
    devices: list[int | str] | None = Field(
        None, description="GPU indices (amdsmi processor order) or UUIDs; None: all"
    )


class PrometheusSource(Section):
    """Any Prometheus exporter: dcgm-exporter by default."""

    kind: Literal["prometheus"] = "prometheus"
    url: str = Field(description="metrics URL, e.g. http://host:9400/metrics (dcgm-exporter)")
    metric: str = Field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        description="metric name; an energy counter or a power gauge",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="keep only series whose labels match all of these, e.g. {gpu: '0'}",
    )
    type: Literal["auto", "energy_counter", "power_gauge"] = Field(
        "auto", description="auto: from the name and # TYPE (…ENERGY…/_joules: counter, else gauge)"
    )
    unit: Literal["auto", "mJ", "J", "W", "mW"] = Field(
        "auto", description="auto: DCGM energy is mJ, DCGM power is W, *_joules is J, *_watts is W"
    )
    scope: Scope = Field("gpu", description="what the figure covers")
    interval_s: float = Field(
        0.5, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S, description="scrape period, s"
    )

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL such as http://127.0.0.1:9400/metrics")
        return v


class RedfishSource(Section):
    """A BMC's Redfish ``EnvironmentMetrics`` (node, chassis or per-GPU), out of band."""

    kind: Literal["redfish"] = "redfish"
    url: str = Field(description="BMC base URL, e.g. https://bmc.example")
    paths: list[str] = Field(
        default_factory=lambda: ["/redfish/v1/Chassis/1/EnvironmentMetrics"],
        min_length=1,
        description="resources holding PowerWatts and/or EnergyJoules; several (one per GPU) "
        "are summed",
    )
    reading: Literal["auto", "EnergyJoules", "PowerWatts", "EnergykWh", "PowerConsumedWatts"] = (
        Field(
            "auto",
            description="property to read; auto: EnergyJoules, else PowerWatts, else the legacy "
            "Power resource's PowerControl[].PowerConsumedWatts, else EnergykWh",
        )
    )
    username_env: str | None = Field(None, description="env var holding the BMC user name")
    password_env: str | None = Field(None, description="env var holding the BMC password")
    verify_tls: bool = Field(True, description="check the BMC's certificate")
    scope: Scope = Field("node")
    interval_s: float = Field(
        1.0, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S, description="poll period, s (BMCs refresh ~1 s)"
    )

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL such as https://bmc.example")
        return v.rstrip("/")


class RaplSource(Section):
    """Linux powercap RAPL counters: CPU packages and DRAM."""

    kind: Literal["rapl"] = "rapl"
    root: str = Field("/sys/class/powercap", description="powercap sysfs root")
    domains: list[str] | None = Field(
        None,
        description="zone names to sum (package-0, dram, psys, …); None: every package and dram",
    )


class ConstantSource(Section):
    """A stated wattage: modelled, never measured."""

    kind: Literal["constant"] = "constant"
    watts_per_gpu: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="stated watts per GPU; None: the accelerator's TDP (modelled)",
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
    sample_interval_s: float = Field(
        0.1,
        ge=MIN_INTERVAL_S,
        le=MAX_INTERVAL_S,
        description="poll period of the local sources (NVML, AMD SMI, RAPL, sim), s",
    )
