"""Bounded overload: at any requested rate the sender keeps memory bounded, stops itself as
"load generator saturated" (never an SLO verdict), records every request it sent once, and
hears SIGTERM. Each run is a subprocess (a memory ceiling, a real signal)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml

from faultserver import FaultServer, threaded
from tokenwatt.load.probe import MAX_PENDING_SENDS, MAX_SEND_LAG_S

pytestmark = pytest.mark.exclusive  # every test: send lag, a stall and a signal's timing

CHILD = Path(__file__).with_name("overload_child.py")
# Address-space ceiling for the child: Python + numpy + uvloop map ~300 MB; an unbounded
# sender at 10^6 req/s grew to the machine's 24 GB.
RLIMIT_AS_BYTES = 1_000_000_000


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rate", [1e6, 1e12])
def test_absurd_rate_stays_bounded_and_is_saturated_not_failed(rate: float) -> None:
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(rate), "5", str(RLIMIT_AS_BYTES)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        env=os.environ,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert out["saturated"] and not out["interrupted"]
    # every request the sender started is recorded exactly once
    assert out["records"] == out["unique_ids"] == out["max_id"] + 1
    assert out["records"] <= MAX_PENDING_SENDS + 10_000  # it stopped instead of piling up
    assert out["late_sends"] > 0
    assert MAX_SEND_LAG_S <= out["max_send_lag_s"] < MAX_SEND_LAG_S + 2
    assert out["max_rss_bytes"] < RLIMIT_AS_BYTES


def _spec(url: str) -> dict[str, object]:
    return {
        "endpoint": {"url": url, "api": "completions", "model": "m"},
        "model": {"source": "llama-3.1-8b"},
        "hardware": {"accelerator": "H100-SXM"},
        "workload": {"input_tokens": 16, "output_tokens": 8, "seed": 1},
        "search": {"probe": {"warmup_s": 0, "drain_timeout_s": 1}},
    }


@pytest.mark.timeout(120)
def test_sigterm_is_heard_at_a_million_requests_per_second(tmp_path: Path) -> None:
    with threaded(FaultServer(modes=["instant"])) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(_spec(srv.url)))
        out = tmp_path / "out"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tokenwatt",
                "probe",
                str(spec),
                "--rate",
                "1e6",
                "--duration",
                "60",
                "--out",
                str(out),
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (out / "requests.jsonl").exists():
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    data = orjson.loads((out / "result.json").read_bytes())
    # the signal lands within milliseconds of the first answer, long before the sender is
    # MAX_SEND_LAG_S behind
    assert proc.returncode == 143, stderr[-2000:]
    assert data["interrupted"] and not data["probes"][0]["slo_detail"]["load_generator_saturated"]
    lines = (out / "requests.jsonl").read_bytes().splitlines()
    ids = [orjson.loads(x)["request_id"] for x in lines]
    assert len(ids) == len(set(ids)) > 0
    assert not data["probes"][0]["slo_passed"]


def test_one_stall_of_the_process_is_caught_up_not_saturated() -> None:
    """A 1.3 s freeze of the whole process at 20 req/s leaves 26 sends overdue: they go out
    late (counted), the sender catches up, and the probe is not called saturated."""
    import asyncio

    from tokenwatt.client import StreamClient
    from tokenwatt.load.probe import run_probe
    from tokenwatt.spec import ProbeSettings, parse_spec

    async def main() -> None:
        async with FaultServer(modes=["instant"]) as srv:
            spec = parse_spec(_spec(srv.url))
            client = StreamClient(
                srv.url, api="completions", model="m", timeouts=spec.endpoint.timeouts
            )
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, time.sleep, 1.3)  # the freeze
            try:
                run = await run_probe(
                    spec,
                    client,
                    rate_rps=20,
                    seed=1,
                    settings=ProbeSettings(
                        warmup_s=0,
                        min_duration_s=3,
                        max_duration_s=3,
                        min_requests=1,
                        drain_timeout_s=2,
                        early_stop=False,
                    ),
                )
            finally:
                await client.aclose()
        assert not run.saturated
        assert run.late_sends >= 10  # the overdue sends, counted
        assert run.max_send_lag_s > MAX_SEND_LAG_S

    asyncio.run(main())
