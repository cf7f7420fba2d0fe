"""A probe over an agent trace reports three prefix-cache hit rates side by side: the ideal
from the trace's block hashes, the engine's own (``/metrics``: vLLM's prefix-cache counters,
which the simulator serves) and the client's (``usage.prompt_tokens_details.cached_tokens``).

End to end over HTTP on 127.0.0.1: ``tokenwatt sim`` in its own process, ``tokenwatt probe``
against its URL, figures read back from ``result.json``. The truths, worked by hand below:
the ideal of a generated agent workload, which an engine with room for every block hits, and
a capped cache that cannot hold one conversation's blocks across another's long prompt and
so hits nothing. (The bundled sample's hit rates: tests/test_agent_traces.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from tokenwatt.cli import app

pytestmark = pytest.mark.timeout(120)

SPEC = """
name: agent-hit-rates
endpoint: {{url: "{url}", api: completions}}
model: {{source: qwen3-8b}}
hardware: {{accelerator: h100-sxm, gpus: 1}}
workload: {{trace: {{path: "{trace}", format: weka, time_scale: {scale}}}, seed: 0}}
slo: {{ttft_ms: 5000, tpot_ms: 500}}
search: {{probe: {{warmup_s: 0, min_duration_s: 60, min_requests: 1, max_duration_s: 60}}}}
server_metrics: {{interval_s: 0.1}}
"""


@contextmanager
def _tokenwatt_sim(*flags: str) -> Iterator[str]:
    """``tokenwatt sim`` on a free loopback port with prefix caching; its base URL."""
    cmd = [
        sys.executable, "-m", "tokenwatt", "sim", "--model", "qwen3-8b", "--accelerator",
        "h100-sxm", "--efficiency", "0.9", "--prefix-caching", "--port", "0", *flags,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"serving (http://127\.0\.0\.1:\d+)/v1", line)
        assert m, line + (proc.stderr.read() if proc.stderr else "")
        yield m.group(1)
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def _probe(tmp_path: Path, url: str, trace: Path, scale: float) -> dict[str, Any]:
    """One probe: the conversations one every 1 s × ``scale`` (``--rate`` in sessions/s),
    each at its traced pace × ``scale``."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(url=url, trace=trace, scale=scale))
    rate_rps = 1.0 / scale
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["probe", str(spec), "--rate", str(rate_rps), "--out", str(out)])
    assert res.exit_code == 0, res.output
    probe: dict[str, Any] = orjson.loads((out / "result.json").read_bytes())["probes"][-1]
    probe["terminal_output"] = res.output  # what the user read
    return probe


def _rates(probe: dict[str, Any]) -> tuple[float, float, float]:
    engine = probe["engine"]
    assert engine["unavailable"] is None, engine["unavailable"]
    return (
        probe["ideal_prefix_fraction"],
        engine["prefix_cache_hit_rate"],
        probe["cached_prompt_fraction"],
    )


# A generated agent workload (truth by construction): C conversations of K turns; turn k
# sends blocks 1..S + k·G of its conversation (64 tokens each) plus a TAIL-token partial
# block, so it resends turn k − 1's blocks and adds G; conversation c's turn k at 3k s.
C, K, S, G, TAIL, OUT = 6, 8, 20, 4, 30, 16


def _agent_folder(folder: Path) -> Path:
    folder.mkdir()
    for c in range(C):
        reqs = [
            {"t": 3.0 * k, "type": "s", "in": 64 * (S + k * G) + TAIL, "out": OUT,
             "hash_ids": list(range(1, S + k * G + 1))}
            for k in range(K)
        ]  # fmt: skip
        (folder / f"conv{c}.json").write_bytes(orjson.dumps({"requests": reqs}))
    return folder


def _agent_ideal() -> float:
    """By hand: turn k ≥ 1 finds turn k − 1's S + (k − 1)·G blocks (local ids: nothing is
    shared between conversations), turn 0 nothing."""
    hit = sum(64 * (S + (k - 1) * G) for k in range(1, K))
    prompt = sum(64 * (S + k * G) + TAIL for k in range(K))
    return hit / prompt  # the same for every conversation, so for all of them


def _truth_kv_bytes(url: str) -> float:
    """The simulator's ground truth: KV-cache bytes its decode steps read, so far."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^tokenwatt_sim_decode_kv_bytes_total (\S+)$", text, re.MULTILINE)
    assert m, "no tokenwatt_sim_decode_kv_bytes_total on the simulator's /metrics"
    return float(m.group(1))


@pytest.fixture(scope="module")
def agent_probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], float]:
    """48 WEKA-format requests replayed ten times faster than traced on a fresh engine with
    room for every block; the probe and the KV bytes the simulator's decodes read meanwhile."""
    tmp_path = tmp_path_factory.mktemp("agent")
    folder = _agent_folder(tmp_path / "trace")
    with _tokenwatt_sim("--max-model-len", "32768") as url:
        before = _truth_kv_bytes(url)
        probe = _probe(tmp_path, url, folder, scale=0.1)
        kv_read = _truth_kv_bytes(url) - before
    assert probe["requests_ok"] == C * K == probe["requests_counted"]
    return probe, kv_read


