"""The NVML source against a stand-in ``pynvml`` shaped like nvidia-ml-py's.

The fake keeps nvidia-ml-py's names, signatures, return types and units (energy: int mJ
since driver load; power: int mW), its error class ``NVMLError`` whose constructor maps a
code to a subclass (``NVMLError_NotSupported`` …) and its numeric codes. A device's energy
is an exact function of the time of the call, so window energy has an exact answer.
"""

from __future__ import annotations

import string
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power import PowerMonitor
from tokenwatt.power.nvml import NvmlPower

S = 1_000_000_000

# nvidia-ml-py's codes (pynvml.py)
CODES = {
    "NVML_SUCCESS": 0,
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_ALREADY_INITIALIZED": 5,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_UNKNOWN": 999,
}
STRINGS = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    6: "Not Found",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    15: "GPU is lost",
}


@dataclass
class FakeGpu:
    name: str
    uuid: str
    watts: float
    energy_counter: bool = True  # Volta and newer
    base_mj: int = 123_456_789  # energy since driver load before the test
    reset_at_ns: int | None = None  # driver reload: the counter restarts from 0
    lost: bool = False

    def energy_mj(self, t_ns: int) -> int:
        if self.reset_at_ns is not None and t_ns >= self.reset_at_ns:
            return round(self.watts * (t_ns - self.reset_at_ns) / 1e6)
        return self.base_mj + round(self.watts * t_ns / 1e6)


class _Handle:  # stands for c_nvmlDevice_t: opaque to the caller
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu


def _nvml_errors(m: types.ModuleType) -> type[Exception]:
    """pynvml's NVMLError with its per-code subclasses (``NVMLError(code)`` returns the
    subclass, as the real one does), set on ``m``."""

    class NVMLError(Exception):
        _valClassMapping: ClassVar[dict[int, type]] = {}  # noqa: N815 - pynvml's own name

        def __new__(cls, value: int) -> NVMLError:
            typ = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
            obj = Exception.__new__(typ)
            obj.value = value  # type: ignore[attr-defined]
            return obj

        def __str__(self) -> str:
            return STRINGS.get(self.value, f"NVML Error with code {self.value}")  # type: ignore[attr-defined]

    for name, code in CODES.items():
        if name.startswith("NVML_ERROR_"):
            cls_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace(
                "_", ""
            )

            def _new(cls: type, *args: Any, _code: int = code) -> Any:
                return NVMLError.__new__(cls, _code)

            sub = type(cls_name, (NVMLError,), {"__new__": _new})
            NVMLError._valClassMapping[code] = sub
            setattr(m, cls_name, sub)
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    return NVMLError


def fake_pynvml(gpus: list[FakeGpu], *, driver: bool = True) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    for k, v in CODES.items():
        setattr(m, k, v)
    state = {"init": 0, "shutdown": 0}
    m.state = state  # type: ignore[attr-defined]
    NVMLError = _nvml_errors(m)

    def need_init() -> None:
        if state["init"] <= state["shutdown"]:
            raise NVMLError(CODES["NVML_ERROR_UNINITIALIZED"])

    def nvmlInit() -> None:
        if not driver:
            raise NVMLError(CODES["NVML_ERROR_DRIVER_NOT_LOADED"])
        state["init"] += 1

    def nvmlShutdown() -> None:
        need_init()
        state["shutdown"] += 1

    def nvmlDeviceGetCount() -> int:
        need_init()
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
        need_init()
        if not 0 <= index < len(gpus):
            raise NVMLError(CODES["NVML_ERROR_INVALID_ARGUMENT"])
        return _Handle(gpus[index])

    def nvmlDeviceGetHandleByUUID(uuid: str) -> _Handle:
        need_init()
        for g in gpus:
            if g.uuid == uuid:
                return _Handle(g)
        raise NVMLError(CODES["NVML_ERROR_NOT_FOUND"])

    def nvmlDeviceGetName(handle: _Handle) -> str:
        need_init()
        return handle.gpu.name

    def nvmlDeviceGetUUID(handle: _Handle) -> str:
        need_init()
        return handle.gpu.uuid

    def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:
        need_init()
        if handle.gpu.lost:
            raise NVMLError(CODES["NVML_ERROR_GPU_IS_LOST"])
        if not handle.gpu.energy_counter:
            raise NVMLError(CODES["NVML_ERROR_NOT_SUPPORTED"])
        return handle.gpu.energy_mj(time.perf_counter_ns())

    def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
        need_init()
        if handle.gpu.lost:
            raise NVMLError(CODES["NVML_ERROR_GPU_IS_LOST"])
        return round(handle.gpu.watts * 1000)

    for f in (
        nvmlInit,
        nvmlShutdown,
        nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetHandleByUUID,
        nvmlDeviceGetName,
        nvmlDeviceGetUUID,
        nvmlDeviceGetTotalEnergyConsumption,
        nvmlDeviceGetPowerUsage,
    ):
        setattr(m, f.__name__, f)
    return m


H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeGpu]]:
    devs = [
        FakeGpu(H100, "GPU-00000000-aaaa-bbbb-cccc-000000000000", 400.0),
        FakeGpu(H100, "GPU-11111111-aaaa-bbbb-cccc-111111111111", 650.0),
    ]
    mod = fake_pynvml(devs)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    yield devs


