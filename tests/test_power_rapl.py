"""The RAPL source against a temporary powercap sysfs tree laid out like the kernel's.

``/sys/class/powercap`` holds the control type ``intel-rapl`` and one flat entry per zone:
``intel-rapl:N`` (package-N) and ``intel-rapl:N:M`` (core, uncore, dram), each with
``name``, ``energy_uj`` and ``max_energy_range_uj``; some Intel CPUs add
``intel-rapl-mmio:0``, a second view of package 0.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from pathlib import Path

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power import PowerMonitor
from tokenwatt.power.rapl import RaplPower

S = 1_000_000_000
RANGE_UJ = 262_143_328_850  # a real package's max_energy_range_uj


def zone(root: Path, zid: str, name: str, energy_uj: int, range_uj: int = RANGE_UJ) -> Path:
    d = root / zid
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{range_uj}\n")
    (d / "enabled").write_text("1\n")
    return d


def write(path: Path, value_uj: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{value_uj}\n")
    os.replace(tmp, path)  # readers see the old or the new value, never half of one


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "powercap"
    (root / "intel-rapl").mkdir(parents=True)  # the control type, not a zone
    zone(root, "intel-rapl:0", "package-0", 1_000_000)
    zone(root, "intel-rapl:0:0", "core", 500_000)
    zone(root, "intel-rapl:0:1", "uncore", 100_000)
    zone(root, "intel-rapl:0:2", "dram", 200_000, range_uj=65_532_610_987)
    zone(root, "intel-rapl:1", "package-1", 3_000_000)
    zone(root, "intel-rapl:1:0", "dram", 400_000, range_uj=65_532_610_987)
    zone(root, "intel-rapl-mmio:0", "package-0", 1_000_000)
    return root


def test_discovers_packages_and_dram(sysfs: Path) -> None:
    src = RaplPower(root=str(sysfs))
    src.open()
    assert [(c.device, c.scope) for c in src.channels] == [
        ("package-0", "cpu"),
        ("dram-0", "dram"),
        ("package-1", "cpu"),
        ("dram-1", "dram"),
    ]
    assert src.channels[0].wrap_j == pytest.approx(262_143.32885)
    assert src.kind == "energy_counter" and src.unit == "uJ"
    assert [s.value for s in src.read()] == pytest.approx([1.0, 0.2, 3.0, 0.4])


def test_wraparound_is_added_back_exactly(tmp_path: Path) -> None:
    root = tmp_path / "pc"
    pkg = zone(root, "intel-rapl:0", "package-0", 90_000_000, range_uj=100_000_000) / "energy_uj"
    src = RaplPower(root=str(root))
    src.open()
    mon = PowerMonitor([src])
    for v in (90_000_000, 98_000_000, 5_000_000, 20_000_000, 99_000_000, 1_000_000):
        write(pkg, v)
        mon.poll_once()
    pts = mon.readings()
    assert len(pts) == 6
    g = mon.energy(pts[0][0], pts[-1][0], wait=False).scopes["cpu"]
    # 8 + (wrap) 7 + 15 + 79 + (wrap) 2 = 111 J
    assert g.energy_j == pytest.approx(111.0)
    assert "counter_wrap" in g.flags and "counter_reset" not in g.flags


def test_counting_through_wraps_while_sampling(tmp_path: Path) -> None:
    # 250 W into a counter that wraps every 150 J (every 0.6 s): two or three wraps in a 1.5 s
    # window. A counter that drops by less than half its range reads as a reset
    # (power.integrate), so reads must come less than 0.3 s apart: a margin for stalls that a
    # loaded machine can give a thread (a 40 J range left it 80 ms).
    range_uj = 150_000_000
    root = tmp_path / "pc"
    f = zone(root, "intel-rapl:0", "package-0", 0, range_uj=range_uj) / "energy_uj"
    t0 = time.perf_counter_ns()
    written = [(t0, 0)]  # (when the writer took its time, the µJ it wrote before the modulus)
    stop = threading.Event()

    def writer() -> None:  # the "CPU": refreshes its counter every ~2 ms, like RAPL's ~1 ms
        while not stop.is_set():
            t = time.perf_counter_ns()
            uj = int(250.0 * (t - t0) / 1e3)
            write(f, uj % range_uj)
            written.append((t, uj))
            time.sleep(0.002)

    w = threading.Thread(target=writer)
    w.start()
    try:
        src = RaplPower(root=str(root), poll_interval_s=0.01)
        src.open()
        with PowerMonitor([src]) as mon:
            assert mon.wait_ready(5.0)
            a = now_ns()
            time.sleep(1.5)
            b = now_ns()
            g = mon.energy(a, b).scopes["cpu"]
            pts = mon.readings()
    finally:
        stop.set()
        w.join()
    assert "counter_wrap" in g.flags and "counter_reset" not in g.flags, g.flags
    assert g.energy_j is not None

    # A read returns what the writer last wrote, which load can leave tens of ms old. The
    # truth at the reads the monitor used: each value's unwrapped count and the time it was
    # taken, from the writer's own log (the nearest write of that value to the read).
    def truth(t_ns: int, value_j: float) -> tuple[int, int]:
        """(µJ unwrapped, staleness ns) of the read stamped ``t_ns`` that saw ``value_j``."""
        seen = [(t, uj) for t, uj in written if uj % range_uj == round(value_j * 1e6)]
        assert seen, f"{value_j} J was never written"
        tw, uj = min(seen, key=lambda s: abs(t_ns - s[0]))
        return uj, t_ns - tw

    ts = [t for t, _ in pts]
    expect_j, stale_ns = 0.0, []
    for edge, sign in ((a, -1), (b, 1)):
        k = bisect_right(ts, edge) - 1
        assert 0 <= k < len(pts) - 1, "each edge lies between two reads"
        (t_lo, v_lo), (t_hi, v_hi) = pts[k], pts[k + 1]
        (u_lo, s_lo), (u_hi, s_hi) = truth(t_lo, v_lo), truth(t_hi, v_hi)
        expect_j += sign * (u_lo + (u_hi - u_lo) * (edge - t_lo) / (t_hi - t_lo)) / 1e6
        stale_ns += [s_lo, s_hi]
    # every wrap added back and both edges interpolated between the reads: exact
    assert g.energy_j == pytest.approx(expect_j, rel=1e-9, abs=1e-6)
    # against 250 W × window: each edge is off by the staleness of its reads, interpolated,
    # so the window by at most 250 W × the spread of those staleness figures
    slack_j = 250.0 * (max(stale_ns) - min(stale_ns)) / S + 1e-5
    assert abs(g.energy_j - 250.0 * (b - a) / S) <= slack_j, (stale_ns, g.energy_j)


def test_chosen_domains(sysfs: Path) -> None:
    zone(sysfs, "intel-rapl:2", "psys", 7_000_000)
    src = RaplPower(root=str(sysfs), domains=["dram", "psys"])
    src.open()
    assert [(c.device, c.scope) for c in src.channels] == [
        ("dram-0", "dram"),
        ("dram-1", "dram"),
        ("psys", "node"),
    ]
    with pytest.raises(PowerSourceError, match="core/uncore are parts of package"):
        RaplPower(root=str(sysfs), domains=["package-0", "core"]).open()
    with pytest.raises(PowerSourceError, match="no zone named gpu; zones here: core, dram"):
        RaplPower(root=str(sysfs), domains=["gpu"]).open()


def test_no_powercap(tmp_path: Path) -> None:
    with pytest.raises(PowerSourceError) as err:
        RaplPower(root=str(tmp_path / "absent"), field="power.sources[3]").open()
    msg = str(err.value)
    assert msg.startswith("power source rapl (power.sources[3]): no RAPL zones under")
    assert "set root" in msg and "\n" not in msg


def test_unreadable_counter_says_how_to_fix(sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = sysfs / "intel-rapl:0" / "energy_uj"
    if os.geteuid() != 0:
        target.chmod(0o200)  # what CVE-2020-8694 kernels do: root-only
    else:  # root reads anything: refuse at the file system boundary instead
        real = Path.read_text

        def read_text(self: Path, *a: object, **k: object) -> str:
            if self == target:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *a, **k)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(PowerSourceError, match=r"permission denied.*run as root or `sudo chmod"):
        RaplPower(root=str(sysfs)).open()
