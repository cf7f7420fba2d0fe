"""URLs with ``user:password@`` work as HTTP basic auth on every HTTP surface, and no URL's
userinfo or query value reaches a message.

A real server on 127.0.0.1 refuses every request without the right ``Authorization`` (401)
and records what it was sent; each surface (the bounded GET itself, the engine's ``/metrics``
scraper, the Prometheus and Redfish power sources, a sweep server's health wait) is pointed at
it with the credentials in the URL only, and must get its answer. The password holds ``@``,
``:`` and a space (percent-escaped in the URL, as RFC 3986 requires)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tokenwatt import httpget
from tokenwatt.engine import EngineScraper
from tokenwatt.errors import PowerSourceError
from tokenwatt.load.server_proc import ServerFailedError, ServerProcess
from tokenwatt.power.prometheus import PrometheusPower
from tokenwatt.power.redfish import RedfishPower

USER, PASSWORD = "tw", "Pw@1: secret"
USERINFO = "tw:Pw%401%3A%20secret"
TOKEN = "QueryTok3n9"
METRICS = (
    "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="m"} 1234\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m"} 2\n'
    "# TYPE node_power_watts gauge\n"
    'node_power_watts{gpu="0"} 350.5\n'
)
REDFISH = {"PowerWatts": {"Reading": 2150.0}}


class AuthServer:
    """Answers only requests carrying basic auth for USER/PASSWORD; counts the others."""

    def __init__(self) -> None:
        want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        self.refused = 0
        self.served: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Authorization") != want:
                    outer.refused += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="t"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                outer.served.append(self.path)
                path = self.path.split("?")[0]
                if path == "/metrics":
                    body, kind = METRICS.encode(), "text/plain; version=0.0.4"
                elif path.startswith("/redfish/"):
                    body, kind = json.dumps(REDFISH).encode(), "application/json"
                else:
                    body, kind = b"ok", "text/plain"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]

    def url(self, path: str, *, auth: bool = True) -> str:
        who = f"{USERINFO}@" if auth else ""
        return f"http://{who}127.0.0.1:{self.port}{path}"


@pytest.fixture
def srv() -> Iterator[AuthServer]:
    s = AuthServer()
    t = threading.Thread(target=s.httpd.serve_forever, daemon=True)
    t.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_the_bounded_get_sends_userinfo_as_basic_auth(srv: AuthServer) -> None:
    assert httpget.get(srv.url("/health"), timeout_s=5) == b"ok"
    with pytest.raises(httpget.HttpError) as err:  # the control: the server does refuse
        httpget.get(srv.url("/health", auth=False), timeout_s=5)
    assert err.value.status == 401
    wrong = srv.url("/health").replace("secret", "guess")
    with pytest.raises(httpget.HttpError) as err:
        httpget.get(wrong, timeout_s=5)
    assert err.value.status == 401 and "guess" not in str(err.value)
    assert srv.refused == 2


def test_the_engine_scraper_reads_metrics_behind_basic_auth(srv: AuthServer) -> None:
    scraper = EngineScraper(srv.url("/metrics"), "vllm", interval_s=0).start()
    assert scraper.unavailable is None
    assert scraper.samples and "/metrics" in srv.served


def test_prometheus_power_behind_basic_auth_with_a_query_token(srv: AuthServer) -> None:
    url = srv.url(f"/metrics?k={TOKEN}")
    src = PrometheusPower(url=url, metric="node_power_watts")
    src.open()
    assert [s.value for s in src.read()] == [350.5]
    assert f"/metrics?k={TOKEN}" in srv.served  # the query reached the exporter
    assert TOKEN not in src.detail and PASSWORD not in src.detail and "secret" not in src.detail
    bad = PrometheusPower(url=srv.url(f"/metrics?k={TOKEN}", auth=False), metric="x")
    with pytest.raises(PowerSourceError) as err:
        bad.open()
    assert "401" in str(err.value) and TOKEN not in str(err.value)


def test_redfish_behind_basic_auth_from_the_url(srv: AuthServer) -> None:
    src = RedfishPower(url=srv.url(""), paths=["/redfish/v1/Chassis/1/EnvironmentMetrics"])
    src.open()
    assert [s.value for s in src.read()] == [2150.0]
    assert "secret" not in src.detail and "Pw" not in src.detail


def test_a_sweep_health_wait_behind_basic_auth(srv: AuthServer, tmp_path: Path) -> None:
    # the "server" is a sleeper; the health URL is the auth server's
    proc = ServerProcess(["sleep", "30"], tmp_path / "server.log", stop_timeout_s=2)
    proc.start()
    try:
        took = asyncio.run(proc.wait_healthy(srv.url("/health"), 10))
        assert took < 10 and "/health" in srv.served
        with pytest.raises(ServerFailedError) as err:  # refused: the cause shows no secret
            asyncio.run(proc.wait_healthy(srv.url("/health", auth=False) + "?t=" + TOKEN, 0.5))
        assert TOKEN not in err.value.cause
        wrong = srv.url("/health").replace("secret", "guessed")
        with pytest.raises(ServerFailedError) as err:
            asyncio.run(proc.wait_healthy(wrong, 0.5))
        assert "guessed" not in err.value.cause and "Pw" not in err.value.cause
    finally:
        proc.stop()


SIM_SECRETS = {"health": "HealthPw4421", "prom": "PromTok9931xyz", "metrics": "MetricsPw5512"}


def _sim_sweep(tmp_path: Path) -> Path:
    import sys

    import yaml

    s = SIM_SECRETS
    doc = {
        "name": "secrets",
        "server": {
            "command": "{python} -m tokenwatt sim --model llama-3.1-8b --accelerator h100-sxm "
            "--port {port} --served-model-name m",
            "health_url": f"http://tw:{s['health']}@127.0.0.1:{{port}}/health",
            "health_timeout_s": 60,
        },
        "vars": {"python": sys.executable},
        "points": [{"x": 1}],
        "set": {
            "endpoint.url": "http://127.0.0.1:{port}/v1",
            "server_metrics.url": f"http://tw:{s['metrics']}@127.0.0.1:{{port}}/metrics",
            "power.sources": [
                {
                    "kind": "prometheus",
                    "url": f"http://127.0.0.1:{{port}}/metrics?k={s['prom']}",
                    "metric": "tokenwatt_sim_energy_joules_total",
                    "interval_s": 0.1,
                }
            ],
        },
        "bench": {
            "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm", "gpus": 1},
            "server_metrics": {"engine": "vllm", "interval_s": 0.5},
            "workload": {"input_tokens": 64, "output_tokens": 16, "seed": 0},
            "slo": {"kind": "percentile", "percentile": 0.9, "ttft_ms": 300, "tpot_ms": 100},
            "search": {
                "max_probes": 2,
                "single_stream_requests": 2,
                "probe": {"warmup_s": 0.5, "min_duration_s": 2, "min_requests": 10,
                          "max_duration_s": 4, "drain_timeout_s": 3},
            },
        },
    }  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_no_url_secret_in_any_file_or_line_of_a_sweep(tmp_path: Path) -> None:
    """A whole sweep through the CLI (the simulator as the server): the health URL's password,
    the engine /metrics URL's password and the Prometheus power URL's query token are used
    (the point measures, its energy is read) and appear in no file the tool wrote (sweep.json,
    sweep.html, result.json, the Benchmark Reports, report.html, probes.csv, requests) and in
    no line it printed. The server's own log is the server's bytes and is not searched."""
    import os
    import subprocess
    import sys

    from tokenwatt.result import load_result
    from tokenwatt.sweep_result import load_sweep

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    cmd = [sys.executable, "-m", "tokenwatt", "sweep", str(_sim_sweep(tmp_path)), "-o", str(out)]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=180)
    sweep = load_sweep(out)
    assert [p.status for p in sweep.points] == ["ok"], proc.stdout[-2000:] + proc.stderr[-2000:]
    result = load_result(out / sweep.points[0].folder)
    probe = result.boundary or result.probes[-1]
    assert probe.energy is not None and probe.energy.energy_j > 0  # the ?k= URL was read
    assert probe.engine is not None and probe.engine.unavailable is None  # /metrics was
    folder = out / sweep.points[0].folder
    shown = subprocess.run(  # the point's terminal report and report.html, re-rendered
        [sys.executable, "-m", "tokenwatt", "report", str(folder)],
        check=True, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    written = [f for f in out.rglob("*") if f.is_file() and f.name != "server.log"]
    assert {"sweep.json", "sweep.html", "result.json", "report.html"} <= {f.name for f in written}
    texts = {str(f): f.read_bytes().decode("utf-8", "replace") for f in written}
    texts["terminal"] = proc.stdout + proc.stderr + shown.stdout + shown.stderr
    for name, secret in SIM_SECRETS.items():
        leaks = [where for where, text in texts.items() if secret in text]
        assert not leaks, f"the {name} secret is in {leaks}"
    assert "k=***" in texts[str(folder / "result.json")]


def test_a_secret_var_in_the_launch_line_and_a_server_log_is_hidden(tmp_path: Path) -> None:
    """A token passed on the command line (a var under a secret key) and a health password the
    server echoes into its log: neither in the point's launch line, cause or sweep.json."""
    from tokenwatt.load.sweep import run_sweep
    from tokenwatt.spec.sweep import SweepSpec

    token, password = "hf_S3cretT0kenValue", "EchoedPw991"
    bench = {
        "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
        "model": {"source": "qwen3-8b"},
        "hardware": {"accelerator": "h100-sxm"},
    }
    spec = SweepSpec.model_validate(
        {
            "name": "leaky",
            "server": {
                "command": "sh -c 'echo token {hf_token} password {pw}; exit 3'",
                "health_url": "http://tw:{pw}@127.0.0.1:{port}/health",
                "health_timeout_s": 5,
            },
            "vars": {"hf_token": token, "pw": password},
            "points": [{"n": 1}],
            "bench": bench,
        }
    )
    result = asyncio.run(run_sweep(spec, bench, tmp_path))
    (point,) = result.points
    assert point.status == "failed" and "exited with code 3" in (point.cause or "")
    assert "***" in (point.cause or "")  # the log tail was there, redacted
    shown = " ".join([*point.command, point.cause or "", (tmp_path / "sweep.json").read_text()])
    assert token not in shown and password not in shown
