"""The Prometheus source against a real HTTP server on 127.0.0.1 serving dcgm-exporter text.

The page is dcgm-exporter's format (HELP/TYPE lines, its label set, energy as an integer mJ
counter, power as a W gauge, other fields around them); values are exact functions of the
time the request is handled, optionally frozen per "collection interval" like the real
exporter, so window energy has a hand-computable answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power import PowerMonitor, ScopeEnergy
from tokenwatt.power.prometheus import PrometheusPower

S = 1_000_000_000


class Server:
    """A loopback HTTP server answering GET with ``render()`` → (status, body)."""

    def __init__(self, render: Callable[[str], tuple[int, str]]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                status, body = render(self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.requests = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class Dcgm:
    """State of a fake dcgm-exporter: GPUs' power, counter bases, collection interval."""

    watts: list[float]
    interval_s: float = 0.0  # 0: fresh values on every scrape
    base_mj: list[int] = field(default_factory=lambda: [987_654_321, 555_000_000])
    reset_ns: int | None = None  # exporter/driver restart: counters restart from 0
    hide_gpu: int | None = None
    status: int = 200

    def energy_mj(self, gpu: int, t_ns: int) -> int:
        if self.reset_ns is not None and t_ns >= self.reset_ns:
            return round(self.watts[gpu] * (t_ns - self.reset_ns) / 1e6)
        return self.base_mj[gpu] + round(self.watts[gpu] * t_ns / 1e6)

    def render(self, path: str) -> tuple[int, str]:
        if path != "/metrics":
            return 404, "404 page not found\n"
        if self.status != 200:
            return self.status, "error\n"
        t = time.perf_counter_ns()
        if self.interval_s > 0:
            step = int(self.interval_s * S)
            t = t // step * step
        lines = [
            "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
            "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
        ]
        lines += [f"DCGM_FI_DEV_SM_CLOCK{{{self.labels(i)}}} 1980" for i in self.gpus()]
        lines += [
            "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
            "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
        ]
        lines += [
            f"DCGM_FI_DEV_POWER_USAGE{{{self.labels(i)}}} {self.watts[i]:.3f}" for i in self.gpus()
        ]
        lines += [
            "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot "
            "(in mJ).",
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
        ]
        lines += [
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{self.labels(i)}}} {self.energy_mj(i, t)}"
            for i in self.gpus()
        ]
        lines += [
            "# HELP DCGM_FI_DEV_POWER_MGMT_LIMIT Power management limit (in W).",
            "# TYPE DCGM_FI_DEV_POWER_MGMT_LIMIT gauge",
        ]
        lines += [f"DCGM_FI_DEV_POWER_MGMT_LIMIT{{{self.labels(i)}}} 700" for i in self.gpus()]
        return 200, "\n".join(lines) + "\n"

    def gpus(self) -> list[int]:
        return [i for i in range(len(self.watts)) if i != self.hide_gpu]

    @staticmethod
    def labels(i: int) -> str:
        return (
            f'gpu="{i}",UUID="GPU-{i}1b2c3d4-0000-1111-2222-33334444555{i}",'
            f'pci_bus_id="00000000:{0x18 + i:02X}:00.0",device="nvidia{i}",'
            'modelName="NVIDIA H100 80GB HBM3",Hostname="node-7",'
            'DCGM_FI_DRIVER_VERSION="550.54.15"'
        )


@pytest.fixture
def dcgm() -> Iterator[tuple[Dcgm, Server]]:
    state = Dcgm(watts=[300.0, 450.0])
    srv = Server(state.render)
    yield state, srv
    srv.close()


def measure(src: PrometheusPower, seconds: float, **kw: float) -> tuple[float, ScopeEnergy]:
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(seconds)
        b = now_ns()
        return (b - a) / S, mon.energy(a, b, **kw).scopes["gpu"]