def test_large_cache_measures_the_ideal_from_the_hashes(
    agent_probe: tuple[dict[str, Any], float],
) -> None:
    """The engine's and the client's hit rates equal the hashes' ideal (the engine's within
    2 pt: its counters are cut at the window's edges by interpolating between scrapes, which
    can split the first request's zero-hit lookup)."""
    ideal, engine, client = _rates(agent_probe[0])
    print(f"agent set: ideal {ideal:.4f}, engine /metrics {engine:.4f}, client {client:.4f}")
    assert ideal == pytest.approx(_agent_ideal(), abs=1e-9)
    assert engine == pytest.approx(ideal, abs=0.02)
    assert client == pytest.approx(ideal, abs=0.002)
    shown = " ".join(agent_probe[0]["terminal_output"].replace("│", " ").split())
    line = f"ideal {ideal:.1%} · engine {engine:.1%} · client {client:.1%}"
    assert f"Prefix-cache hits {line}" in shown, shown


# Qwen3-8B's KV bytes per cached token, by hand from its config.json: K and V × 36 layers ×
# 8 KV heads × head dimension 128 × 2 bytes (bf16)
KV_BYTES_PER_TOKEN = 2 * 36 * 8 * 128 * 2


def test_mbu_kv_term_reads_the_cached_prefix_too(
    agent_probe: tuple[dict[str, Any], float],
) -> None:
    """81 % of these prompts are served from the cache, yet every generated token reads the
    KV of its whole context, the cached prefix included. By hand, with L the full prompt:
    MBU's mean context per output token is Σ (n·L + n(n − 1)/2) ÷ Σ n, its KV bytes per output
    token that × 147,456, and KV/s that × T. The simulator's own decode reads (its ground
    truth, token i ≥ 1 reading L + i, the first token coming from the prefill) are
    Σ Σᵢ₌₁ⁿ⁻¹ (L + i) × 147,456 over the 48 requests. Counting only the uncached part of L
    would read about a fifth of these."""
    probe, kv_read = agent_probe
    inputs = probe["mbu_detail"]["inputs"]
    prompts = [64 * (S + k * G) + TAIL for k in range(K)] * C
    context = sum(OUT * L + OUT * (OUT - 1) // 2 for L in prompts) / (OUT * len(prompts))
    assert inputs["mean_context_per_token"] == pytest.approx(context, rel=1e-12)
    assert inputs["kv_bytes_per_output_token"] == pytest.approx(KV_BYTES_PER_TOKEN * context)
    assert inputs["kv_bytes_per_s"] == pytest.approx(
        KV_BYTES_PER_TOKEN * context * inputs["output_tokens_per_s"]
    )
    truth = KV_BYTES_PER_TOKEN * sum(L + i for L in prompts for i in range(1, OUT))
    assert kv_read == pytest.approx(truth, rel=1e-9)
    uncached = [L - 64 * (S + (k - 1) * G) if k else L for k, L in enumerate(prompts[:K])] * C
    print(
        f"context per output token {context:.1f} (uncached part alone "
        f"{sum(OUT * u + OUT * (OUT - 1) // 2 for u in uncached) / (OUT * len(prompts)):.1f}); "
        f"simulator decode KV {kv_read:.4g} B, by hand {truth:.4g} B"
    )


def _two_conversations(folder: Path) -> Path:
    """A (t = 0: 20 blocks, 1280 tokens), B (t = 1 s: 2040 tokens, 8 out, 31 blocks), A again
    (t = 2 s: A's 20 blocks and one more, 1354 tokens). Ideal: A's second turn finds its 20
    blocks, 1280 of 1280 + 2040 + 1354 = 4674 prompt tokens (27.4 %)."""
    folder.mkdir()
    a = [
        {"t": 0.0, "type": "s", "in": 1280, "out": 2, "hash_ids": list(range(1, 21))},
        {"t": 2.0, "type": "s", "in": 1354, "out": 2, "hash_ids": list(range(1, 22))},
    ]
    b = [{"t": 0.0, "type": "s", "in": 2040, "out": 8, "hash_ids": list(range(1, 32))}]
    for name, reqs in (("a.json", a), ("b.json", b)):
        (folder / name).write_bytes(orjson.dumps({"requests": reqs}))
    return folder


@pytest.mark.parametrize(
    ("kv_blocks", "hit_tokens"),
    [
        # room for all: A's second turn hits its 1280 tokens, the ideal
        (None, 1280),
        # 128 blocks of 16 tokens (2048): B's 2040 + 8 tokens take every block, A's named
        # blocks are evicted before A returns, so nothing is hit (the rate falls to 0)
        (128, 0),
    ],
)
def test_capped_cache_falls_below_the_ideal_as_worked_by_hand(
    tmp_path: Path, kv_blocks: int | None, hit_tokens: int
) -> None:
    """The engine's hits fall inside the window, so its hit count is exact; its lookups may
    lose part of A's first (zero-hit) lookup at the window's start edge, so its rate lies
    between hits ÷ 4674 and hits ÷ (4674 − 1280)."""
    folder = _two_conversations(tmp_path / "trace")
    flags = ["--max-model-len", "2048"]
    if kv_blocks is not None:
        flags += ["--kv-cache-blocks", str(kv_blocks)]
    with _tokenwatt_sim(*flags) as url:
        probe = _probe(tmp_path, url, folder, scale=0.25)
    assert probe["requests_ok"] == 3
    ideal, engine, client = _rates(probe)
    print(f"cache {kv_blocks}: ideal {ideal:.4f}, engine {engine:.4f}, client {client:.4f}")
    assert ideal == pytest.approx(1280 / 4674, abs=1e-9)
    assert probe["engine"]["prefix_cache_hits"] == pytest.approx(hit_tokens, abs=0.5)
    assert hit_tokens / 4674 - 1e-9 <= engine <= hit_tokens / (4674 - 1280) + 1e-9
    assert client == pytest.approx(hit_tokens / 4674, abs=1e-9)
