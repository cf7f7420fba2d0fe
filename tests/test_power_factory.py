"""open_power: from the spec's power section to a running monitor; the constant source;
failing sources with and without ``power.optional``."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.hardware import get_accelerator
from tokenwatt.power import NOT_MEASURED, open_power
from tokenwatt.power.constant import ConstantPower
from tokenwatt.spec import parse_spec
from tokenwatt.spec.power import PowerSection

S = 1_000_000_000
H100 = get_accelerator("h100-sxm")  # 700 W TDP


def section(**data: object) -> PowerSection:
    return PowerSection.model_validate(data)


@pytest.fixture
def sim_metrics() -> Iterator[str]:
    """A stand-in for the simulator's /metrics: its energy counter at 480 W, and neighbours."""
    t0 = time.perf_counter_ns()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            j = 480.0 * (time.perf_counter_ns() - t0) / S
            body = (
                "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                'vllm:num_requests_running{engine="0",model_name="toy"} 3.0\n'
                "# HELP tokenwatt_sim_energy_joules_total Energy of all GPUs of the node, J\n"
                "# TYPE tokenwatt_sim_energy_joules_total counter\n"
                f"tokenwatt_sim_energy_joules_total {j!r}\n"
                "# HELP tokenwatt_sim_tokens_emitted_total Tokens emitted\n"
                "# TYPE tokenwatt_sim_tokens_emitted_total counter\n"
                "tokenwatt_sim_tokens_emitted_total 1234.0\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02})
    th.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
    httpd.shutdown()
    httpd.server_close()
    th.join()


def test_no_sources_and_a_simulator_reads_its_energy_counter(sim_metrics: str) -> None:
    with open_power(
        section(sample_interval_s=0.01), gpus=1, accelerator=H100, sim_metrics_url=sim_metrics
    ) as mon:
        assert [s.name for s in mon.sources] == ["sim"]
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.3)
        b = now_ns()
        rep = mon.energy(a, b)
    g = rep.scopes["gpu"]
    assert g.source == "sim" and g.kind == "energy_counter" and g.measured
    assert g.source_detail.startswith("tokenwatt_sim_energy_joules_total @ http://127.0.0.1:")
    assert g.energy_j == pytest.approx(480.0 * (b - a) / S, rel=0.02)
    assert rep.measured and rep.warnings == ()


def test_no_sources_without_a_simulator_is_not_measured() -> None:
    with open_power(section(), gpus=8, accelerator=H100, sim_metrics_url=None) as mon:
        rep = mon.energy(0, S)
    assert not rep.measured and rep.primary is None and NOT_MEASURED in rep.warnings
    assert not mon.measured


def test_constant_tdp_is_modelled_never_measured() -> None:
    spec = section(sources=[{"kind": "constant"}], sample_interval_s=0.01)
    with open_power(spec, gpus=8, accelerator=H100, sim_metrics_url=None) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.1)
        b = now_ns()
        rep = mon.energy(a, b)
    g = rep.scopes["gpu"]
    assert g.energy_j == pytest.approx(8 * 700.0 * (b - a) / S, rel=1e-9)
    assert g.source == "constant" and not g.measured and "modelled" in g.flags
    assert not g.valid and not rep.measured
    assert any("TDP of NVIDIA H100 SXM" in n and "modelled" in n for n in g.notes)
    assert g.to_dict()["modelled"] is True


def test_constant_stated_watts_and_missing_tdp() -> None:
    src = ConstantPower(gpus=2, watts_per_gpu=350.0)
    src.open()
    assert [s.value for s in src.read()] == [350.0, 350.0]
    assert src.detail == "350 W per GPU (stated in the spec) × 2"
    tpu = get_accelerator("tpu-v5e")
    with pytest.raises(
        PowerSourceError, match="tpu-v5e has no TDP in the catalog; set watts_per_gpu"
    ):
        ConstantPower(gpus=4, accelerator=tpu)


def test_missing_library_stops_the_run_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    spec = section(sources=[{"kind": "constant"}, {"kind": "nvml"}])
    closed: list[str] = []
    monkeypatch.setattr(ConstantPower, "close", lambda self: closed.append("constant"))
    with pytest.raises(PowerSourceError) as err:
        open_power(spec, gpus=1, accelerator=H100, sim_metrics_url=None)
    msg = str(err.value)
    assert msg == (
        "power source nvml (power.sources[1]): nvidia-ml-py is not installed; "
        "pip install 'tokenwatt[nvidia]'"
    )
    assert closed == ["constant"]  # what was opened before the failure is released


def test_optional_power_skips_failing_sources_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    spec = section(
        optional=True,
        sources=[
            {"kind": "nvml"},
            {"kind": "prometheus", "url": "http://127.0.0.1:9/metrics"},
            {"kind": "constant", "watts_per_gpu": 400},
        ],
        sample_interval_s=0.01,
    )
    with open_power(spec, gpus=1, accelerator=H100, sim_metrics_url=None) as mon:
        assert [s.name for s in mon.sources] == ["constant"]
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.05)
        rep = mon.energy(a, now_ns())
    assert len(rep.warnings) == 2
    assert "tokenwatt[nvidia]" in rep.warnings[0] and "skipped" in rep.warnings[0]
    assert "http://127.0.0.1:9/metrics did not answer" in rep.warnings[1]
    assert "power.optional" in caplog.text
    assert rep.scopes["gpu"].mean_power_w == pytest.approx(400.0)


def test_everything_optional_failing_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    spec = section(optional=True, sources=[{"kind": "amdsmi"}])
    with open_power(spec, gpus=1, accelerator=None, sim_metrics_url=None) as mon:
        rep = mon.energy(0, S)
    assert not rep.measured
    assert any("every power source failed" in w for w in rep.warnings)


def test_sim_kind_needs_the_simulator() -> None:
    with pytest.raises(PowerSourceError, match="use endpoint url: sim"):
        open_power(
            section(sources=[{"kind": "sim"}]), gpus=1, accelerator=H100, sim_metrics_url=None
        )


def test_power_section_from_a_spec_file_shape() -> None:
    spec = parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "endpoint": {"url": "sim"},
            "hardware": {"accelerator": "h100-sxm"},
            "power": {
                "sources": [
                    {"kind": "nvml", "devices": [0, "GPU-abc"]},
                    {
                        "kind": "prometheus",
                        "url": "http://node:9400/metrics",
                        "metric": "DCGM_FI_DEV_POWER_USAGE",
                        "labels": {"gpu": "0"},
                    },
                    {
                        "kind": "redfish",
                        "url": "https://bmc.example",
                        "paths": ["/redfish/v1/Chassis/1/EnvironmentMetrics"],
                        "username_env": "BMC_USER",
                        "password_env": "BMC_PASSWORD",
                    },
                    {"kind": "rapl", "domains": ["package-0", "dram"]},
                    {"kind": "constant", "watts_per_gpu": 500},
                ],
                "optional": True,
            },
        }
    )
    kinds = [s.kind for s in spec.power.sources]
    assert kinds == ["nvml", "prometheus", "redfish", "rapl", "constant"]
    from tokenwatt.errors import SpecError

    with pytest.raises(SpecError, match=r"power\.sources\.0\.prometheus\.url"):
        parse_spec(
            {
                "model": {"source": "x"},
                "endpoint": {"url": "sim"},
                "hardware": {"accelerator": "h100-sxm"},
                "power": {"sources": [{"kind": "prometheus", "url": "node:9400"}]},
            }
        )
