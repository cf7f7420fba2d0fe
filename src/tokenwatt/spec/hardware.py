"""The node under test: accelerator, N_GPU and data-parallel replicas R."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from tokenwatt.spec._base import Section

MAX_GPUS = 65_536  # accelerators on one node under test (a rack-scale node is ~72)
# Sanity bounds that catch a unit slip (cents for dollars, per-month for per-hour), not policy:
# cloud H100/B200 list ~2-12 USD/GPU-h, electricity ~0.05-0.5 USD/kWh.
MAX_PRICE_PER_GPU_HOUR = 10_000.0
MAX_PRICE_PER_KWH = 100.0


class CustomAccelerator(Section):
    """Figures for one accelerator; upper bounds sit ~100x above today's parts (B/s, bytes, W,
    FLOP/s) so a unit slip (bytes for GiB, W for mW) is caught, not a future chip."""

    bandwidth_bytes_per_s: float = Field(
        gt=0, le=1e16, description="rated memory bandwidth per GPU, B/s"
    )
    memory_bytes: float | None = Field(
        None,
        gt=0,
        le=1e15,
        description="memory per GPU, bytes; None: the named accelerator's (unknown without one)",
    )
    tdp_w: float | None = Field(None, gt=0, le=1e6, description="board power per GPU, W")
    bf16_dense_flops: float | None = Field(
        None, gt=0, le=1e19, description="dense BF16 peak, FLOP/s"
    )
    fp8_dense_flops: float | None = Field(None, gt=0, le=1e19, description="dense FP8 peak, FLOP/s")
    measured: bool = Field(
        False,
        description="the bandwidth was measured (`tokenwatt hardware --measure`), not rated: "
        "the result labels the accelerator measured",
    )
    measured_at: str | None = Field(
        None, max_length=64, description="measured: when (UTC, as `hardware --measure` printed)"
    )
    measured_method: str | None = Field(
        None, max_length=200, description="measured: how (what was read, runs, threads)"
    )
    measured_spread: float | None = Field(
        None,
        ge=0,
        le=1,
        description="measured: how much the runs varied (the slowest run's shortfall against "
        "the figure, a fraction)",
    )

    def measured_source(self) -> str:
        """``measured (tokenwatt hardware --measure at WHEN; HOW; the slowest run X % below
        the best)``: the provenance a measured bandwidth carries into the result's
        accelerator and every view of it."""
        parts = ["tokenwatt hardware --measure"]
        if self.measured_at:
            parts[0] += f" at {self.measured_at}"
        if self.measured_method:
            parts.append(self.measured_method)
        if self.measured_spread is not None:
            parts.append(f"the slowest run {self.measured_spread:.1%} below the best")
        return f"measured ({'; '.join(parts)})"


class HardwareSection(Section):
    accelerator: str | None = Field(
        None, description="catalog name (see `tokenwatt hardware`); required unless `custom`"
    )
    custom: CustomAccelerator | None = Field(
        None, description="figures for an accelerator the catalog lacks, or to replace its own"
    )
    gpus: int = Field(
        1, ge=1, le=MAX_GPUS, description="N_GPU: accelerators serving the model on this node"
    )
    replicas: int = Field(
        1,
        ge=1,
        le=MAX_GPUS,
        description="R: data-parallel engine replicas on the node; more replicas than GPUs, or "
        "GPUs not a multiple of replicas, means replicas share GPUs (MPS, fractional GPUs)",
    )
    price_per_gpu_hour: float | None = Field(
        None,
        gt=0,
        le=MAX_PRICE_PER_GPU_HOUR,
        description="what one GPU costs per hour (any currency, e.g. USD): gives $/Mtok at the "
        "boundary; None: no cost figure",
    )
    price_per_kwh: float | None = Field(
        None,
        gt=0,
        le=MAX_PRICE_PER_KWH,
        description="price of one kWh in the same currency: adds the measured energy's cost to "
        "$/Mtok; None: rental price only",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.accelerator is None and self.custom is None:
            raise ValueError(
                "give hardware.accelerator (a catalog name, see `tokenwatt hardware`) or "
                "hardware.custom: nothing is assumed"
            )
        return self

    @property
    def gpus_per_replica(self) -> float:
        """N_GPU ÷ R: below 1 (or not whole) when replicas share GPUs."""
        return self.gpus / self.replicas

    @property
    def shares_gpus(self) -> bool:
        return gpu_sharing_note(self.gpus, self.replicas) is not None


def gpu_sharing_note(gpus: int, replicas: int) -> str | None:
    """The one line every result carries when replicas share GPUs (MPS, fractional GPUs):
    the weights are read once per replica, through the node's N_GPU × bandwidth."""
    if gpus % replicas == 0:
        return None
    return (
        f"{replicas} replicas share {gpus} GPU{'s' if gpus > 1 else ''} (MPS or fractional "
        f"GPUs, {gpus / replicas:.3g} GPU per replica): each replica reads its own weights, "
        "all through the node's N_GPU × rated bandwidth"
    )
