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
workload: {{trace: {{path: "{trace}", format: weka}}, seed: 0}}
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


def _probe(tmp_path: Path, url: str, trace: Path, rate_rps: float) -> dict[str, Any]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(url=url, trace=trace))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["probe", str(spec), "--rate", str(rate_rps), "--out", str(out)])
    assert res.exit_code == 0, res.output
    probe: dict[str, Any] = orjson.loads((out / "result.json").read_bytes())["probes"][-1]
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
C, K, S, G, TAIL = 6, 8, 20, 4, 30


def _agent_folder(folder: Path) -> Path:
    folder.mkdir()
    for c in range(C):
        reqs = [
            {"t": 3.0 * k, "type": "s", "in": 64 * (S + k * G) + TAIL, "out": 4,
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


def test_large_cache_measures_the_ideal_from_the_hashes(tmp_path: Path) -> None:
    """48 WEKA-format requests replayed at ten times their traced rate on a fresh engine with
    room for every block: the engine's and the client's hit rates equal the hashes' ideal
    (the engine's within 2 pt: its counters are cut at the window's edges by interpolating
    between scrapes, which can split the first request's zero-hit lookup)."""
    folder = _agent_folder(tmp_path / "trace")
    with _tokenwatt_sim("--max-model-len", "32768") as url:
        probe = _probe(tmp_path, url, folder, rate_rps=18.0)
    assert probe["requests_ok"] == C * K == probe["requests_counted"]
    ideal, engine, client = _rates(probe)
    print(f"agent set: ideal {ideal:.4f}, engine /metrics {engine:.4f}, client {client:.4f}")
    assert ideal == pytest.approx(_agent_ideal(), abs=1e-9)
    assert engine == pytest.approx(ideal, abs=0.02)
    assert client == pytest.approx(ideal, abs=0.002)


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
        probe = _probe(tmp_path, url, folder, rate_rps=4.0)
    assert probe["requests_ok"] == 3
    ideal, engine, client = _rates(probe)
    print(f"cache {kv_blocks}: ideal {ideal:.4f}, engine {engine:.4f}, client {client:.4f}")
    assert ideal == pytest.approx(1280 / 4674, abs=1e-9)
    assert probe["engine"]["prefix_cache_hits"] == pytest.approx(hit_tokens, abs=0.5)
    assert hit_tokens / 4674 - 1e-9 <= engine <= hit_tokens / (4674 - 1280) + 1e-9
    assert client == pytest.approx(hit_tokens / 4674, abs=1e-9)