def test_dcgm_energy_counter_summed_over_gpus(dcgm: tuple[Dcgm, Server]) -> None:
    _, srv = dcgm
    src = PrometheusPower(
        url=srv.url, metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", interval_s=0.02
    )
    src.open()
    assert src.kind == "energy_counter" and src.unit == "mJ"
    assert [c.device for c in src.channels] == ["gpu=0", "gpu=1"]
    window_s, g = measure(src, 0.4)
    # each edge is known to within half a request's duration: a few ms of 750 W
    assert g.energy_j == pytest.approx(750.0 * window_s, rel=0.02)
    assert g.per_device_j["gpu=0"] == pytest.approx(300.0 * window_s, rel=0.02)
    assert g.devices == 2 and "partial" not in g.flags


def test_dcgm_power_gauge_and_label_filter(dcgm: tuple[Dcgm, Server]) -> None:
    _, srv = dcgm
    src = PrometheusPower(
        url=srv.url, metric="DCGM_FI_DEV_POWER_USAGE", labels={"gpu": "1"}, interval_s=0.02
    )
    src.open()
    assert src.kind == "power_sampler" and src.unit == "W" and len(src.channels) == 1
    assert "gpu=1" in src.detail
    _, g = measure(src, 0.2)
    assert g.mean_power_w == pytest.approx(450.0, rel=1e-9)


def test_collection_interval_shows_up_as_slow_updates(dcgm: tuple[Dcgm, Server]) -> None:
    state, srv = dcgm
    state.interval_s = 0.1  # values refresh every 100 ms however fast we scrape
    src = PrometheusPower(
        url=srv.url, metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", interval_s=0.01
    )
    src.open()
    window_s, g = measure(src, 0.6)
    assert g.update_period_s == pytest.approx(0.1, rel=0.3)
    assert "window_short" in g.flags  # 0.6 s < 10 × 0.1 s
    assert any("DCGM_EXPORTER_INTERVAL" in n for n in g.notes)
    # error bounded by about one refresh of 750 W at each edge
    assert g.energy_j == pytest.approx(750.0 * window_s, abs=2 * 750.0 * 0.1)


def test_exporter_restart_is_a_counter_reset(dcgm: tuple[Dcgm, Server]) -> None:
    state, srv = dcgm
    src = PrometheusPower(
        url=srv.url, metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", interval_s=0.01
    )
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        state.reset_ns = a + 100_000_000
        time.sleep(0.3)
        b = now_ns()
        g = mon.energy(a, b).scopes["gpu"]
    assert "counter_reset" in g.flags and g.coverage < 1
    assert g.energy_j == pytest.approx(750.0 * (b - a) / S, rel=0.05)


def test_vanished_series_is_partial_then_missing(dcgm: tuple[Dcgm, Server]) -> None:
    state, srv = dcgm
    src = PrometheusPower(
        url=srv.url, metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", interval_s=0.01
    )
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.15)
        state.hide_gpu = 1  # GPU 1's series disappears from the page
        time.sleep(0.15)
        b = now_ns()
        time.sleep(0.1)
        c = now_ns()
        early = mon.energy(a, b).scopes["gpu"]
        late = mon.energy(b + 60_000_000, c).scopes["gpu"]
    assert "partial" in early.flags and early.energy_j is not None
    assert early.energy_j == pytest.approx(750.0 * (b - a) / S, rel=0.05)  # filled at mean W
    assert "missing_device" in late.flags and late.energy_j is None
    assert late.per_device_j["gpu=0"] is not None


def test_failing_scrapes_are_counted_not_raised(dcgm: tuple[Dcgm, Server]) -> None:
    state, srv = dcgm
    src = PrometheusPower(url=srv.url, metric="DCGM_FI_DEV_POWER_USAGE", interval_s=0.01)
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        state.status = 500
        time.sleep(0.1)
        state.status = 200
        time.sleep(0.1)
        b = now_ns()
        g = mon.energy(a, b).scopes["gpu"]
        info = mon.describe()["sources"][0]
    assert {"read_errors", "gap"} <= set(g.flags)
    assert info["read_errors"] >= 3 and "HTTP 500" in info["last_error"]
    assert g.mean_power_w == pytest.approx(750.0)  # a constant gauge bridges the gap exactly


