"""Probes and benches against the fault-injecting server: every sent request recorded once with
the exact classification of ``faultserver.EXPECTED``; endpoint errors over the budget make an
error probe (never an SLO verdict, never a boundary); a dead or all-500 endpoint exits non-zero;
no secret of the URL or the API key in any output of a run."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from faultserver import EXPECTED, LATE_MODES, MODES, FaultServer, threaded
from tokenwatt.client import StreamClient
from tokenwatt.load.derive import summarize_probe
from tokenwatt.load.probe import run_probe
from tokenwatt.metrics.slo import BROKEN_ENDPOINT_KINDS, ErrorTally, Limits, judge_probe
from tokenwatt.records import RequestRecord
from tokenwatt.result import load_result
from tokenwatt.spec import ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts
from tokenwatt.traffic.workload import WorkloadGenerator

FAST = {"connect_s": 2, "first_token_s": 0.6, "idle_s": 0.3, "total_s": 10}
USER, PASSWORD, API_KEY = "tw-user-q7", "pw-S3cr3t-9xZ", "sk-key-Distinct-4242"


def spec_dict(url: str, **over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "faults",
        "endpoint": {
            "url": url,
            "api": "completions",
            "model": "m",
            "timeouts": FAST,
            "prompt_format": "token_ids",
        },
        "model": {"source": "llama-3.1-8b"},
        "hardware": {
            "accelerator": None,
            "custom": {
                "bandwidth_bytes_per_s": 1e12,
                "memory_bytes": 80e9,
                "bf16_dense_flops": 1e15,
                "tdp_w": 700,
            },
        },
        "workload": {"input_tokens": 16, "output_tokens": 8, "seed": 1},
        "slo": {"ttft_ms": 500, "tpot_ms": 200},
        "search": {
            "start_rate_rps": 4,
            "max_probes": 4,
            "single_stream_requests": 3,
            "probe": {
                "warmup_s": 0.2,
                "min_duration_s": 1.5,
                "min_requests": 6,
                "max_duration_s": 3,
                "drain_timeout_s": 2,
            },
        },
    }
    d.update(over)
    return d


# A probe that judges every request it sends (no warm-up, no early stop).
EVERY_REQUEST = ProbeSettings(
    warmup_s=0,
    min_duration_s=0.1,
    min_requests=1,
    max_duration_s=120,
    drain_timeout_s=5,
    early_stop=False,
)


def test_every_mode_in_a_probe_is_classified_exactly_and_recorded_once() -> None:
    """The server picks each request's mode from its first prompt token (``by_prompt``); the
    same seed regenerates the probe's prompts, so the test knows every request's mode and
    asserts its exact classification. One request at a time (closed loop) keeps it quick."""
    n = 3 * len(MODES)

    async def main() -> None:
        async with FaultServer(by_prompt=True) as srv:
            # a budget of 100 %: the probe must not stop early on its endpoint errors here
            spec = parse_spec({**spec_dict(srv.url), "slo": {"ttft_ms": 500, "max_error_rate": 1}})
            client = StreamClient(srv.url, api="completions", model="m", timeouts=Timeouts(**FAST))
            try:
                run = await run_probe(
                    spec,
                    client,
                    rate_rps=None,
                    concurrency=1,
                    max_requests=n,
                    seed=1,
                    settings=EVERY_REQUEST,
                )
            finally:
                await client.aclose()
            posts = dict(srv.posts)
        plans = iter(WorkloadGenerator(spec.workload, prompt_format=run.prompt_format, seed=1))
        modes = []
        for _ in range(n):
            prompt = next(plans).prompt
            assert isinstance(prompt, list)
            modes.append(MODES[int(prompt[0]) % len(MODES)])
        assert len(set(modes)) > len(MODES) // 2, "the prompts cover many modes"
        ids = [r.request_id for r in run.records]
        assert ids == list(range(n)), "every sent request recorded exactly once"
        wrong, raced = [], []
        for r, mode in zip(run.records, modes, strict=True):
            got = (r.status, r.error_kind)
            after_late = r.request_id > 0 and modes[r.request_id - 1] in LATE_MODES
            if got != EXPECTED[mode] and after_late and got == ("error", "protocol"):
                # a request sent on the kept-alive connection before the previous answer's
                # stray duplicate arrived reads that duplicate first: refused as a stale
                # answer, by its repeated id where ids differ, else once its own answer shows
                # up after it (never taken as this request's answer, as it once was: short,
                # with the previous request's timing)
                raced.append(r)
                assert "stale answer" in (r.error_message or ""), r
            elif got != EXPECTED[mode]:
                wrong.append((r.request_id, mode, got, r.error_message))
        assert not wrong, (wrong, posts)
        assert len(raced) <= sum(modes.count(m) for m in LATE_MODES)
        # the server saw each request once (a reset before any byte on a kept-alive
        # connection is sent once more on a fresh one: the client's one retry)
        for mode in set(modes):
            sent = modes.count(mode)
            got = posts.get(mode, 0)
            retried = mode == "reset_before_headers" or mode in {modes[r.request_id] for r in raced}
            assert got <= (2 * sent if retried else sent), mode
            assert got >= sent - len(raced), mode
        # the error budget: broken-endpoint kinds counted by hand from the table
        raced_ids = {r.request_id for r in raced}
        broken = sum(
            1
            for i, m in enumerate(modes)
            if EXPECTED[m][1] in BROKEN_ENDPOINT_KINDS or i in raced_ids
        )
        assert not run.error_stopped
        judged_with_budget = parse_spec(spec_dict(srv.url))  # the default 5 % budget
        s = summarize_probe(
            index=1, run=run, spec=judged_with_budget, geometry=None, accelerator=None
        )
        assert s.slo_detail.error_rate == pytest.approx(broken / n)
        assert s.slo_detail.error_probe and not s.slo_passed
        assert s.slo_detail.failed[0] == "error_probe"

    asyncio.run(asyncio.wait_for(main(), 120))


def _rec(i: int, kind: str | None, status: str = "error") -> RequestRecord:
    r = RequestRecord(request_id=i, scheduled_ns=i, prompt_tokens_client=1, max_tokens=4)
    if kind is not None:
        r.status, r.error_kind, r.error_message = status, kind, kind  # type: ignore[assignment]
    else:
        r.sent_ns, r.first_token_ns, r.done_ns = i, i + 10, i + 20
    return r


def test_error_budget_counts_endpoint_errors_not_timeouts_or_cancellations() -> None:
    limits = Limits.from_spec(parse_spec(spec_dict("sim")).slo)
    ok = [_rec(i, None) for i in range(95)]
    # 5 connect errors in 100 judged: exactly at a 5 % budget, not over it
    at_budget = ok + [_rec(100 + i, "connect") for i in range(5)]
    assert ErrorTally.of(at_budget).rate == pytest.approx(0.05)
    assert not judge_probe(limits, at_budget, max_error_rate=0.05).error_probe
    # one more (truncated, a server error) tips it
    over = [*at_budget, _rec(200, "truncated")]
    v = judge_probe(limits, over, max_error_rate=0.05)
    assert v.error_probe and "error_probe" in v.failed
    assert v.reason is not None and "connect 5" in v.reason and "truncated 1" in v.reason
    # timeouts are latency failures (a slow server), cancellations are not judged
    slow = ok + [_rec(300 + i, "timeout_first_token") for i in range(50)]
    slow += [_rec(400 + i, "cancelled", status="cancelled") for i in range(50)]
    v = judge_probe(limits, slow, max_error_rate=0.05)
    assert not v.error_probe and not v.passed and ErrorTally.of(slow).judged == 145


def run_cli(args: list[str], timeout: float = 150) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TW_FAULT_KEY": API_KEY, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.mark.timeout(200)
def test_all_500_endpoint_exits_non_zero_without_a_boundary(tmp_path: Path) -> None:
    with threaded(FaultServer(modes=["http_500"])) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(spec_dict(srv.url)))
        out = tmp_path / "out"
        proc = run_cli(["bench", str(spec), "--out", str(out)])
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = load_result(out)
    assert r.boundary is None and r.search is not None and r.search.stop_reason == "error"
    assert r.single_stream is not None and r.single_stream.slo_detail.error_probe
    assert any("error probe" in w for w in r.warnings)
    assert "SLO not met at any probed rate" not in proc.stdout
    assert "error probe" in proc.stdout


@pytest.mark.timeout(200)
def test_server_killed_mid_bench_stops_with_no_boundary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with threaded(FaultServer(modes=["ok"])) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(spec_dict(srv.url)))
        env = {**os.environ, "COLUMNS": "200"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenwatt", "bench", str(spec), "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (out / "requests-01.jsonl").exists():
            time.sleep(0.05)
        assert (out / "requests-01.jsonl").exists(), "the first probe never finished"
    # the server is gone: every later request is refused
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stdout[-3000:] + stderr[-3000:]
    r = load_result(out)
    assert r.probes[0].slo_passed, "the first probe, against a live server, passed"
    assert r.boundary is None and r.search is not None and r.search.stop_reason == "error"
    last = r.probes[-1]
    assert last.slo_detail.error_probe and last.errors_by_kind.get("connect", 0) > 0
    # what was measured is kept: a requests file per probe, the passing probe in result.json
    assert all((out / p.requests_file).exists() for p in r.probes if p.requests_file)


@pytest.mark.timeout(200)
def test_no_secret_in_any_output_of_a_run(tmp_path: Path) -> None:
    """The URL's password and the API key, both distinctive, in no printed line and no file,
    while the server echoes the request's headers back in its error."""
    for command in ("bench", "probe"):
        with threaded(FaultServer(modes=["echo_secrets"])) as srv:
            url = srv.url.replace("http://", f"http://{USER}:{PASSWORD}@")
            d = spec_dict(url)
            d["endpoint"]["api_key_env"] = "TW_FAULT_KEY"
            spec = tmp_path / f"{command}.yaml"
            spec.write_text(yaml.safe_dump(d))
            out = tmp_path / f"out-{command}"
            extra = ["--rate", "5", "--duration", "1"] if command == "probe" else []
            proc = run_cli([command, str(spec), "--out", str(out), *extra])
        assert proc.returncode != 0 or command == "probe", proc.stderr[-2000:]
        texts = {"stdout": proc.stdout, "stderr": proc.stderr}
        for f in out.rglob("*"):
            if f.is_file():
                texts[str(f)] = f.read_bytes().decode("utf-8", "replace")
        assert len(texts) > 3, texts.keys()  # the run wrote files
        for where, text in texts.items():
            assert PASSWORD not in text, f"{command}: password in {where}"
            assert API_KEY not in text, f"{command}: API key in {where}"
        if command == "probe":
            data = orjson.loads((out / "result.json").read_bytes())
            assert data["probes"][0]["slo_detail"]["error_probe"]
            assert proc.returncode == 3