def window(mon: PowerMonitor, seconds: float = 0.15) -> tuple[int, int]:
    assert mon.wait_ready(5.0)
    a = now_ns()
    time.sleep(seconds)
    return a, now_ns()


def test_energy_counter_of_all_gpus_is_summed(gpus: list[FakeGpu]) -> None:
    src = NvmlPower(poll_interval_s=0.005)
    src.open()
    assert src.kind == "energy_counter" and src.unit == "mJ"
    assert [c.device for c in src.channels] == ["0", "1"]
    assert all(c.scope == "gpu" for c in src.channels)
    with PowerMonitor([src]) as mon:
        a, b = window(mon)
        g = mon.energy(a, b).scopes["gpu"]
    assert g.energy_j == pytest.approx(1050.0 * (b - a) / S, rel=1e-3)  # ±1 mJ rounding
    assert g.per_device_j["1"] == pytest.approx(650.0 * (b - a) / S, rel=1e-3)
    assert sys.modules["pynvml"].state["shutdown"] == 1  # type: ignore[attr-defined]


def test_select_by_index_and_uuid(gpus: list[FakeGpu]) -> None:
    src = NvmlPower(devices=[gpus[1].uuid], poll_interval_s=0.005)
    src.open()
    assert [c.device for c in src.channels] == [gpus[1].uuid]
    assert H100 in src.detail
    with PowerMonitor([src]) as mon:
        a, b = window(mon)
        assert mon.energy(a, b).scopes["gpu"].mean_power_w == pytest.approx(650.0, rel=1e-3)
    one = NvmlPower(devices=[0])
    one.open()
    assert len(one.channels) == 1
    one.close()


def test_pre_volta_falls_back_to_integrated_power(gpus: list[FakeGpu]) -> None:
    for g in gpus:
        g.energy_counter = False  # NVML_ERROR_NOT_SUPPORTED on old GPUs
    src = NvmlPower(poll_interval_s=0.005)
    src.open()
    assert src.kind == "power_sampler" and src.unit == "mW"
    assert any("pre-Volta" in n for n in src.notes)
    with PowerMonitor([src]) as mon:
        a, b = window(mon)
        g = mon.energy(a, b).scopes["gpu"]
    assert g.kind == "power_sampler"
    assert g.mean_power_w == pytest.approx(1050.0, rel=1e-9)  # mW → W, constant power


def test_driver_reload_resets_the_counter_and_is_flagged(gpus: list[FakeGpu]) -> None:
    src = NvmlPower(devices=[0], poll_interval_s=0.005)
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        gpus[0].reset_at_ns = a + 50_000_000
        time.sleep(0.15)
        b = now_ns()
        g = mon.energy(a, b).scopes["gpu"]
    assert "counter_reset" in g.flags and not g.valid
    assert g.energy_j == pytest.approx(400.0 * (b - a) / S, rel=1e-2)  # dropped segment refilled


@pytest.mark.parametrize(
    ("devices", "needle"),
    [
        ([5], "GPU index 5 not found (this node has 2: 0..1)"),
        (["GPU-nope"], "GPU 'GPU-nope' not found (Not Found); `nvidia-smi -L`"),
        (["MIG-0f1e"], "MIG slice"),
    ],
)
def test_bad_devices_fail_in_one_line(
    gpus: list[FakeGpu], devices: list[int | str], needle: str
) -> None:
    src = NvmlPower(devices=devices, field="power.sources[0]")
    with pytest.raises(PowerSourceError) as err:
        src.open()
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and msg.startswith("power source nvml")
    state = sys.modules["pynvml"].state  # type: ignore[attr-defined]
    assert state["shutdown"] == state["init"]  # NVML released after the failure


def test_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml → ImportError
    with pytest.raises(PowerSourceError, match=r"pip install 'tokenwatt\[nvidia\]'"):
        NvmlPower().open()


def test_no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], driver=False))
    with pytest.raises(PowerSourceError, match="Driver Not Loaded"):
        NvmlPower().open()


def test_grace_superchip_is_module_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    gh = [FakeGpu("NVIDIA GH200 480GB", "GPU-gh200", 900.0)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gh))
    src = NvmlPower()
    src.open()
    assert src.channels[0].scope == "module"
    assert any("CPU+GPU module" in n for n in src.notes)
    src.close()
    forced = NvmlPower(scope="gpu")
    forced.open()
    assert forced.channels[0].scope == "gpu"
    forced.close()


def test_lost_gpu_reads_are_counted_not_raised(gpus: list[FakeGpu]) -> None:
    src = NvmlPower(poll_interval_s=0.005)
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        for g in gpus:
            g.lost = True
        time.sleep(0.1)
        b = now_ns()
        rep = mon.energy(a, b, max_wait_s=0.05)
        info = mon.describe()["sources"][0]
    assert info["read_errors"] > 0 and "GPU is lost" in info["last_error"]
    g = rep.scopes["gpu"]
    assert {"read_errors", "no_samples"} <= set(g.flags)  # lost for the whole window
    assert g.energy_j is None and not rep.measured
