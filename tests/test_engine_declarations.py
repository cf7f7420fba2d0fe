"""The spec's engine declarations are checked before any load: a bad expert-load file or a
drafter that does not fit stops ``probe`` and ``bench`` with one line and exit 2 while a real
HTTP server on loopback counts the requests it received (none), and the file is read once."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import tokenwatt.spec.engine as engine_mod
from tokenwatt.cli.options import Flags, build_spec
from tokenwatt.errors import SpecError
from tokenwatt.geometry import load_geometry
from tokenwatt.spec import parse_spec


class _Counting(http.server.ThreadingHTTPServer):
    received = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers like an OpenAI server's /models; counts every request of any kind."""

    def _answer(self) -> None:
        assert isinstance(self.server, _Counting)
        self.server.received += 1
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Counting]:
    srv = _Counting(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _spec(url: str, engine: dict[str, Any]) -> dict[str, Any]:
    return {
        "endpoint": {"url": url} if url == "sim" else {"url": url, "model": "m"},
        "model": {"source": "qwen3-30b-a3b"},
        "hardware": {"accelerator": "h100-sxm", "gpus": 1},
        "workload": {"input_tokens": 64, "output_tokens": 16},
        "engine": engine,
    }


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip


def _bad_files(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name → (file, what the one line must say)."""
    broken = tmp / "broken.json"
    broken.write_text('{"counts": [[1, 2,')
    negative = tmp / "negative.json"
    negative.write_text(json.dumps({"counts": [[-1.0] * 128]}))
    shape = tmp / "shape.json"  # a 4-expert histogram for a 128-expert model
    shape.write_text(json.dumps({"counts": [[1, 2, 3, 4]]}))
    return {
        "missing": (tmp / "missing.json", "unreadable"),
        "broken": (broken, "unreadable"),
        "negative": (negative, "non-negative"),
        "shape": (shape, "one row per MoE layer"),
    }


@pytest.mark.parametrize("case", ["missing", "broken", "negative", "shape"])
def test_bad_expert_load_file_stops_probe_before_any_request(
    case: str, tmp_path: Path, server: _Counting
) -> None:
    path, says = _bad_files(tmp_path)[case]
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(url, {"expert_load_file": str(path)})))
    out = tmp_path / "out"
    res = _cli("probe", str(spec), "--rate", "2", "--duration", "2", "--out", str(out))
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and "engine.expert_load_file" in lines[0] and says in lines[0]
    assert "Traceback" not in res.stderr
    assert server.received == 0
    assert not out.exists()


@pytest.mark.parametrize("case", ["missing", "shape"])
def test_bad_expert_load_file_stops_bench_before_any_request(
    case: str, tmp_path: Path, server: _Counting
) -> None:
    path, says = _bad_files(tmp_path)[case]
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(url, {"expert_load_file": str(path)})))
    res = _cli("bench", str(spec), "--out", str(tmp_path / "out"))
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and "engine.expert_load_file" in lines[0] and says in lines[0]
    assert server.received == 0


def test_expert_load_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read when the spec is parsed; the window and every interval block reuse it (the load is
    built once per model shape)."""
    reads: list[str] = []
    real = engine_mod.read_expert_counts

    def counting(path: str | Path) -> list[list[float]]:
        reads.append(str(path))
        return real(path)

    monkeypatch.setattr(engine_mod, "read_expert_counts", counting)
    f = tmp_path / "load.json"
    f.write_text(json.dumps({"counts": [list(range(1, 129))]}))
    spec = parse_spec(_spec("http://127.0.0.1:9/v1", {"expert_load_file": str(f)}))
    assert len(reads) == 1
    g = load_geometry("qwen3-30b-a3b")
    loads = [spec.engine.expert_load(g) for _ in range(21)]  # a window and 20 blocks
    assert len(reads) == 1
    assert all(x is loads[0] for x in loads) and loads[0] is not None
    # a hand check of the file's routing: π_r = k · n_r / Σ n, here k = 8, n_r = r
    assert loads[0].inclusion[0, 127] == pytest.approx(8 * 128 / (128 * 129 / 2))
    # the command line's path (the file alone, then the flags laid over it): read once too
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        yaml.safe_dump(_spec("http://127.0.0.1:9/v1", {"expert_load_file": str(f)}))
    )
    reads.clear()
    built = build_spec(spec_file, Flags(sets=["slo.ttft_ms=500"]))
    assert built.engine.expert_load(g) is not None
    assert len(reads) == 1


def test_drafter_declarations_are_one_line_errors() -> None:
    base = _spec("sim", {})
    with pytest.raises(SpecError, match=r"engine\.drafter.*draft_model"):
        parse_spec({**base, "engine": {"drafter": {"method": "eagle3", "num_tokens": 3}}})
    with pytest.raises(SpecError, match=r"give sim\.speculative"):
        parse_spec({**base, "engine": {"drafter": {"method": "ngram", "num_tokens": 3}}})
    with pytest.raises(SpecError, match=r"different drafters"):
        parse_spec(
            {**base, "engine": {"drafter": {"method": "ngram", "num_tokens": 2}},
             "sim": {"speculative": "ngram:3:0.8"}}
        )  # fmt: skip
    one = parse_spec(
        {**base, "engine": {"drafter": {"method": "ngram", "num_tokens": 3}},
         "sim": {"speculative": "ngram:3:0.8"}}
    )  # fmt: skip
    assert one.engine.drafter is not None and one.engine.drafter.num_tokens == 3
    # an MTP drafter on a model without MTP layers is refused against the model, before load
    url = _spec("http://127.0.0.1:9/v1", {"drafter": {"method": "mtp", "num_tokens": 1}})
    with pytest.raises(SpecError, match=r"engine\.drafter: method mtp"):
        parse_spec(url).engine.check_against(load_geometry("qwen3-30b-a3b"))