@pytest.mark.timeout(100)
def test_no_secret_in_the_error_line_of_a_failed_start(tmp_path: Path) -> None:
    """A start that fails (the model is not served) names the endpoint in its one error line,
    without the URL's password."""
    with threaded(FaultServer(modes=["ok"])) as srv:
        url = srv.url.replace("http://", f"http://{USER}:{PASSWORD}@")
        d = spec_dict(url)
        d["endpoint"]["model"] = "not-served"
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(d))
        proc = run_cli(["probe", str(spec), "--rate", "5", "--out", str(tmp_path / "o")])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "not-served" in proc.stderr and "127.0.0.1" in proc.stderr
    assert PASSWORD not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("concurrency", "rate"), [(4, None), (None, 50.0)])
def test_a_dead_endpoint_stops_the_probe_as_an_error_probe(
    concurrency: int | None, rate: float | None
) -> None:
    """Every connection refused: the probe stops (in its warm-up) instead of hammering a dead
    port for its whole window; everything sent is judged, and it is an error probe."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()  # nothing listens there now

    async def main() -> None:
        spec = parse_spec(spec_dict(url))
        client = StreamClient(url, api="completions", model="m", timeouts=Timeouts(**FAST))
        try:
            run = await run_probe(
                spec,
                client,
                rate_rps=rate,
                concurrency=concurrency,
                seed=1,
                settings=ProbeSettings(
                    warmup_s=30, min_duration_s=60, max_duration_s=60, min_requests=1
                ),
            )
        finally:
            await client.aclose()
        assert run.error_stopped and run.stopped_early
        assert run.window_start_ns == run.started_ns  # stopped in warm-up: all judged
        ids = [r.request_id for r in run.records]
        assert ids == list(range(len(ids))) and len(ids) >= 20
        judged = [r for r in run.records if not r.cancelled]
        assert judged and all(r.error_kind == "connect" for r in judged)
        sm = summarize_probe(index=1, run=run, spec=spec, geometry=None, accelerator=None)
        assert sm.slo_detail.error_probe and sm.slo_detail.error_rate == 1.0
        assert sm.requests_counted == len(ids)
        assert "window_cut" in sm.flags

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("halt", ["error", "saturated"])
def test_search_stops_at_a_halting_probe_and_brackets_nothing_with_it(halt: str) -> None:
    """Passes below 10 rps, but the endpoint breaks from 8 rps on: the search stops at the
    first halting probe; the bracket is what genuine verdicts said (lo 4, no hi)."""
    from tokenwatt.load.search import BoundarySearch, ProbeOutcome

    rates: list[float] = []

    async def probe(rate: float, seed: int) -> ProbeOutcome[None]:
        rates.append(rate)
        if rate >= 8:
            return ProbeOutcome(False, "broken", halt=halt)  # type: ignore[arg-type]
        return ProbeOutcome(rate < 10)

    search: BoundarySearch[None] = BoundarySearch(probe, start_rate_rps=1, growth=2)
    out = asyncio.run(search.run())
    assert rates == [1, 2, 4, 8]
    assert out.stop_reason == halt
    assert out.lo_rps == 4 and out.hi_rps is None
    assert out.steps[-1].outcome.halt == halt and out.steps[-1].lo_rps == 4
