"""The Redfish source against a real HTTP server on 127.0.0.1 serving Redfish JSON.

Documents follow the DMTF schemas: ``EnvironmentMetrics`` with ``PowerWatts``/
``EnergyJoules``/``EnergykWh`` sensor excerpts (``{"DataSourceUri", "Reading"}``), NVIDIA
HGX per-GPU resource paths, and the deprecated ``Power`` resource with
``PowerControl[].PowerConsumedWatts``. Basic auth is checked by the server.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power import PowerMonitor
from tokenwatt.power.redfish import RedfishPower

S = 1_000_000_000
USER, PASSWORD = "admin", "s3cr3t-Pa55word"
GPU = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{}/EnvironmentMetrics"
CHASSIS = "/redfish/v1/Chassis/1/EnvironmentMetrics"
LEGACY = "/redfish/v1/Chassis/1/Power"
KWH_ONLY = "/redfish/v1/Chassis/2/EnvironmentMetrics"


@dataclass
class Bmc:
    gpu_watts: list[float] = field(default_factory=lambda: [610.0, 590.0])
    node_watts: float = 2150.0
    auth: bool = True
    null_power: bool = False
    requests: int = 0

    def doc(self, path: str) -> dict[str, Any] | None:
        t = time.perf_counter_ns()
        for i, w in enumerate(self.gpu_watts):
            if path == GPU.format(i):
                return {
                    "@odata.id": path,
                    "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
                    "Id": "EnvironmentMetrics",
                    "Name": f"GPU_SXM_{i} Environment Metrics",
                    "PowerWatts": {"DataSourceUri": f"{path[:-19]}Sensors/Power", "Reading": w},
                    "EnergyJoules": {
                        "DataSourceUri": f"{path[:-19]}Sensors/Energy",
                        "Reading": 4.2e6 + w * t / S,
                    },
                }
        if path == CHASSIS:
            return {
                "@odata.id": path,
                "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
                "Id": "EnvironmentMetrics",
                "Name": "Chassis Environment Metrics",
                "TemperatureCelsius": {"Reading": 24.8},
                "PowerWatts": {
                    "DataSourceUri": "/redfish/v1/Chassis/1/Sensors/TotalPower",
                    "Reading": None if self.null_power else self.node_watts,
                },
                "PowerLimitWatts": {"SetPoint": 3000, "ControlMode": "Automatic"},
            }
        if path == LEGACY:
            return {
                "@odata.id": path,
                "@odata.type": "#Power.v1_7_1.Power",
                "Id": "Power",
                "PowerControl": [
                    {
                        "@odata.id": f"{path}#/PowerControl/0",
                        "MemberId": "0",
                        "Name": "System Power Control",
                        "PowerConsumedWatts": self.node_watts,
                        "PowerMetrics": {"IntervalInMin": 1, "AverageConsumedWatts": 2100},
                    }
                ],
            }
        if path == KWH_ONLY:
            return {"Id": "EnvironmentMetrics", "EnergykWh": {"Reading": 51234.5 + t / S / 3.6e6}}
        return None


def serve_bmc(state: Bmc, tls: ssl.SSLContext | None = None) -> tuple[ThreadingHTTPServer, str]:
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests += 1
            if state.auth and self.headers.get("Authorization") != expected:
                self.reply(401, {"error": {"code": "Base.1.8.NoValidSession"}})
                return
            doc = state.doc(self.path)
            if doc is None:
                self.reply(404, {"error": {"code": "Base.1.8.ResourceMissingAtURI"}})
            else:
                self.reply(200, doc)

        def reply(self, status: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}).start()
    return httpd, f"{scheme}://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def bmc() -> Iterator[tuple[Bmc, str]]:
    state = Bmc()
    httpd, url = serve_bmc(state)
    yield state, url
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("BMC_USER", USER)
    monkeypatch.setenv("BMC_PASSWORD", PASSWORD)
    return {"username_env": "BMC_USER", "password_env": "BMC_PASSWORD"}


def test_per_gpu_energy_joules_summed(bmc: tuple[Bmc, str], creds: dict[str, str]) -> None:
    _, url = bmc
    src = RedfishPower(
        url=url, paths=[GPU.format(0), GPU.format(1)], scope="gpu", interval_s=0.02, **creds
    )
    src.open()
    assert src.kind == "energy_counter" and src.unit == "J"
    assert src.detail.startswith("EnergyJoules @ ")
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.3)
        b = now_ns()
        rep = mon.energy(a, b)
        described = json.dumps(mon.describe())
    g = rep.scopes["gpu"]
    assert g.energy_j == pytest.approx(1200.0 * (b - a) / S, rel=0.02)
    assert g.devices == 2 and g.source == "redfish"
    # the password never leaves the request header
    assert PASSWORD not in described and PASSWORD not in json.dumps(rep.to_dict())


def test_chassis_power_watts_and_forced_reading(
    bmc: tuple[Bmc, str], creds: dict[str, str]
) -> None:
    _, url = bmc
    src = RedfishPower(url=url, paths=[CHASSIS], interval_s=0.02, **creds)
    src.open()
    assert src.kind == "power_sampler" and src.channels[0].scope == "node"
    forced = RedfishPower(
        url=url, paths=[GPU.format(0)], reading="PowerWatts", interval_s=0.02, **creds
    )
    forced.open()
    assert forced.kind == "power_sampler"
    with PowerMonitor([src, forced]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        time.sleep(0.1)
        rep = mon.energy(a, now_ns())
    assert rep.scopes["node"].mean_power_w == pytest.approx(2150.0)
    assert rep.sources[1].mean_power_w == pytest.approx(610.0)
    assert rep.primary_scope == "node"


def test_legacy_power_resource_and_kwh(bmc: tuple[Bmc, str], creds: dict[str, str]) -> None:
    _, url = bmc
    legacy = RedfishPower(url=url, paths=[LEGACY], **creds)
    legacy.open()
    assert legacy.detail.startswith("PowerConsumedWatts") and legacy.kind == "power_sampler"
    assert legacy.read()[0].value == 2150.0
    kwh = RedfishPower(url=url, paths=[KWH_ONLY], **creds)
    kwh.open()
    assert kwh.kind == "energy_counter" and kwh.unit == "kWh"
    assert any("coarse" in n for n in kwh.notes)
    assert kwh.read()[0].value == pytest.approx(51234.5 * 3.6e6, rel=1e-6)  # kWh → J


def test_wrong_password_names_the_variable_not_the_secret(
    bmc: tuple[Bmc, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = bmc
    monkeypatch.setenv("BMC_USER", USER)
    monkeypatch.setenv("BMC_PASSWORD", "wrong-" + PASSWORD)
    caplog.set_level(logging.DEBUG)
    src = RedfishPower(
        url=url, paths=[CHASSIS], username_env="BMC_USER", password_env="BMC_PASSWORD"
    )
    with pytest.raises(PowerSourceError) as err:
        src.open()
    msg = str(err.value)
    assert "refused the credentials (HTTP 401 Unauthorized)" in msg and "$BMC_USER" in msg
    assert PASSWORD not in msg and PASSWORD not in caplog.text
    assert PASSWORD not in json.dumps(src.describe())


def test_no_credentials_against_an_auth_bmc(bmc: tuple[Bmc, str]) -> None:
    _, url = bmc
    with pytest.raises(PowerSourceError, match="401"):
        RedfishPower(url=url, paths=[CHASSIS]).open()


def test_open_bmc_without_auth(bmc: tuple[Bmc, str]) -> None:
    state, url = bmc
    state.auth = False
    src = RedfishPower(url=url, paths=[CHASSIS])
    src.open()
    assert src.read()[0].value == 2150.0


def test_missing_env_var(bmc: tuple[Bmc, str], monkeypatch: pytest.MonkeyPatch) -> None:
    _, url = bmc
    monkeypatch.delenv("NO_SUCH_PW", raising=False)
    monkeypatch.setenv("BMC_USER", USER)
    src = RedfishPower(url=url, paths=[CHASSIS], username_env="BMC_USER", password_env="NO_SUCH_PW")
    with pytest.raises(PowerSourceError, match="environment variable NO_SUCH_PW is not set"):
        src.open()
    half = RedfishPower(url=url, paths=[CHASSIS], username_env="BMC_USER")
    with pytest.raises(PowerSourceError, match="give both username_env and password_env"):
        half.open()


def test_unreachable_missing_resource_and_no_reading(
    bmc: tuple[Bmc, str], creds: dict[str, str]
) -> None:
    _, url = bmc
    with pytest.raises(PowerSourceError, match=r"/redfish/v1/Nope did not answer \(HTTP 404"):
        RedfishPower(url=url, paths=["/redfish/v1/Nope"], **creds).open()
    with pytest.raises(PowerSourceError, match="no EnergyJoules, PowerWatts"):  # none in common
        RedfishPower(url=url, paths=[LEGACY, GPU.format(0)], **creds).open()
    with pytest.raises(PowerSourceError, match="has no EnergyJoules reading"):
        RedfishPower(url=url, paths=[CHASSIS], reading="EnergyJoules", **creds).open()
    dead = "http://127.0.0.1:9"  # discard port: nothing listens on loopback
    with pytest.raises(PowerSourceError, match="did not answer"):
        RedfishPower(url=dead, paths=[CHASSIS]).open()


def test_null_reading_mid_run_is_a_gap(bmc: tuple[Bmc, str], creds: dict[str, str]) -> None:
    state, url = bmc
    src = RedfishPower(url=url, paths=[CHASSIS], interval_s=0.01, **creds)
    src.open()
    with PowerMonitor([src]) as mon:
        assert mon.wait_ready(5.0)
        a = now_ns()
        state.null_power = True  # the BMC's sensor reads null for a while
        time.sleep(0.1)
        state.null_power = False
        time.sleep(0.1)
        b = now_ns()
        g = mon.energy(a, b).scopes["node"]
    assert "gap" in g.flags
    assert g.mean_power_w == pytest.approx(2150.0)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not found")
def test_https_bmc_with_a_self_signed_certificate(tmp_path: Path, creds: dict[str, str]) -> None:
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(crt)),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    httpd, url = serve_bmc(Bmc(), tls=ctx)
    try:
        with pytest.raises(PowerSourceError, match=r"VERIFY_FAILED.*set verify_tls: false"):
            RedfishPower(url=url, paths=[CHASSIS], **creds).open()
        src = RedfishPower(url=url, paths=[CHASSIS], verify_tls=False, **creds)
        src.open()  # BMCs ship self-signed certificates: verify_tls: false reads them
        assert src.read()[0].value == 2150.0
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Recorder(BaseHTTPRequestHandler):
    """Answers every GET with a Redfish document or a redirect; records Authorization headers."""

    seen: list[str | None]
    redirect_to: str | None

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        if self.redirect_to is not None and not self.path.startswith("/moved"):
            self.send_response(307)
            self.send_header("Location", self.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps({"PowerWatts": {"Reading": 500.0}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _recorder(redirect_to: str | None) -> tuple[ThreadingHTTPServer, type[_Recorder]]:
    handler = type("H", (_Recorder,), {"seen": [], "redirect_to": redirect_to})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}).start()
    return httpd, handler


def test_redirect_to_another_origin_never_gets_the_login(creds: dict[str, str]) -> None:
    """A BMC redirecting to another host:port: the login must not travel there."""
    elsewhere, seen_there = _recorder(None)
    other = f"http://127.0.0.1:{elsewhere.server_address[1]}"
    bmc, _ = _recorder(other)
    try:
        src = RedfishPower(
            url=f"http://127.0.0.1:{bmc.server_address[1]}", paths=[CHASSIS], **creds
        )
        with pytest.raises(PowerSourceError) as err:
            src.open()
        msg = str(err.value)
        assert "redirects to " + other + CHASSIS in msg and "another origin" in msg
        assert PASSWORD not in msg and "\n" not in msg
        assert seen_there.seen == []  # nothing, credentials or not, reached the other origin
    finally:
        for h in (bmc, elsewhere):
            h.shutdown()
            h.server_close()


def test_redirect_within_the_same_origin_is_followed(creds: dict[str, str]) -> None:
    bmc, handler = _recorder(None)
    base = f"http://127.0.0.1:{bmc.server_address[1]}"
    handler.redirect_to = base + "/moved"
    try:
        src = RedfishPower(url=base, paths=[CHASSIS], **creds)
        src.open()
        assert src.unit == "W" and len(handler.seen) == 2
        auth = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        assert handler.seen == [auth, auth]
    finally:
        bmc.shutdown()
        bmc.server_close()


def test_an_oversized_answer_is_refused_not_buffered(
    creds: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tokenwatt import httpget

    monkeypatch.setattr(httpget, "MAX_BODY_BYTES", 10)  # the document is ~30 bytes
    bmc, _ = _recorder(None)
    try:
        src = RedfishPower(
            url=f"http://127.0.0.1:{bmc.server_address[1]}", paths=[CHASSIS], **creds
        )
        with pytest.raises(PowerSourceError, match="answer larger than 10 bytes"):
            src.open()
    finally:
        bmc.shutdown()
        bmc.server_close()
