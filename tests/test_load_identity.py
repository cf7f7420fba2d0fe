"""Whether an endpoint is the simulator, asked of real HTTP servers on loopback: the simulator
itself (its ``/version``), an engine-shaped server that answers like vLLM, one whose only sign is
its model card, and a port nobody listens on."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_sim_support import config, geometry
from tokenwatt.load.identity import server_identity
from tokenwatt.sim import start_sim_thread
from tokenwatt.sim.names import SIM_SERVER_NAME


def _server(pages: dict[str, object], asked: list[str] | None = None) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if asked is not None:
                asked.append(self.path)
            if self.path not in pages:
                self.send_error(404)
                return
            body = json.dumps(pages[self.path]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def vllm_like() -> Iterator[str]:
    cards = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}
    yield from _server({"/version": {"version": "0.11.0"}, "/v1/models": cards})


@pytest.fixture
def card_only() -> Iterator[str]:
    cards = {"object": "list", "data": [{"id": "m", "owned_by": SIM_SERVER_NAME}]}
    yield from _server({"/v1/models": cards})


def test_the_simulator_names_itself_by_its_version() -> None:
    with start_sim_thread(config(geometry(name="toy"))) as sim:
        found = server_identity(sim.url, SIM_SERVER_NAME)
    assert found is not None and found.startswith("tokenwatt-sim ")


def test_an_engine_answering_like_vllm_is_not_the_simulator(vllm_like: str) -> None:
    assert server_identity(vllm_like, SIM_SERVER_NAME) is None


def test_the_model_card_alone_is_enough(card_only: str) -> None:
    assert server_identity(card_only, SIM_SERVER_NAME) == "tokenwatt-sim (model card)"


def test_an_engine_claiming_no_owner_is_not_asked_for_version() -> None:
    """A stub or engine whose cards name no owner: one GET of its /models, nothing else."""
    asked: list[str] = []
    cards = {"object": "list", "data": [{"id": "m"}]}
    for url in _server({"/v1/models": cards, "/version": {"version": "tokenwatt-sim"}}, asked):
        assert server_identity(url, SIM_SERVER_NAME) is None
    assert asked == ["/v1/models"]


def test_nobody_listening_is_not_the_simulator() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert server_identity(f"http://127.0.0.1:{port}/v1", SIM_SERVER_NAME) is None
    assert server_identity("not a url", SIM_SERVER_NAME) is None


def test_an_identified_endpoint_is_simulated_in_every_view() -> None:
    """A result whose endpoint said it is the simulator (the spec names an URL, not ``sim``):
    the terminal headline, report.html, the Benchmark Report's stack and compare all say so."""
    import io
    from pathlib import Path

    from rich.console import Console

    from tokenwatt.report.br02_sections import br02_sections
    from tokenwatt.report.compare import compare_results
    from tokenwatt.report.html import render_html
    from tokenwatt.report.terminal import headline
    from tokenwatt.result import BenchResult

    golden = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"
    data = json.loads(golden.read_text("utf-8"))
    data["spec"]["endpoint"]["url"] = "http://127.0.0.1:8000/v1"
    data["target"] = {"kind": "endpoint", "base_url": "http://127.0.0.1:8000/v1"}
    plain = BenchResult.model_validate(data)
    data["target"]["server_identity"] = "tokenwatt-sim 0.1.0"
    found = BenchResult.model_validate(data)
    assert found.simulated and not plain.simulated

    def terminal(r: BenchResult) -> str:
        buf = io.StringIO()
        Console(file=buf, width=200).print(headline(r))
        return buf.getvalue()

    assert "SIMULATED" in terminal(found) and "SIMULATED" not in terminal(plain)
    assert render_html(found).count("SIMULATED") >= 3 and "SIMULATED" not in render_html(plain)
    assert found.boundary is not None and plain.boundary is not None
    tool = br02_sections(found, found.boundary)["stack"][0]["standardized"]["tool"]
    assert tool == "tokenwatt-sim"
    other = br02_sections(plain, plain.boundary)["stack"][0]["standardized"]["tool"]
    assert other != "tokenwatt-sim"
    assert compare_results([("a", found), ("b", plain)]).simulated == (True, False)
