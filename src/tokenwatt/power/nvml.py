"""NVIDIA GPUs through NVML (nvidia-ml-py's ``pynvml``; ``pip install 'tokenwatt[nvidia]'``).

Preferred: ``nvmlDeviceGetTotalEnergyConsumption``, a mJ counter since the driver loaded
(Volta and newer), refreshed about every 20-100 ms. Older GPUs answer NOT_SUPPORTED and we
integrate ``nvmlDeviceGetPowerUsage`` (mW) instead, which on Ampere (except GA100) and newer
is itself a 1 s running average, so it lags steps in load. On Grace superchips (GH200,
GB200) the readings cover the CPU+GPU module. NVML cannot measure MIG slices.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power.base import Channel, PowerSource, Sample, Scope, stamp_between

__all__ = ["NvmlPower"]

_INSTALL = "pip install 'tokenwatt[nvidia]'"
_SUPERCHIPS = ("GH200", "GB200", "GB300", "GRACE")


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class NvmlPower(PowerSource):
    """Energy counter (or power) of each selected GPU."""

    name = "nvml"
    update_period_s = 0.1  # the counter refreshes every 20-100 ms (Zeus, PETSc)

    def __init__(
        self,
        *,
        devices: list[int | str] | None = None,
        scope: Scope | None = None,
        poll_interval_s: float = 0.1,
        field: str = "power.sources[]",
    ) -> None:
        super().__init__()
        self.devices = devices
        self._scope = scope
        self.poll_interval_s = poll_interval_s
        self._field = field
        self._nvml: ModuleType | None = None
        self._handles: list[Any] = []

    def _fail(self, what: str) -> PowerSourceError:
        return PowerSourceError(f"power source nvml ({self._field}): {what}")

    def open(self) -> None:
        try:
            nv = importlib.import_module("pynvml")
        except ImportError:
            raise self._fail(f"nvidia-ml-py is not installed; {_INSTALL}") from None
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise self._fail(
                f"cannot start NVML ({exc}); is the NVIDIA driver installed and a GPU visible?"
            ) from None
        self._nvml = nv
        try:
            self._open_devices(nv)
        except BaseException:
            self.close()
            raise

    def _open_devices(self, nv: ModuleType) -> None:
        count = int(nv.nvmlDeviceGetCount())
        wanted: list[int | str] = list(range(count)) if self.devices is None else self.devices
        if not wanted:
            raise self._fail("NVML sees no GPU")
        handles: list[Any] = []
        names: list[str] = []
        for dev in wanted:
            if isinstance(dev, str) and dev.startswith("MIG-"):
                raise self._fail(
                    f"{dev} is a MIG slice and NVML cannot measure slices; give the whole GPU"
                )
            try:
                if isinstance(dev, int):
                    if not 0 <= dev < count:
                        raise self._fail(
                            f"GPU index {dev} not found (this node has {count}: 0..{count - 1})"
                        )
                    h = nv.nvmlDeviceGetHandleByIndex(dev)
                else:
                    h = nv.nvmlDeviceGetHandleByUUID(dev)
            except nv.NVMLError as exc:
                raise self._fail(
                    f"GPU {dev!r} not found ({exc}); `nvidia-smi -L` lists them"
                ) from None
            handles.append(h)
            names.append(_text(nv.nvmlDeviceGetName(h)))
        self._handles = handles
        # One kind for the whole source: the counter if every GPU has it.
        kind = "energy_counter"
        for h in handles:
            try:
                nv.nvmlDeviceGetTotalEnergyConsumption(h)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) not in (
                    nv.NVML_ERROR_NOT_SUPPORTED,
                    nv.NVML_ERROR_FUNCTION_NOT_FOUND,
                ):
                    raise self._fail(f"energy counter read failed ({exc})") from None
                kind = "power_sampler"
        if kind == "power_sampler":
            for h, dev in zip(handles, wanted, strict=True):
                try:
                    nv.nvmlDeviceGetPowerUsage(h)
                except nv.NVMLError as exc:
                    raise self._fail(
                        f"GPU {dev!r} has neither the energy counter nor power readings ({exc})"
                    ) from None
            self.kind, self.unit = "power_sampler", "mW"
            self.notes.append(
                "energy counter not supported (pre-Volta): integrating nvmlDeviceGetPowerUsage, "
                "a 1 s running average on Ampere and newer"
            )
        else:
            self.kind, self.unit = "energy_counter", "mJ"
        scope: Scope = self._scope or "gpu"
        if self._scope is None and any(any(s in n.upper() for s in _SUPERCHIPS) for n in names):
            scope = "module"
            self.notes.append(
                "Grace superchip: NVML readings cover the CPU+GPU module; do not add RAPL/CPU "
                "energy on top"
            )
        self.channels = tuple(Channel(device=str(dev), scope=scope) for dev in wanted)
        self.detail = ", ".join(f"{d}: {n}" for d, n in zip(wanted, names, strict=True))

    def read(self) -> list[Sample]:
        nv = self._nvml
        if nv is None:
            raise RuntimeError("nvml source read before open")
        out: list[Sample] = []
        counter = self.kind == "energy_counter"
        err: Exception | None = None
        for i, h in enumerate(self._handles):
            t0 = now_ns()
            try:
                raw = (
                    nv.nvmlDeviceGetTotalEnergyConsumption(h)
                    if counter
                    else nv.nvmlDeviceGetPowerUsage(h)
                )
            except nv.NVMLError as exc:
                err = exc
                continue
            t1 = now_ns()
            out.append(Sample(i, stamp_between(t0, t1), float(raw) * 1e-3))  # mJ→J, mW→W
        if err is not None and not out:
            raise OSError(f"NVML read failed: {err}")
        return out

    def close(self) -> None:
        nv, self._nvml = self._nvml, None
        if nv is not None:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()