def test_unreachable_url_fails_in_one_line() -> None:
    srv = Server(lambda p: (200, ""))
    url = srv.url
    srv.close()  # nothing listens there any more
    src = PrometheusPower(url=url, metric="DCGM_FI_DEV_POWER_USAGE", field="power.sources[1]")
    with pytest.raises(PowerSourceError) as err:
        src.open()
    msg = str(err.value)
    assert msg.startswith("power source prometheus (power.sources[1]): " + url + " did not answer")
    assert "\n" not in msg


def test_wrong_path_missing_metric_and_garbage(dcgm: tuple[Dcgm, Server]) -> None:
    _, srv = dcgm
    with pytest.raises(PowerSourceError, match=r"did not answer \(HTTP 404 Not Found\)"):
        PrometheusPower(url=srv.url + "x", metric="DCGM_FI_DEV_POWER_USAGE").open()
    with pytest.raises(PowerSourceError) as err:
        PrometheusPower(url=srv.url, metric="DCGM_FI_DEV_POWER_USAGE_INSTANT").open()
    assert "has no series DCGM_FI_DEV_POWER_USAGE_INSTANT" in str(err.value)
    assert "similar metrics there: DCGM_FI_DEV_POWER_MGMT_LIMIT" in str(err.value)
    with pytest.raises(PowerSourceError, match="has no series"):
        PrometheusPower(url=srv.url, metric="DCGM_FI_DEV_POWER_USAGE", labels={"gpu": "7"}).open()
    junk = Server(lambda p: (200, "DCGM_FI_DEV_POWER_USAGE{gpu=0 oops\n"))
    try:
        with pytest.raises(PowerSourceError, match="did not serve Prometheus text"):
            PrometheusPower(url=junk.url, metric="DCGM_FI_DEV_POWER_USAGE").open()
    finally:
        junk.close()


def test_custom_metric_needs_a_unit_and_a_matching_type() -> None:
    page = (
        "# HELP node_psu_input_power Input power.\n# TYPE node_psu_input_power gauge\n"
        'node_psu_input_power{psu="1"} 812.5\nnode_psu_input_power{psu="2"} 790\n'
    )
    srv = Server(lambda p: (200, page))
    try:
        with pytest.raises(PowerSourceError, match="cannot tell the unit of node_psu_input_power"):
            PrometheusPower(url=srv.url, metric="node_psu_input_power").open()
        with pytest.raises(PowerSourceError, match="unit J does not fit a power sampler"):
            PrometheusPower(url=srv.url, metric="node_psu_input_power", unit="J").open()
        src = PrometheusPower(
            url=srv.url, metric="node_psu_input_power", unit="W", scope="wall", interval_s=0.01
        )
        src.open()
        assert [c.device for c in src.channels] == ["psu=1", "psu=2"]
        with PowerMonitor([src]) as mon:
            assert mon.wait_ready(5.0)
            a = now_ns()
            time.sleep(0.1)
            rep = mon.energy(a, now_ns())
        assert rep.scopes["wall"].mean_power_w == pytest.approx(1602.5)
        assert rep.primary_scope == "wall"
    finally:
        srv.close()


def test_joules_counter_named_with_total(dcgm: tuple[Dcgm, Server]) -> None:
    # OpenMetrics-style counter: the family is declared without _total, the sample has it
    t0 = time.perf_counter_ns()
    page = lambda p: (  # noqa: E731
        200,
        "# HELP node_energy_joules Energy.\n# TYPE node_energy_joules counter\n"
        f"node_energy_joules_total {(time.perf_counter_ns() - t0) * 200 / S:.6f}\n"
        "node_energy_joules_created 1.7e9\n",
    )
    srv = Server(page)
    try:
        src = PrometheusPower(url=srv.url, metric="node_energy_joules_total", interval_s=0.01)
        src.open()
        assert src.kind == "energy_counter" and src.unit == "J"
        assert [c.device for c in src.channels] == ["total"]
        window_s, g = measure(src, 0.3)
        assert g.energy_j == pytest.approx(200.0 * window_s, rel=0.02)
    finally:
        srv.close()
