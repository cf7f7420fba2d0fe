"""The AMD SMI source against a stand-in ``amdsmi`` shaped like ROCm's Python package.

Same names and return shapes as ``amdsmi_interface.py``: ``amdsmi_get_energy_count`` returns
``{"energy_accumulator", "counter_resolution", "timestamp"}`` (the accumulator key was
``power`` before amdsmi 6.2.1), energy in µJ = accumulator × resolution;
``amdsmi_get_power_info`` returns watts or "N/A"; failures raise ``AmdSmiLibraryException``
with the library's status codes (AMDSMI_STATUS_NOT_SUPPORTED = 2).
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power import PowerMonitor
from tokenwatt.power.amdsmi import AmdSmiPower

S = 1_000_000_000
NOT_SUPPORTED = 2
INIT_ERROR = 18


@dataclass
class FakeAmdGpu:
    uuid: str
    watts: float
    resolution_uj: float = 15.259  # read at run time by the source, never assumed
    energy: bool = True  # False: a VM guest (energy count not supported)
    old_key: bool = False  # amdsmi < 6.2.1 returned the accumulator under "power"
    power: dict[str, Any] | None = None  # override amdsmi_get_power_info

    def ticks(self, t_ns: int) -> int:
        return round(self.watts * t_ns / 1e3 / self.resolution_uj)  # W·ns → µJ → ticks


class _Handle:  # stands for amdsmi_processor_handle
    def __init__(self, gpu: FakeAmdGpu) -> None:
        self.gpu = gpu


def fake_amdsmi(gpus: list[FakeAmdGpu], *, driver: bool = True) -> types.ModuleType:
    m = types.ModuleType("amdsmi")
    calls = {"init": 0, "shut_down": 0}
    m.calls = calls  # type: ignore[attr-defined]

    class AmdSmiRetCode(IntEnum):
        SUCCESS = 0
        ERR_INVAL = 1
        ERR_NOT_SUPPORTED = NOT_SUPPORTED
        INIT_ERROR = INIT_ERROR

    class AmdSmiException(Exception):  # noqa: N818 - amdsmi's own name
        pass

    class AmdSmiLibraryException(AmdSmiException):
        def __init__(self, err_code: int) -> None:
            super().__init__(err_code)
            self.err_code = abs(err_code)
            self.err_info = {
                NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
                INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
            }.get(self.err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred")

        def __str__(self) -> str:
            return f"An error occured with code: {self.err_code}({self.err_info})"

        def get_error_code(self) -> int:
            return self.err_code

    def amdsmi_init(flag: int = 2) -> None:  # AmdSmiInitFlags.INIT_AMD_GPUS
        if not driver:
            raise AmdSmiLibraryException(INIT_ERROR)
        calls["init"] += 1

    def amdsmi_shut_down() -> None:
        calls["shut_down"] += 1

    def amdsmi_get_processor_handles() -> list[_Handle]:
        return [_Handle(g) for g in gpus]

    def amdsmi_get_gpu_device_uuid(processor_handle: _Handle) -> str:
        return processor_handle.gpu.uuid

    def amdsmi_get_energy_count(processor_handle: _Handle) -> dict[str, Any]:
        g = processor_handle.gpu
        if not g.energy:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        key = "power" if g.old_key else "energy_accumulator"
        t = time.perf_counter_ns()
        return {key: g.ticks(t), "counter_resolution": g.resolution_uj, "timestamp": t // 1000}

    def amdsmi_get_power_info(processor_handle: _Handle) -> dict[str, Any]:
        g = processor_handle.gpu
        if g.power is not None:
            return dict(g.power)
        return {
            "current_socket_power": round(g.watts),
            "average_socket_power": "N/A",
            "gfx_voltage": 800,
            "soc_voltage": 900,
            "mem_voltage": 1100,
            "power_limit": 750_000_000,
        }

    for obj in (AmdSmiRetCode, AmdSmiException, AmdSmiLibraryException):
        setattr(m, obj.__name__, obj)
    for f in (
        amdsmi_init,
        amdsmi_shut_down,
        amdsmi_get_processor_handles,
        amdsmi_get_gpu_device_uuid,
        amdsmi_get_energy_count,
        amdsmi_get_power_info,
    ):
        setattr(m, f.__name__, f)
    return m


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeAmdGpu]]:
    devs = [FakeAmdGpu("uuid-mi300x-0", 550.0), FakeAmdGpu("uuid-mi300x-1", 720.0)]
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(devs))
    yield devs


def measure(src: AmdSmiPower, seconds: float = 0.15) -> tuple[float, Any]:
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(seconds)
        b = now_ns()
        return (b - a) / S, mon.energy(a, b).scopes["gpu"]


def test_energy_accumulator_times_resolution(gpus: list[FakeAmdGpu]) -> None:
    gpus[1].resolution_uj = 1.0  # each GPU's own resolution is used
    src = AmdSmiPower(poll_interval_s=0.005)
    src.open()
    assert src.kind == "energy_counter" and src.unit == "uJ"
    assert any("15.259 µJ" in n and "1 µJ" in n for n in src.notes)
    window_s, g = measure(src)
    assert g.energy_j == pytest.approx(1270.0 * window_s, rel=1e-3)
    assert g.per_device_j["1"] == pytest.approx(720.0 * window_s, rel=1e-3)
    assert sys.modules["amdsmi"].calls["shut_down"] == 1  # type: ignore[attr-defined]


def test_pre_621_key_is_understood(gpus: list[FakeAmdGpu]) -> None:
    for g in gpus:
        g.old_key = True
    src = AmdSmiPower(devices=[0], poll_interval_s=0.005)
    src.open()
    _, g = measure(src)
    assert g.mean_power_w == pytest.approx(550.0, rel=1e-3)


def test_vm_guest_without_counter_integrates_socket_power(gpus: list[FakeAmdGpu]) -> None:
    for g in gpus:
        g.energy = False
    gpus[1].power = {"socket_power": 700, "current_socket_power": "N/A"}  # ROCm 7 key
    src = AmdSmiPower(poll_interval_s=0.005)
    src.open()
    assert src.kind == "power_sampler" and src.unit == "W"
    assert any("NOT_SUPPORTED" in n for n in src.notes)
    _, g = measure(src)
    assert g.mean_power_w == pytest.approx(550.0 + 700.0, rel=1e-9)


def test_mi250_odd_die_reporting_zero_is_summed_harmlessly(monkeypatch: pytest.MonkeyPatch) -> None:
    even = FakeAmdGpu("gcd0", 500.0, energy=False)
    odd = FakeAmdGpu("gcd1", 0.0, energy=False, power={"current_socket_power": 0})
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi([even, odd]))
    src = AmdSmiPower(poll_interval_s=0.005)
    src.open()
    _, g = measure(src)
    assert g.mean_power_w == pytest.approx(500.0)
    assert g.devices == 2 and "missing_device" not in g.flags


def test_power_na_everywhere_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    g = FakeAmdGpu("x", 1.0, energy=False, power={"current_socket_power": "N/A"})
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi([g]))
    with pytest.raises(PowerSourceError, match="N/A and has no energy counter"):
        AmdSmiPower().open()


def test_device_selection(gpus: list[FakeAmdGpu]) -> None:
    src = AmdSmiPower(devices=["uuid-mi300x-1"])
    src.open()
    assert [c.device for c in src.channels] == ["uuid-mi300x-1"]
    src.close()
    with pytest.raises(PowerSourceError, match=r"GPU index 3 not found \(AMD SMI sees 2: 0..1\)"):
        AmdSmiPower(devices=[3]).open()
    with pytest.raises(PowerSourceError, match="GPU UUID nope not found; `amd-smi list`"):
        AmdSmiPower(devices=["nope"]).open()


def test_missing_package_and_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with pytest.raises(PowerSourceError, match=r"pip install 'tokenwatt\[amd\]'"):
        AmdSmiPower().open()
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi([], driver=False))
    with pytest.raises(PowerSourceError, match="INIT_ERROR") as err:
        AmdSmiPower(field="power.sources[2]").open()
    assert str(err.value).startswith("power source amdsmi (power.sources[2]): cannot start AMD SMI")
