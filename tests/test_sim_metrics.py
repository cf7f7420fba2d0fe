"""The simulator's ``/metrics`` equal its truth log exactly: after a run, scrape over HTTP and
compare every counter with the sums of the per-step JSON records (and with what was sent:
prompt lengths, max_tokens). Covers multi-token chunks, preemption and replicas left idle."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from test_sim_support import config, geometry
from tokenwatt.sim import RunningSim, start_sim_thread

MODEL = "toy"


def scrape(sim: RunningSim) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``sample name → {sorted labels → value}`` from the Prometheus text."""
    with urllib.request.urlopen(sim.metrics_url, timeout=20) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name][tuple(sorted(s.labels.items()))] = s.value
    return out


def per_engine(samples: dict[tuple[tuple[str, str], ...], float], **match: str) -> list[float]:
    """Values by engine index (labels must include ``match``), summed over other labels."""
    by: dict[int, float] = defaultdict(float)
    for labels, v in samples.items():
        d = dict(labels)
        if all(d.get(k) == val for k, val in match.items()):
            by[int(d["engine"])] += v
    return [by[i] for i in range(max(by) + 1)]


def wait_idle(sim: RunningSim, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(sim.stats_url, timeout=20) as resp:
            st = json.loads(resp.read())
        if all(e["running"] == 0 and e["waiting"] == 0 for e in st["engines"]):
            return
        time.sleep(0.02)
    raise AssertionError("the simulator did not go idle")


def build_openai_models() -> None:
    """Build the openai client's completion models once, in this thread.

    openai defers each response model's pydantic schema to first use, and that
    lazy build is not thread-safe: two pool threads meeting an unbuilt
    ``Completion`` at once can see pydantic's placeholder schema and fail
    ("BaseModel cannot be instantiated directly"; seen once in CI).
    """
    import openai.types.completion  # noqa: F401  (defines the models walked below)
    import pydantic

    todo: list[type[pydantic.BaseModel]] = [pydantic.BaseModel]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("openai.types.completion"):
            cls.model_rebuild()


def drive(sim: RunningSim, requests: list[tuple[int, int]]) -> None:
    """All requests at once, streamed, token-id prompts of the given lengths, ignore_eos."""
    build_openai_models()
    client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0, timeout=60)

    def one(spec: tuple[int, int]) -> int:
        n_in, n_out = spec
        stream = client.completions.create(
            model=MODEL, prompt=list(range(n_in)), max_tokens=n_out, stream=True,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        return sum(1 for _ in stream)

    with ThreadPoolExecutor(len(requests)) as pool:
        assert all(n > 0 for n in pool.map(one, requests))


def check_metrics_equal_truth(
    m: dict[str, dict[tuple[tuple[str, str], ...], float]],
    recs: list[dict[str, Any]],
    requests: list[tuple[int, int]],
    replicas: int,
) -> None:
    def truth(key: str, replica: int | None = None) -> float:
        return sum(r[key] for r in recs if replica is None or r["replica"] == replica)

    reps = range(replicas)
    gen = per_engine(m["vllm:generation_tokens_total"])
    prompt = per_engine(m["vllm:prompt_tokens_total"])
    ok = [
        a + b
        for a, b in zip(
            per_engine(m["vllm:request_success_total"], finished_reason="length"),
            per_engine(m["vllm:request_success_total"], finished_reason="stop"),
            strict=True,
        )
    ]
    assert len(gen) == replicas
    assert gen == [truth("tokens_emitted", i) for i in reps]
    assert prompt == [truth("prompt_done_tokens", i) for i in reps]
    assert ok == [truth("finished", i) for i in reps]
    assert per_engine(m["vllm:num_preemptions_total"]) == [truth("preempted", i) for i in reps]
    it_sum = per_engine(m["vllm:iteration_tokens_total_sum"])
    it_count = per_engine(m["vllm:iteration_tokens_total_count"])
    assert it_sum == [truth("batch", i) + truth("prefill_tokens", i) for i in reps]
    assert it_count == [sum(1 for r in recs if r["replica"] == i) for i in reps]
    # what was sent, independently of the log
    assert sum(gen) == sum(n for _, n in requests)
    assert sum(prompt) == sum(n for n, _ in requests)
    assert sum(ok) == len(requests)
    # the ground-truth families, node totals
    node = {name: next(iter(m[name].values())) for name in m if name.startswith("tokenwatt_sim")}
    assert node["tokenwatt_sim_steps_total"] == len(recs)
    assert node["tokenwatt_sim_decode_steps_total"] == sum(1 for r in recs if r["batch"])
    assert node["tokenwatt_sim_tokens_emitted_total"] == sum(gen)
    assert node["tokenwatt_sim_decode_tokens_total"] == truth("batch")
    assert node["tokenwatt_sim_prefill_tokens_total"] == truth("prefill_tokens")
    running_s = sum(r["scheduled"] * r["duration_s"] for r in recs)
    batch_s = sum(r["batch"] * r["duration_s"] for r in recs)
    assert node["tokenwatt_sim_running_seconds_total"] == pytest.approx(running_s, rel=1e-12)
    assert node["tokenwatt_sim_decode_batch_seconds_total"] == pytest.approx(batch_s, rel=1e-12)
    assert running_s > batch_s > 0


# (prompt tokens, max_tokens) per request: different lengths, so the sums are not symmetric
REQUESTS = [(40 + 17 * i, 9 + 5 * i) for i in range(6)]


@pytest.mark.parametrize("tokens_per_chunk", [1, 3])
def test_metrics_equal_the_truth_log_with_idle_replicas(
    tmp_path: Path, tokens_per_chunk: int
) -> None:
    """8 replicas, 6 requests at once: the router's round robin leaves two replicas idle,
    whose counters must be present and zero."""
    log = tmp_path / "truth.jsonl"
    c = config(geometry(name=MODEL), replicas=8, truth_log=log, tokens_per_chunk=tokens_per_chunk)
    with start_sim_thread(c) as sim:
        drive(sim, REQUESTS)
        wait_idle(sim)
        m = scrape(sim)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    check_metrics_equal_truth(m, recs, REQUESTS, replicas=8)
    idle = [i for i in range(8) if not any(r["replica"] == i for r in recs)]
    assert len(idle) >= 2
    for i in idle:
        assert per_engine(m["vllm:generation_tokens_total"])[i] == 0


def test_metrics_equal_the_truth_log_through_preemption(tmp_path: Path) -> None:
    """One replica with 256 KV blocks (4096 tokens) and 8 requests of ~1000 tokens each: the
    engine must preempt and recompute; prompt tokens still count once per request, as vLLM's."""
    log = tmp_path / "truth.jsonl"
    requests = [(600 + 10 * i, 300 + 20 * i) for i in range(8)]
    c = config(geometry(name=MODEL), kv_cache_blocks=256, truth_log=log)
    with start_sim_thread(c) as sim:
        drive(sim, requests)
        wait_idle(sim)
        m = scrape(sim)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert sum(r["preempted"] for r in recs) > 0
    check_metrics_equal_truth(m, recs, requests, replicas=1)
