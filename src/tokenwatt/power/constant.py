"""A stated wattage per GPU: for hardware that exposes no power at all (TPU, Trainium, a
locked-down cloud VM). It always reads the same number, so the energy it yields is
P × N_GPU × window, a model and never a measurement; every figure built on it carries the
``modelled`` flag. With no stated wattage it uses the accelerator's TDP, an upper bound
that real serving rarely reaches (ML.ENERGY measured H100s at roughly 70-100% of TDP under
load).
"""

from __future__ import annotations

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.hardware import Accelerator
from tokenwatt.power.base import Channel, PowerSource, Sample

__all__ = ["ConstantPower"]


class ConstantPower(PowerSource):
    """Reports ``watts_per_gpu`` for each of ``gpus`` GPUs."""

    name = "constant"
    kind = "power_sampler"
    unit = "W"
    measured = False

    def __init__(
        self,
        *,
        gpus: int,
        watts_per_gpu: float | None = None,
        accelerator: Accelerator | None = None,
        poll_interval_s: float = 0.1,
        field: str = "power.sources[]",
    ) -> None:
        super().__init__()
        self.gpus = gpus
        self.poll_interval_s = poll_interval_s
        self.update_period_s = poll_interval_s
        if watts_per_gpu is not None:
            self.watts = watts_per_gpu
            origin = "stated in the spec"
        elif accelerator is not None and accelerator.tdp_w is not None:
            self.watts = accelerator.tdp_w
            origin = f"TDP of {accelerator.display_name}"
        else:
            which = accelerator.name if accelerator is not None else "no accelerator"
            raise PowerSourceError(
                f"power source constant ({field}): no watts_per_gpu and {which} has no TDP in "
                "the catalog; set watts_per_gpu"
            )
        if gpus < 1:
            raise PowerSourceError(f"power source constant ({field}): needs at least one GPU")
        self.detail = f"{self.watts:g} W per GPU ({origin}) × {gpus}"
        self.notes.append(f"modelled, not measured: {self.detail}")

    def open(self) -> None:
        self.channels = tuple(Channel(device=f"gpu{i}", scope="gpu") for i in range(self.gpus))

    def read(self) -> list[Sample]:
        t = now_ns()
        return [Sample(i, t, self.watts) for i in range(self.gpus)]
