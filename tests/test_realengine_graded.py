"""The graded slice against a real engine: llama.cpp's llama-server with Gemma 3 270M (the
server and model ``test_realengine`` finds; `.ci/setup-realengine` fetches both).

The server runs one slot (``-np 1``): each request is decoded alone, so greedy decoding must
give a consistency prompt the same tokens under the probe's load as in its reference sent
alone, whatever the model's skill. A tiny model's exact-match accuracy may be anything; the
check there is that every graded request was judged and the figures hold together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from test_realengine import ALIAS, find_gguf, find_server, free_port, running_server
from tokenwatt.load.consistency import consistency_prompts, consistency_references
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.metrics.accuracy import probe_accuracy, wilson_interval
from tokenwatt.spec import BenchSpec, parse_spec

pytestmark = [pytest.mark.realengine, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def one_slot_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, gguf = find_server(), find_gguf()
    if server is None or gguf is None:
        pytest.skip("llama-server or the GGUF not found: run .ci/setup-realengine")
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    cmd = [str(server), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["-c", "2048", "-np", "1", "-t", "1", "--alias", ALIAS]
    cmd += ["--no-jinja", "--chat-template", "gemma", "--metrics"]
    with running_server(cmd, port, log, health_timeout_s=60):
        yield f"http://127.0.0.1:{port}/v1"


def graded_spec(url: str, api: str) -> BenchSpec:
    return parse_spec(
        {
            "model": {"source": "qwen3-8b"},  # geometry is not used by these figures
            "endpoint": {"url": url, "api": api, "model": ALIAS},
            "hardware": {"accelerator": "h100-sxm"},
            "workload": {"input_tokens": 24, "output_tokens": 16, "seed": 3},
            "graded": {
                "fraction": 0.75,
                "tasks": ["copy", "count", "arithmetic", "gsm8k", "consistency"],
                "max_tokens": 12,
                "word_problem_max_tokens": 96,
            },
            "search": {"probe": {"warmup_s": 0.0, "min_duration_s": 0.1, "drain_timeout_s": 60}},
        }
    )


def graded_probe(spec: BenchSpec) -> tuple[ProbeRun, dict[str, str]]:
    async def main() -> tuple[ProbeRun, dict[str, str]]:
        async with open_target(spec) as target:
            refs = await consistency_references(spec, target.client)
            run = await run_probe(
                spec, target.client, rate_rps=None, concurrency=2, max_requests=24, seed=3
            )
            return run, refs

    return asyncio.run(main())


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_graded_slice_end_to_end_on_llama_server(one_slot_url: str, api: str) -> None:
    run, refs = graded_probe(graded_spec(one_slot_url, api))
    m = run.metrics
    assert m.requests_failed == 0, m.errors_by_kind
    # every pool prompt got a reference alone (a real, non-empty greedy answer)
    assert set(refs) == set(consistency_prompts(3)) and all(refs.values())
    graded = [r for r in run.counted if r.task is not None]
    assert len(graded) >= 10 and len(graded) < m.requests_counted
    assert all(r.correct is not None for r in graded)  # each judged once its stream ended
    for r in graded:  # the slice's own output limits
        assert r.output_tokens <= (96 if r.task == "gsm8k" else 12)
    plain = [r for r in run.counted if r.task is None]
    assert all(r.output_tokens == 16 for r in plain)  # ignore_eos still honoured there
    acc = probe_accuracy(run.counted)
    assert acc is not None and acc.graded == len(graded) and acc.unjudged == 0
    assert acc.right == sum(1 for r in graded if r.correct)
    assert (acc.accuracy_low, acc.accuracy_high) == wilson_interval(acc.right, acc.graded)
    assert sum(g for _, g in acc.by_task.values()) == acc.graded
    # one slot: every request decoded alone, so greedy answers equal their alone references
    # (sent again by this probe before its load, and by the test before that)
    if "consistency" in acc.by_task:
        right, n = acc.by_task["consistency"]
        assert right == n > 0, acc.by_task
