"""AMD GPUs through AMD SMI (the ``amdsmi`` Python package from ROCm;
``pip install 'tokenwatt[amd]'``).

Preferred: ``amdsmi_get_energy_count``, an accumulator whose tick is ``counter_resolution``
µJ; both are read at run time, never assumed (the dict key was ``power`` before amdsmi
6.2.1, ``energy_accumulator`` since). Otherwise ``amdsmi_get_power_info`` in W
(``socket_power`` on ROCm 7, else ``current_socket_power``, else ``average_socket_power``;
any may be "N/A"). Needs ROCm ≥ 6.3 for trustworthy readings; the energy counter is absent
in VM guests. On MI250/MI250X the odd GCD reports no power of its own (the even one covers
both dies), which summing handles.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power.base import Channel, PowerSource, Sample, stamp_between

__all__ = ["AmdSmiPower"]

_INSTALL = "pip install 'tokenwatt[amd]' (amdsmi ships with ROCm ≥ 6.3)"
_POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")


def _accumulator(d: dict[str, Any]) -> int:
    return int(d["energy_accumulator"] if "energy_accumulator" in d else d["power"])


def _watts(d: dict[str, Any]) -> float | None:
    for key in _POWER_KEYS:
        v = d.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None


class AmdSmiPower(PowerSource):
    """Energy accumulator (or socket power) of each selected AMD GPU."""

    name = "amdsmi"
    update_period_s = 0.1

    def __init__(
        self,
        *,
        devices: list[int | str] | None = None,
        poll_interval_s: float = 0.1,
        field: str = "power.sources[]",
    ) -> None:
        super().__init__()
        self.devices = devices
        self.poll_interval_s = poll_interval_s
        self._field = field
        self._smi: ModuleType | None = None
        self._handles: list[Any] = []
        self._res_uj: list[float] = []

    def _fail(self, what: str) -> PowerSourceError:
        return PowerSourceError(f"power source amdsmi ({self._field}): {what}")

    def open(self) -> None:
        try:
            smi = importlib.import_module("amdsmi")
        except ImportError:
            raise self._fail(f"the amdsmi package is not installed; {_INSTALL}") from None
        try:
            smi.amdsmi_init()
        except smi.AmdSmiException as exc:
            raise self._fail(
                f"cannot start AMD SMI ({exc}); is the amdgpu driver loaded and ROCm installed?"
            ) from None
        self._smi = smi
        try:
            self._open_devices(smi)
        except BaseException:
            self.close()
            raise

    def _open_devices(self, smi: ModuleType) -> None:
        handles = list(smi.amdsmi_get_processor_handles())
        if not handles:
            raise self._fail("AMD SMI sees no GPU")
        uuids = [str(smi.amdsmi_get_gpu_device_uuid(h)) for h in handles]
        wanted: list[int | str] = (
            list(range(len(handles))) if self.devices is None else self.devices
        )
        chosen: list[Any] = []
        for dev in wanted:
            if isinstance(dev, int):
                if not 0 <= dev < len(handles):
                    raise self._fail(
                        f"GPU index {dev} not found (AMD SMI sees {len(handles)}: "
                        f"0..{len(handles) - 1})"
                    )
                chosen.append(handles[dev])
            else:
                if dev not in uuids:
                    raise self._fail(f"GPU UUID {dev} not found; `amd-smi list` shows them")
                chosen.append(handles[uuids.index(dev)])
        self._handles = chosen
        resolutions: list[float] = []
        try:
            for h in chosen:
                res = float(smi.amdsmi_get_energy_count(h)["counter_resolution"])
                if not res > 0:
                    raise ValueError(f"counter_resolution {res}")
                resolutions.append(res)
        except (smi.AmdSmiException, KeyError, ValueError) as exc:
            self.notes.append(f"energy counter unavailable ({exc}): integrating socket power")
            self._check_power(smi, wanted, chosen)
            self.kind, self.unit = "power_sampler", "W"
        else:
            self._res_uj = resolutions
            self.kind, self.unit = "energy_counter", "uJ"
            self.notes.append(
                "counter resolution read at start: " + ", ".join(f"{r:g} µJ" for r in resolutions)
            )
        self.channels = tuple(
            Channel(
                device=str(dev),
                scope="gpu",
                # the accumulator is a uint64 of ticks: it wraps at 2^64 ticks
                wrap_j=(2.0**64 * self._res_uj[i] * 1e-6) if self._res_uj else None,
            )
            for i, dev in enumerate(wanted)
        )
        self.detail = ", ".join(str(d) for d in wanted)

    def _check_power(self, smi: ModuleType, wanted: list[int | str], chosen: list[Any]) -> None:
        for dev, h in zip(wanted, chosen, strict=True):
            try:
                w = _watts(smi.amdsmi_get_power_info(h))
            except smi.AmdSmiException as exc:
                raise self._fail(f"GPU {dev!r} gives neither energy nor power ({exc})") from None
            if w is None:
                raise self._fail(f"GPU {dev!r} reports power as N/A and has no energy counter")

    def read(self) -> list[Sample]:
        smi = self._smi
        if smi is None:
            raise RuntimeError("amdsmi source read before open")
        out: list[Sample] = []
        err: Exception | None = None
        for i, h in enumerate(self._handles):
            t0 = now_ns()
            try:
                if self.kind == "energy_counter":
                    d = smi.amdsmi_get_energy_count(h)
                    value: float | None = _accumulator(d) * float(d["counter_resolution"]) * 1e-6
                else:
                    value = _watts(smi.amdsmi_get_power_info(h))
            except smi.AmdSmiException as exc:
                err = exc
                continue
            t1 = now_ns()
            if value is not None:
                out.append(Sample(i, stamp_between(t0, t1), value))
        if err is not None and not out:
            raise OSError(f"AMD SMI read failed: {err}")
        return out

    def close(self) -> None:
        smi, self._smi = self._smi, None
        if smi is not None:
            with contextlib.suppress(smi.AmdSmiException):
                smi.amdsmi_shut_down()
