"""The simulator in real time: ground truth against the configured efficiency, the child
process and CLI, and the wire-format knobs for testing clients."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from test_sim_support import H100, config, geometry
from tokenwatt.errors import TokenwattError
from tokenwatt.sim import start_sim_subprocess, start_sim_thread
from tokenwatt.sim.tokens import output_text

# -- efficiency from the ground truth ------------------------------------------------------------


async def closed_loop(url: str, streams: int, duration_s: float, seed: int = 0) -> int:
    """``streams`` clients, each sending its next streaming request as soon as one ends."""
    stop_at = time.monotonic() + duration_s
    done = 0

    async def worker(i: int, session: aiohttp.ClientSession) -> None:
        nonlocal done
        j = 0
        while time.monotonic() < stop_at:
            body = {
                "prompt": list(range(50 + 37 * ((i + j + seed) % 11))),
                "max_tokens": 20 + 13 * ((i * 7 + j) % 9),
                "ignore_eos": True,
                "stream": True,
            }
            async with session.post(url + "/completions", json=body) as resp:
                assert resp.status == 200
                async for _ in resp.content.iter_any():
                    pass
            done += 1
            j += 1

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(i, session) for i in range(streams)))
    return done


def utilization_from_truth(path: Path, bandwidth: float) -> tuple[float, int]:
    """Bytes read by the steps of a window over the window's actual length (first write of
    its first step to first write of its last), times bandwidth. Any window will do; its ends
    are taken at the most punctual steps near the start and the end of the run, so that one
    late emission at an end does not stretch it. The window must hold no idle time."""
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    k = max(1, len(recs) // 10)

    def late(r: dict[str, Any]) -> int:
        return int(r["t_end_ns"] - r["deadline_ns"])

    i = min(range(k), key=lambda j: late(recs[j]))
    j = min(range(len(recs) - k, len(recs)), key=lambda m: late(recs[m]))
    window = recs[i + 1 : j + 1]
    assert sum(r["idle_before_s"] for r in window) == 0.0, "the engine idled inside the window"
    read = sum(r["weight_bytes"] + r["kv_bytes"] for r in window)
    elapsed_s = (recs[j]["t_end_ns"] - recs[i]["t_end_ns"]) / 1e9
    return read / (elapsed_s * bandwidth), len(window)


def run_efficiency_check(tmp_path: Path, duration_s: float, streams: int) -> None:
    truth = tmp_path / "truth.jsonl"
    c = config(
        geometry(name="eff", dense_weight_bytes=16_000_000_000),  # ≈9.6 ms steps at 0.5
        efficiency=0.5,
        prefill_cost=False,
        step_overhead_ms=0.0,
        kv_cache_gib=20e9 / 2**30,
        truth_log=truth,
    )
    with start_sim_subprocess(c) as sim:
        done = asyncio.run(closed_loop(sim.url, streams, duration_s))
    assert done > streams
    mbu, steps = utilization_from_truth(truth, H100.bandwidth_bytes_per_s)
    assert steps > duration_s / 0.02
    assert mbu == pytest.approx(0.5, rel=0.01)


@pytest.mark.exclusive
def test_bytes_read_over_elapsed_time_equals_the_efficiency(tmp_path: Path) -> None:
    run_efficiency_check(tmp_path, duration_s=1.5, streams=16)


@pytest.mark.exclusive
@pytest.mark.slow
def test_bytes_read_over_elapsed_time_equals_the_efficiency_long(tmp_path: Path) -> None:
    run_efficiency_check(tmp_path, duration_s=20.0, streams=128)


# -- child process and CLI ------------------------------------------------------------


def test_cli_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    truth = tmp_path / "t.jsonl"
    cmd = [
        sys.executable, "-m", "tokenwatt", "sim", "--model", "llama-3.1-8b",
        "--accelerator", "h200", "--max-model-len", "8192", "--replicas", "2",
        "--efficiency", "0.7", "--no-prefill-cost", "--truth-log", str(truth), "--port", "0",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the sentence for people names the URL
        m = re.search(r"serving (http://\S+/v1)", line)
        assert m, line
        client = openai.OpenAI(base_url=m.group(1), api_key="x", max_retries=0, timeout=20)
        models = client.models.list()
        assert models.data[0].id == "Llama-3.1-8B"
        out = client.completions.create(
            model=models.data[0].id, prompt="a b", max_tokens=3, extra_body={"ignore_eos": True}
        )
        assert out.usage is not None and out.usage.completion_tokens == 3
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert proc.returncode == 0
    recs = [json.loads(x) for x in truth.read_text().splitlines()]
    assert len(recs) == 3 and {r["replica"] for r in recs} <= {0, 1}


def test_child_prints_a_json_ready_line_and_stops_on_sigterm(tmp_path: Path) -> None:
    truth = tmp_path / "t.jsonl"
    c = config(kv_cache_gib=4e9 / 2**30, truth_log=truth, replicas=2)
    request = json.dumps({"config": c.to_dict(), "host": "127.0.0.1", "port": 0})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenwatt.sim.child"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request)
        proc.stdin.close()
        ready = json.loads(proc.stdout.readline())
        assert ready["ready"] is True and ready["pid"] == proc.pid
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", ready["url"])
        assert ready["metrics_url"] == ready["url"].removesuffix("/v1") + "/metrics"
        client = openai.OpenAI(base_url=ready["url"], api_key="x", max_retries=0, timeout=20)
        out = client.completions.create(
            model=c.served_model_name, prompt="a b", max_tokens=4, extra_body={"ignore_eos": True}
        )
        assert out.usage is not None and out.usage.completion_tokens == 4
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert proc.returncode == 0
    assert len(truth.read_text().splitlines()) == 4  # the log was flushed and closed


def test_start_sim_subprocess_reads_the_ready_line() -> None:
    with start_sim_subprocess(config(kv_cache_gib=4e9 / 2**30)) as sim:
        assert sim.process is not None
        with urllib.request.urlopen(sim.url + "/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "toy"
    assert sim.process.returncode == 0


@pytest.mark.parametrize(
    ("stdin", "needle"),
    [
        ("not json", "stdin must be JSON"),
        ('{"host": "127.0.0.1"}', "stdin must be JSON"),
        ('{"config": {"geometry": {}}}', "config"),
    ],
)
def test_child_bad_input_is_one_line_and_exit_2(stdin: str, needle: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tokenwatt.sim.child"],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0]


def test_child_bad_knob_is_one_line_naming_it(tmp_path: Path) -> None:
    data = config().to_dict()
    data["routing"] = "zipf:inf"
    proc = subprocess.run(
        [sys.executable, "-m", "tokenwatt.sim.child"],
        input=json.dumps({"config": data}), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "routing" in lines[0] and "zipf:inf" in lines[0]


def test_cli_bad_input_is_one_line_and_exit_2() -> None:
    for bad, needle in (
        (["--efficiency", "1.5"], "efficiency"),
        (["--accelerator", "nope"], "unknown accelerator"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "tokenwatt", "sim", "--model", "llama-3.1-8b",
             "--accelerator", "h100-sxm", "--port", "0", *bad],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        assert len(lines) == 1 and needle in lines[0]


def test_port_in_use_is_a_clear_error() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(TokenwattError, match="bind"):
            start_sim_thread(config(), port=port)
    finally:
        holder.close()


# -- knobs for testing clients ------------------------------------------------------------


def raw_stream(base_url: str, body: dict[str, Any], timeout_s: float = 10.0) -> bytes:
    """The whole decoded response body of a streaming request, read over a raw socket."""
    host, port = base_url.removeprefix("http://").split(":")
    data = json.dumps({**body, "stream": True}).encode()
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)
        )
        buf = b""
        while chunk := sock.recv(65536):
            buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    body_out = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body_out += rest[:size]
        rest = rest[size + 2 :]
    return body_out


def test_several_tokens_per_chunk() -> None:
    with start_sim_thread(config(tokens_per_chunk=3)) as sim:
        client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0, timeout=20)
        chunks = list(
            client.completions.create(
                model="toy", prompt="hi", max_tokens=7, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
            )
        )  # fmt: skip
    words = [len(c.choices[0].text.split()) for c in chunks if c.choices]
    assert words == [3, 3, 1]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7


@pytest.mark.exclusive
def test_keepalive_comments_are_sent_and_ignored_by_clients() -> None:
    slow = geometry(dense_weight_bytes=50_000_000_000)  # ≈30 ms steps
    with start_sim_thread(config(slow, keepalive_s=0.01, kv_cache_gib=20e9 / 2**30)) as sim:
        body = raw_stream(sim.base_url, {"prompt": "hi", "max_tokens": 5, "ignore_eos": True})
        client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0, timeout=20)
        texts = [
            c.choices[0].text
            for c in client.completions.create(
                model="toy", prompt="hi", max_tokens=5, stream=True,
                extra_body={"ignore_eos": True},
            )
        ]  # fmt: skip
    assert body.count(b": keep-alive\n\n") >= 5
    assert body.endswith(b"data: [DONE]\n\n")
    assert len(texts) == 5


def test_error_mid_stream_then_done_and_kv_freed() -> None:
    with start_sim_thread(config(error_after_tokens=2)) as sim:
        body = raw_stream(sim.base_url, {"prompt": "hi", "max_tokens": 50, "ignore_eos": True})
        events = [e for e in body.split(b"\n\n") if e]
        assert len(events) == 4 and events[-1] == b"data: [DONE]"
        err = json.loads(events[2].removeprefix(b"data: "))
        assert err["error"]["code"] == 500
        client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0, timeout=20)
        got: list[str] = []
        with pytest.raises(openai.APIError, match="simulated engine failure"):
            for c in client.completions.create(
                model="toy", prompt="hi", max_tokens=50, stream=True,
                extra_body={"ignore_eos": True},
            ):  # fmt: skip
                got.append(c.choices[0].text)
        assert len(got) == 2
        stats = _stats(sim.stats_url)
    assert stats["engines"][0]["running"] == 0 and stats["engines"][0]["kv_usage"] == 0.0


def test_stalled_stream_sends_nothing_more() -> None:
    with start_sim_thread(config(stall_after_tokens=2)) as sim:
        client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0, timeout=1.0)
        got: list[str] = []
        t0 = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            for c in client.completions.create(
                model="toy", prompt="hi", max_tokens=50, stream=True,
                extra_body={"ignore_eos": True},
            ):  # fmt: skip
                got.append(c.choices[0].text)
        assert len(got) == 2
        assert time.monotonic() - t0 >= 0.9
        stats = _stats(sim.stats_url)
    assert stats["engines"][0]["running"] == 0  # the engine dropped it; the socket hangs


def _stats(url: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_a_slow_reader_gets_every_frame_in_order() -> None:
    """The driver writes frames straight to the socket and hands what the kernel does not take
    to the transport's buffer; a reader that stops reading (tiny buffers on both ends, then a
    pause) must still get the whole stream, intact and in order, once it reads again."""
    n = 3000
    with start_sim_thread(config(kv_cache_gib=4e9 / 2**30)) as sim:
        assert sim.server is not None
        host, port = sim.base_url.removeprefix("http://").split(":")
        data = json.dumps({"prompt": "hi", "max_tokens": n, "ignore_eos": True, "stream": True})
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        sock.settimeout(30)
        sock.connect((host, int(port)))
        with sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(data), data.encode())
            )
            deadline = time.monotonic() + 10
            while not sim.server._sinks and time.monotonic() < deadline:
                time.sleep(0.001)
            (sink,) = sim.server._sinks  # the server's end: a small send buffer fills at once
            assert sink.transport is not None
            server_sock = sink.transport.get_extra_info("socket")
            server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            time.sleep(1.0)  # the server keeps emitting into the full window meanwhile
            buf = b""
            while chunk := sock.recv(65536):
                buf += chunk
    _, _, rest = buf.partition(b"\r\n\r\n")
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2 :]
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    texts = [json.loads(e.removeprefix(b"data: "))["choices"][0]["text"] for e in events[:-1]]
    assert "".join(texts) == output_text(0, n)
