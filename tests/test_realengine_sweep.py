"""A sweep over llama-server slots (``-np 1, 2, 4``) with the CI model: the server restarted
per point, a short bench at each, ``sweep.json`` and ``sweep.html``. The points' ordering by
the client's figures is checked against llama-server's own counters (its /metrics over the
same windows), not against what more slots should do: a pair is ordered when the client's
figures differ by more than both windows' client-vs-engine allowances (tolerance + edge)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from test_realengine import ALIAS, find_gguf, find_server
from tokenwatt.load.sweep import run_sweep
from tokenwatt.report.sweep_html import write_sweep_html
from tokenwatt.result import load_result
from tokenwatt.spec.sweep import SweepSpec

pytestmark = [pytest.mark.realengine, pytest.mark.timeout(600)]

SLOTS = [1, 2, 4]
# client B and engine B agree within 5 % plus the window's edge (engine.AGREEMENT_TOLERANCES);
# closer than this two points' client B are a tie the order need not resolve
B_TIE = 0.1


def test_sweep_over_llama_server_slots(tmp_path: Path) -> None:
    server, gguf = find_server(), find_gguf()
    if server is None or gguf is None:
        pytest.skip("llama-server or the CI GGUF not found: run .ci/setup-realengine")
    bench = {
        "endpoint": {"url": "http://127.0.0.1:1/v1", "api": "completions", "model": ALIAS},
        "model": {"source": str(gguf)},
        "hardware": {"accelerator": "h100-sxm", "price_per_gpu_hour": 1.0},
        "server_metrics": {"engine": "llamacpp", "interval_s": 0.25},
        "workload": {"input_tokens": 24, "output_tokens": 24, "ignore_eos": True, "seed": 3},
        "slo": {"kind": "percentile", "percentile": 0.9, "ttft_ms": 4000, "tpot_ms": 400},
        # one probe per point, above what the CPU serves: T is each configuration's capacity
        "search": {
            "start_rate_rps": 3.0, "growth": 2.0, "precision": 0.5, "max_probes": 1,
            "single_stream_requests": 0,
            "probe": {"warmup_s": 0.5, "min_duration_s": 5, "min_requests": 4,
                      "max_duration_s": 6, "drain_timeout_s": 20, "early_stop": False},
        },
    }  # fmt: skip
    spec = SweepSpec.model_validate(
        {
            "name": "llama-slots",
            "server": {
                "command": "{server} -m {gguf} --host 127.0.0.1 --port {port} -c 4096 "
                "-np {slots} -cb -t 1 --alias {alias} --no-jinja --chat-template gemma --metrics",
                "health_url": "http://127.0.0.1:{port}/health",
                "health_timeout_s": 60,
            },
            "vars": {"server": str(server), "gguf": str(gguf), "alias": ALIAS},
            "grid": {"slots": SLOTS},
            "bench": bench,
            "set": {"endpoint.url": "http://127.0.0.1:{port}/v1"},
        }
    )
    out = tmp_path / "sweep"
    result = asyncio.run(run_sweep(spec, bench, out))
    assert [p.status for p in result.points] == ["ok"] * 3, [p.cause for p in result.points]
    html = write_sweep_html([out], out)
    assert "<svg" in html.read_text() or "No point met the SLO" in html.read_text()

    client, engine, tol, batch = [], [], [], []
    for p in result.points:
        assert (out / p.log_file).stat().st_size > 0
        r = load_result(out / p.folder)
        probe = r.boundary or max(r.probes, key=lambda s: s.output_tokens_per_s)
        e = probe.engine
        assert e is not None and e.generated_tokens_per_s, e
        assert p.command[p.command.index("-np") + 1] == str(p.settings["slots"])
        t = next(a for a in e.agreements if a.figure == "T")
        assert t.ok, t  # each point's T is the server's own, within the window's edge allowance
        client.append(probe.output_tokens_per_s)
        engine.append(e.generated_tokens_per_s)
        tol.append(t.tolerance)
        assert probe.batch_per_replica is not None and e.batch_per_replica is not None
        batch.append((probe.batch_per_replica, e.batch_per_replica))
    # every pair the client tells apart beyond both windows' allowances, the engine orders alike
    for i, j in itertools.combinations(range(len(SLOTS)), 2):
        if abs(client[i] - client[j]) > tol[i] * client[i] + tol[j] * client[j]:
            assert (client[i] > client[j]) == (engine[i] > engine[j]), (client, engine, tol)
    # the batch each configuration ran (client: B = T·τ; engine: busy slots per decode call,
    # its own counters) orders the points alike wherever the client's B differ by over B_TIE
    for i, j in itertools.combinations(range(len(SLOTS)), 2):
        (ci, ei), (cj, ej) = batch[i], batch[j]
        if abs(ci - cj) > B_TIE * max(ci, cj):
            assert (ci > cj) == (ei > ej), batch
