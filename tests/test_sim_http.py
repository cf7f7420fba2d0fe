"""The simulator over real HTTP on loopback: the official ``openai`` client, raw requests for
the error cases, raw sockets for disconnects, and the Prometheus text of ``/metrics``."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from test_sim_support import config, geometry
from tokenwatt.sim import RunningSim, start_sim_thread
from tokenwatt.sim.tokens import WORDS

MODEL = "toy"


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with start_sim_thread(config(geometry(name=MODEL), output_len="fixed:4")) as running:
        yield running


@pytest.fixture
def client(sim: RunningSim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url, api_key="unused", max_retries=0, timeout=20)


def post(url: str, body: bytes | dict[str, Any], method: str = "POST") -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data if method == "POST" else None, method=method,
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=20) as resp:
        return json.loads(resp.read())


def metrics(sim: RunningSim) -> dict[str, float]:
    """Flattened samples: ``name{label=value,...}`` → value."""
    with urllib.request.urlopen(sim.metrics_url, timeout=20) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def wait_idle(sim: RunningSim, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        st = get_json(sim.stats_url)
        e = st["engines"][0]
        if (e["running"] == 0 and e["waiting"] == 0) or time.monotonic() > deadline:
            return st
        time.sleep(0.02)


# -- wire format through the official client ------------------------------------------------------


def test_streaming_completion_with_usage(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model=MODEL,
        prompt="one two three four",
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert len(texts) == 7
    assert all(t.startswith(" ") and len(t.split()) == 1 for t in texts)
    assert finishes == [None] * 6 + ["length"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4, 7, 11)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].id.startswith("cmpl-") and chunks[0].object == "text_completion"


def test_streamed_text_equals_the_non_streamed_text(client: openai.OpenAI) -> None:
    kw: dict[str, Any] = {"model": MODEL, "prompt": "p", "max_tokens": 40}
    kw["extra_body"] = {"ignore_eos": True}
    whole = client.completions.create(**kw).choices[0].text
    pieces = [c.choices[0].text for c in client.completions.create(stream=True, **kw)]
    assert "".join(pieces) == whole
    assert whole.split() == [w.strip() for w in pieces] and len(pieces) == 40


def test_streaming_chat_with_role_chunk_and_usage(client: openai.OpenAI) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "say three words"}]},
    ]
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_completion_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert len(content) == 5 and all(len((t or "").split()) == 1 for t in content)
    assert chunks[-2].choices[0].finish_reason == "length"
    usage = chunks[-1].usage
    assert usage is not None
    # token rule: 2 + 3 words, + 3 per message, + 3 for the reply
    assert usage.prompt_tokens == 5 + 3 * 2 + 3
    assert usage.completion_tokens == 5
    assert chunks[0].object == "chat.completion.chunk" and chunks[0].id.startswith("chatcmpl-")


def test_without_ignore_eos_the_output_length_distribution_applies(
    client: openai.OpenAI,
) -> None:
    out = client.completions.create(model=MODEL, prompt="x", max_tokens=50)
    assert out.choices[0].finish_reason == "stop"  # output_len="fixed:4"
    assert out.usage is not None and out.usage.completion_tokens == 4
    assert out.choices[0].text == " the of and to"


def test_non_streaming_chat(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=3,
        extra_body={"ignore_eos": True},
    )
    assert out.choices[0].message.content == " the of and"
    assert out.choices[0].finish_reason == "length"
    assert out.usage is not None and (out.usage.prompt_tokens, out.usage.completion_tokens) == (
        1 + 3 + 3,
        3,
    )


def test_token_id_prompts_and_continuous_usage(client: openai.OpenAI) -> None:
    # Longer than the word list, so a cached per-word frame would repeat stale running usage.
    n = len(WORDS) + 7
    stream = client.completions.create(
        model=MODEL,
        prompt=list(range(300)),
        max_tokens=n,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    running = [c.usage.completion_tokens for c in chunks if c.choices and c.usage]
    assert running == list(range(1, n + 1))
    assert all(c.usage and c.usage.prompt_tokens == 300 for c in chunks)


def test_models_health_and_version(sim: RunningSim) -> None:
    models = get_json(sim.url + "/models")
    assert models["data"][0]["id"] == MODEL
    assert models["data"][0]["max_model_len"] == 4096
    assert models["data"][0]["owned_by"] == "tokenwatt-sim"
    with urllib.request.urlopen(sim.base_url + "/health", timeout=10) as resp:
        assert resp.status == 200


def test_metrics_count_what_was_served(sim: RunningSim, client: openai.OpenAI) -> None:
    wait_idle(sim)
    before = metrics(sim)
    client.completions.create(
        model=MODEL, prompt="a b c", max_tokens=6, extra_body={"ignore_eos": True}
    )
    after = metrics(sim)
    lab = "{engine=0,model_name=toy}"
    assert (
        after[f"vllm:generation_tokens_total{lab}"] - before[f"vllm:generation_tokens_total{lab}"]
        == 6
    )
    assert after[f"vllm:prompt_tokens_total{lab}"] - before[f"vllm:prompt_tokens_total{lab}"] == 3
    assert (
        after["tokenwatt_sim_tokens_emitted_total{}"]
        - before["tokenwatt_sim_tokens_emitted_total{}"]
        == 6
    )
    assert (
        after["tokenwatt_sim_decode_tokens_total{}"] - before["tokenwatt_sim_decode_tokens_total{}"]
        == 5
    )  # token 0 comes from the prefill step
    d_kv = (
        after["tokenwatt_sim_decode_kv_bytes_total{}"]
        - before["tokenwatt_sim_decode_kv_bytes_total{}"]
    )
    assert d_kv == 65536 * sum(3 + i for i in range(1, 6))
    assert (
        after["tokenwatt_sim_energy_joules_total{}"] > before["tokenwatt_sim_energy_joules_total{}"]
    )
    e2e = "vllm:e2e_request_latency_seconds_count" + lab
    assert after[e2e] - before[e2e] == 1
    succ = "vllm:request_success_total{engine=0,finished_reason=length,model_name=toy}"
    assert after[succ] - before[succ] == 1
    for name in (
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc", "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
        "vllm:iteration_tokens_total_count",
    ):  # fmt: skip
        assert name + lab in after
    assert "tokenwatt_sim_emit_lateness_seconds_count{}" in after


# -- errors ------------------------------------------------------------


def assert_error(status: int, body: Any, expected: int, fragment: str) -> None:
    assert status == expected, body
    err = body["error"]
    assert err["code"] == expected
    assert fragment.lower() in err["message"].lower()
    assert err["type"] in ("BadRequestError", "NotFoundError", "MethodNotAllowedError")


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/completions", b"{not json", 400, "malformed JSON"),
        ("/completions", b"[1, 2]", 400, "JSON object"),
        ("/completions", {"model": MODEL}, 400, "'prompt' is required"),
        ("/completions", {"prompt": {"a": 1}}, 400, "'prompt' must be"),
        ("/completions", {"prompt": ["a", "b"]}, 400, "batched prompts"),
        ("/completions", {"prompt": ""}, 400, "empty"),
        ("/completions", {"prompt": "hi", "max_tokens": "ten"}, 400, "'max_tokens' must be"),
        ("/completions", {"prompt": "hi", "max_tokens": 0}, 400, "'max_tokens' must be >= 1"),
        ("/completions", {"prompt": "hi", "stream": "yes"}, 400, "'stream' must be a boolean"),
        ("/completions", {"prompt": "hi", "stream_options": {}}, 400, "only allowed"),
        ("/completions", {"prompt": "hi", "n": 2}, 400, "n=1"),
        ("/completions", {"prompt": "hi", "model": 7}, 400, "'model' must be a string"),
        ("/completions", {"prompt": "hi", "model": "gpt-x"}, 404, "does not exist"),
        ("/completions", {"prompt": "a " * 4000, "max_tokens": 100}, 400, "maximum context"),
        ("/completions", {"prompt": list(range(5000))}, 400, "maximum context"),
        ("/completions", {"prompt": "hi", "min_tokens": 20}, 400, "min_tokens"),
        ("/chat/completions", {"model": MODEL}, 400, "'messages' is required"),
        ("/chat/completions", {"messages": []}, 400, "non-empty"),
        ("/chat/completions", {"messages": ["hi"]}, 400, "must be an object"),
        ("/chat/completions", {"messages": [{"content": "hi"}]}, 400, "role"),
        ("/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400, "content"),
        (
            "/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5000},
            400,
            "maximum context",
        ),
    ],
)
def test_bad_requests_get_openai_shaped_errors(
    sim: RunningSim, path: str, body: bytes | dict[str, Any], status: int, fragment: str
) -> None:
    code, out = post(sim.url + path, body)
    assert_error(code, out, status, fragment)


def test_unknown_route_and_wrong_method(sim: RunningSim) -> None:
    code, out = post(sim.url + "/nope", {"prompt": "hi"})
    assert_error(code, out, 404, "not found")
    code, out = post(sim.url + "/completions", b"", method="GET")
    assert_error(code, out, 405, "not allowed")


def test_oversize_body_is_refused(sim: RunningSim) -> None:
    code, out = post(sim.url + "/completions", b'{"prompt": "' + b"a" * (65 << 20) + b'"}')
    assert code == 413 and out["error"]["code"] == 413


def test_the_openai_client_sees_typed_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-x", prompt="hi")
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=MODEL, prompt="hi", max_tokens=10_000)


def test_server_still_serves_after_errors(client: openai.OpenAI) -> None:
    out = client.completions.create(model=MODEL, prompt="hi", max_tokens=2)
    assert out.usage is not None and out.usage.completion_tokens == 2


# -- disconnects ------------------------------------------------------------


def raw_stream_request(port: int, body: dict[str, Any]) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
    )
    return sock


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_aborts_and_frees_kv(sim: RunningSim, stream: bool) -> None:
    wait_idle(sim)
    before = metrics(sim)
    port = int(sim.base_url.rsplit(":", 1)[1])
    body = {"prompt": "a b c", "max_tokens": 3000, "ignore_eos": True, "stream": stream}
    sock = raw_stream_request(port, body)
    deadline = time.monotonic() + 10
    while get_json(sim.stats_url)["engines"][0]["running"] == 0:  # wait until it runs
        assert time.monotonic() < deadline
        time.sleep(0.01)
    if stream:
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    assert get_json(sim.stats_url)["engines"][0]["kv_usage"] > 0
    sock.close()
    st = wait_idle(sim)
    assert st["engines"][0]["running"] == 0
    assert st["engines"][0]["kv_usage"] == 0.0
    after = metrics(sim)
    key = "vllm:request_success_total{engine=0,finished_reason=abort,model_name=toy}"
    assert after[key] - before[key] == 1
    # aborted long before its 3000 tokens
    gen = "vllm:generation_tokens_total{engine=0,model_name=toy}"
    assert after[gen] - before[gen] < 3000
