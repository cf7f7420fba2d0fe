"""A probe at an absurd rate against a server that never answers (a listening socket that
never accepts), for tests/test_overload.py: prints one JSON line with what it measured and
its peak RSS. Run as ``python overload_child.py RATE DURATION_S [RLIMIT_AS_BYTES]``."""

from __future__ import annotations

import resource
import socket
import sys

import orjson

from tokenwatt.cli._loop import run_async
from tokenwatt.client import StreamClient
from tokenwatt.load.probe import run_probe
from tokenwatt.spec import ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts


async def main(rate: float, duration_s: float) -> dict[str, object]:
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)  # never accepted: connections queue, then hang in SYN
    url = f"http://127.0.0.1:{lsock.getsockname()[1]}/v1"
    spec = parse_spec(
        {
            "endpoint": {"url": url, "api": "completions", "model": "m"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "H100-SXM"},
            "workload": {"input_tokens": 16, "output_tokens": 8, "seed": 1},
        }
    )
    client = StreamClient(
        url, api="completions", model="m", timeouts=Timeouts(connect_s=30, total_s=60)
    )
    print("started", flush=True)
    try:
        run = await run_probe(
            spec,
            client,
            rate_rps=rate,
            seed=1,
            settings=ProbeSettings(
                warmup_s=0,
                min_duration_s=duration_s,
                max_duration_s=duration_s,
                min_requests=1,
                drain_timeout_s=1,
                early_stop=False,
            ),
        )
    finally:
        await client.aclose()
    ids = [r.request_id for r in run.records]
    return {
        "saturated": run.saturated,
        "interrupted": run.interrupted,
        "late_sends": run.late_sends,
        "max_send_lag_s": run.max_send_lag_s,
        "records": len(ids),
        "unique_ids": len(set(ids)),
        "max_id": max(ids, default=-1),
        "statuses": sorted({r.status for r in run.records}),
        "max_rss_bytes": _peak_rss_bytes(),
    }


def _peak_rss_bytes() -> int:
    """This process's own peak RSS (VmHWM). Not ru_maxrss: across fork and exec Linux keeps the
    forking parent's high-water mark in it, so late in a long pytest session (the parent near
    1 GB) every child "peaked" at the parent's size."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":
    if len(sys.argv) > 3:
        limit = int(sys.argv[3])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        out = run_async(main(float(sys.argv[1]), float(sys.argv[2])))
    except KeyboardInterrupt:
        sys.exit(130)
    print(orjson.dumps(out).decode(), flush=True)
