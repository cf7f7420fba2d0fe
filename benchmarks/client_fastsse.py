"""Benchmark StreamClient against fastsse (a stand-in server that is never the bottleneck).

    python benchmarks/client_fastsse.py                       # paced + burst, 1,000 streams, 10 s
    python benchmarks/client_fastsse.py --mode paced --streams 1000 --itl-ms 10 --duration 10
    python benchmarks/client_fastsse.py --mode burst --burst-streams 100
    python benchmarks/client_fastsse.py --workers 2               # streams dealt to 2 processes

Paced: fastsse (--mode paced --stamp) sends one token per stream every --itl-ms on absolute
deadlines and writes its CLOCK_MONOTONIC send time into each chunk, so the client's timestamp error
is exact: chunk_ns − sent_ns. Each of --streams slots runs requests of --max-tokens back to back (a
closed loop, so every slot is in flight all the time); the first wave is spread over --ramp-s.
Send lateness = sent_ns − scheduled_ns, where a request is scheduled at its slot's ramp time or
at the end of the slot's previous stream.

The timestamp error is also split by read: events that came back alone in their read (the error
of the kernel stamp itself) and events that shared a read with others of the same stream (they all
carry the newest stamp: the client read late, or the kernel had merged the waiting segments).

Burst: fastsse writes each whole response at once; tokens/s is the client's parse ceiling.

--workers N: the streams (slot k to worker k mod N) run in N spawned processes, each pinned to
one of --worker-cores, with one common start; tokens/s are summed and the timestamp error's
percentiles are taken over every worker's events together. (The product's own worker senders
are measured through the command: ``tokenwatt probe SPEC --workers N``, keep-up in result.json.)

Server pinned to --server-core, client to --client-core (taskset / sched_setaffinity). The issue's
target: ≥ 100,000 streamed tokens/s over 1,000 streams at 10 ms, every stream in flight, p99
timestamp error < 0.1 ms, p99 send lateness < 1 ms. On a shared machine other processes use the
same cores; the figures printed are what this run measured, nothing more.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from array import array
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenwatt.client import StreamClient
from tokenwatt.records import RequestRecord
from tokenwatt.spec.endpoint import Timeouts

DEFAULT_FASTSSE = Path(__file__).resolve().parents[2] / "shared" / "tools" / "fastsse.py"


def pct(xs: list[int] | list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return float(s[min(len(s) - 1, int(q * len(s)))])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_fastsse(args: argparse.Namespace, mode: str, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(args.fastsse), "--port", str(port), "--mode", mode]
    if mode == "paced":
        cmd += ["--itl-ms", str(args.itl_ms), "--stamp"]
    if args.server_uvloop:
        cmd.append("--uvloop")
    if args.nice:
        cmd = ["nice", "-n", str(args.nice), *cmd]
    if shutil.which("taskset") and args.server_core >= 0:
        cmd = ["taskset", "-c", str(args.server_core), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"fastsse did not start: {' '.join(cmd)}")


def server_stats(port: int, reset: bool = False) -> dict[str, Any]:
    """fastsse's own counters (tick lateness, CPU); empty if it does not answer in time."""
    q = "?reset=1" if reset else ""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats{q}", timeout=20) as r:
            d: dict[str, Any] = json.loads(r.read())
    except OSError as exc:
        print(f"# fastsse /stats did not answer: {exc}", file=sys.stderr)
        return {}
    el = d.get("elapsed_s") or float("nan")
    return {
        "tick_late_ms_p50": d.get("tick_late_ms_p50"),
        "tick_late_ms_p99": d.get("tick_late_ms_p99"),
        "tick_dur_ms_p99": d.get("tick_dur_ms_p99"),
        "cpu_util": d.get("cpu_s", float("nan")) / el,
        "events_per_s": d.get("events_written", float("nan")) / el,
    }


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run_paced(
    args: argparse.Namespace, port: int, stats_fn: Any = None, model: str = "gemma-3-270m"
) -> dict[str, Any]:
    """Closed loop of ``args.streams`` slots against http://127.0.0.1:port/v1 (see module doc)."""
    if stats_fn is None:
        stats_fn = server_stats
    errors = _StampErrors()
    client = StreamClient(
        f"http://127.0.0.1:{port}/v1",
        api="completions",
        model=model,
        timeouts=Timeouts(connect_s=30, first_token_s=60, idle_s=30, total_s=600),
        stream_usage=args.stream_usage,
        max_connections=args.streams + 16,
        event_hook=errors.hook,
    )
    loop = asyncio.get_running_loop()
    records: list[RequestRecord] = []
    in_flight = 0
    samples: list[int] = []
    t_start = getattr(args, "t_start_ns", None) or time.perf_counter_ns()
    ramp_ns = int(args.ramp_s * 1e9)
    warm_end = t_start + ramp_ns + int(args.warmup_s * 1e9)
    t_end = warm_end + int(args.duration * 1e9)
    rid = 0

    async def slot(i: int) -> None:
        nonlocal in_flight, rid
        scheduled = t_start + ramp_ns * i // args.streams
        await asyncio.sleep(max(0.0, (scheduled - time.perf_counter_ns()) / 1e9))
        while time.perf_counter_ns() < t_end:
            rid += 1
            in_flight += 1
            r = await client.stream(
                request_id=rid,
                scheduled_ns=scheduled,
                prompt=[1, 2, 3, 4],
                max_tokens=args.max_tokens,
                prompt_tokens_client=4,
                ignore_eos=args.ignore_eos,
            )
            in_flight -= 1
            records.append(r)
            scheduled = time.perf_counter_ns()

    lags: list[int] = []

    async def sampler() -> None:
        """Streams in flight every 100 ms, and the loop's lag on a 5 ms timer (stalls)."""
        k = 0
        while time.perf_counter_ns() < t_end:
            t_want = time.perf_counter_ns() + 5_000_000
            await asyncio.sleep(0.005)
            now = time.perf_counter_ns()
            if now > warm_end:
                lags.append(now - t_want)
                k += 1
                if k % 20 == 0:
                    samples.append(in_flight)

    tasks = [loop.create_task(slot(i)) for i in range(args.streams)]
    samp = loop.create_task(sampler())
    wait_s = (warm_end - time.perf_counter_ns()) / 1e9
    await asyncio.sleep(max(0.0, wait_s))
    errors.clear()
    cpu0 = cpu_s()
    stats0 = await asyncio.to_thread(stats_fn, port, True)
    del stats0
    await asyncio.sleep(max(0.0, (t_end - time.perf_counter_ns()) / 1e9))
    cpu1 = cpu_s()
    window = errors.window()
    stats = await asyncio.to_thread(stats_fn, port)
    await asyncio.gather(*tasks)
    await samp
    await client.aclose()
    measured = _Paced(records, samples, lags, window, (cpu1 - cpu0), stats)
    return _paced_result(args, measured, warm_end, t_end, client.clock.timestamp_source)


class _StampErrors:
    """Each event's timestamp error (client stamp − server send stamp), with its stream and
    stamp to tell events that shared a read. Flat int arrays, not tuples: a million GC-tracked
    tuples would make every full collection in the client's process a long pause, and the
    benchmark would measure itself."""

    def __init__(self) -> None:
        self.err_ns = array("q")
        self.stamp = array("q")
        self.rid = array("q")

    def hook(self, obj: dict[str, Any], stamp: int) -> None:
        s = obj.get("sent_ns")
        if s is not None:
            self.err_ns.append(stamp - s)
            self.stamp.append(stamp)
            self.rid.append(hash(obj.get("id", "")))

    def clear(self) -> None:
        del self.err_ns[:], self.stamp[:], self.rid[:]

    def window(self) -> tuple[list[int], list[tuple[int, int]]]:
        """(errors so far, (stream, stamp) per event): the measured window's events."""
        n = len(self.err_ns)
        return list(self.err_ns[:n]), list(zip(self.rid[:n], self.stamp[:n], strict=True))


@dataclass(frozen=True, slots=True)
class _Paced:
    """What one paced run measured, for ``_paced_result``."""

    records: list[RequestRecord]
    samples: list[int]  # streams in flight every 100 ms
    lags: list[int]  # the loop's lag on a 5 ms timer
    window: tuple[list[int], list[tuple[int, int]]]  # ``_StampErrors.window``
    cpu_s: float
    stats: dict[str, Any]


def _paced_result(
    args: argparse.Namespace, m: _Paced, warm_end: int, t_end: int, timestamp_source: str
) -> dict[str, Any]:
    """The paced run's figures over its window (module doc)."""
    records, samples, lags = m.records, m.samples, m.lags
    window_errors, keys = m.window
    # events that shared their read (same stream, same stamp) vs events that had a read alone
    per_read = Counter(keys)
    alone = [e for e, k in zip(window_errors, keys, strict=True) if per_read[k] == 1]
    shared = [e for e, k in zip(window_errors, keys, strict=True) if per_read[k] > 1]
    tokens = sum(
        n
        for r in records
        for t, n in zip(r.chunk_ns, r.chunk_tokens, strict=True)
        if warm_end <= t < t_end
    )
    window_s = (t_end - warm_end) / 1e9
    late = [r.sent_ns - r.scheduled_ns for r in records if r.sent_ns and r.sent_ns >= warm_end]
    failed = [r for r in records if not r.ok]
    coalesced = sum(r.coalesced_reads for r in records)
    chunks = sum(len(r.chunk_ns) for r in records)
    return {
        "mode": "paced",
        "streams_requested": args.streams,
        "itl_ms": args.itl_ms,
        "window_s": window_s,
        "tokens_per_s": tokens / window_s,
        "expected_tokens_per_s": args.streams * 1000 / args.itl_ms,
        "in_flight_min": min(samples) if samples else None,
        "in_flight_median": pct(samples, 0.5),
        "ts_error_ms_p50": pct(window_errors, 0.5) / 1e6,  # nan: the server sends no stamps
        "ts_error_ms_p99": pct(window_errors, 0.99) / 1e6,
        "ts_error_ms_max": (max(window_errors) / 1e6) if window_errors else None,
        "ts_error_samples": len(window_errors),
        "ts_error_ms_p50_alone_in_read": pct(alone, 0.5) / 1e6,
        "ts_error_ms_p99_alone_in_read": pct(alone, 0.99) / 1e6,
        "ts_error_ms_p99_shared_read": pct(shared, 0.99) / 1e6,
        "events_in_shared_reads": len(shared) / len(window_errors) if window_errors else None,
        "loop_lag_ms_p50": pct(lags, 0.5) / 1e6,
        "loop_lag_ms_p99": pct(lags, 0.99) / 1e6,
        "loop_lag_ms_max": max(lags) / 1e6 if lags else None,
        "send_lateness_ms_p50": pct(late, 0.5) / 1e6,
        "send_lateness_ms_p99": pct(late, 0.99) / 1e6,
        "coalesced_reads": coalesced,
        "coalesced_per_chunk": coalesced / chunks if chunks else 0.0,
        "requests": len(records),
        "failed": len(failed),
        "failure_kinds": sorted({str(r.error_kind) for r in failed}),
        "client_cpu_util": m.cpu_s / window_s,
        "timestamp_source": timestamp_source,
        **{f"server_{k}": v for k, v in m.stats.items()},
        # raw per-event errors and whether each event had its read alone (merged over workers)
        "_errors": array("q", window_errors),
        "_alone": array("b", (per_read[k] == 1 for k in keys)),
        "_samples": samples,
        "_late": late,
    }


async def run_burst(args: argparse.Namespace, port: int) -> dict[str, Any]:
    client = StreamClient(
        f"http://127.0.0.1:{port}/v1",
        api="completions",
        model="gemma-3-270m",
        timeouts=Timeouts(connect_s=30, first_token_s=60, idle_s=30, total_s=600),
        stream_usage=False,
        max_connections=args.burst_streams + 16,
    )
    t_warm = (getattr(args, "t_start_ns", None) or time.perf_counter_ns()) + int(1e9)
    t_end = t_warm + int(args.burst_duration * 1e9)
    chunks = 0
    bad = 0

    async def slot() -> None:
        nonlocal chunks, bad
        while time.perf_counter_ns() < t_end:
            r = await client.stream(
                request_id=0,
                scheduled_ns=0,
                prompt=[1],
                max_tokens=args.burst_tokens,
                prompt_tokens_client=1,
                ignore_eos=False,
            )
            if not r.ok:
                bad += 1
            if r.done_ns and r.done_ns >= t_warm:
                chunks += len(r.chunk_ns)

    await asyncio.sleep(0)
    cpu0 = cpu_s()
    t0 = time.perf_counter_ns()
    await asyncio.gather(*(slot() for _ in range(args.burst_streams)))
    el = (time.perf_counter_ns() - max(t0, t_warm)) / 1e9
    cpu1 = cpu_s()
    await client.aclose()
    return {
        "mode": "burst",
        "streams": args.burst_streams,
        "tokens_per_stream": args.burst_tokens,
        "tokens_per_s": chunks / el,
        "failed": bad,
        "client_cpu_util": (cpu1 - cpu0) / ((time.perf_counter_ns() - t0) / 1e9),
    }


def _loop_factory(no_uvloop: bool) -> tuple[Any, str]:
    if not no_uvloop:
        try:
            import uvloop

            return uvloop.new_event_loop, "uvloop"
        except ImportError:
            pass
    return asyncio.new_event_loop, "asyncio"


def _worker(args: argparse.Namespace, mode: str, port: int, index: int) -> dict[str, Any]:
    """One of --workers processes: its share of the streams, pinned to its core (spawned)."""
    core = args.worker_cores[index % len(args.worker_cores)]
    if core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    if args.nice:
        os.nice(args.nice)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    if args.gc_threshold > 0:
        gc.set_threshold(args.gc_threshold, 50, 100)
    a = argparse.Namespace(**vars(args))
    # streams dealt like send.workers deals requests: slot k to worker k mod N
    a.streams = len(range(index, args.streams, args.workers))
    a.burst_streams = len(range(index, args.burst_streams, args.workers))
    factory, _ = _loop_factory(args.no_uvloop)
    with asyncio.Runner(loop_factory=factory) as runner:
        if mode == "burst":
            res = runner.run(run_burst(a, port))
        else:
            stats_fn = server_stats if index == 0 else (lambda _p, _r=False: {})
            res = runner.run(run_paced(a, port, stats_fn=stats_fn))
    res["core"] = core
    return res


def _merge(mode: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures over all workers: sums of rates, percentiles over every worker's events."""
    out: dict[str, Any] = {"mode": mode, "workers": len(parts)}
    out["tokens_per_s"] = sum(p["tokens_per_s"] for p in parts)
    out["tokens_per_s_per_worker"] = [round(p["tokens_per_s"]) for p in parts]
    out["client_cpu_util_per_worker"] = [round(p["client_cpu_util"], 3) for p in parts]
    out["cores"] = [p["core"] for p in parts]
    out["failed"] = sum(p["failed"] for p in parts)
    if mode == "burst":
        return out
    errs = [e for p in parts for e in p["_errors"]]
    alone_mask = [a for p in parts for a in p["_alone"]]
    alone = [e for e, a in zip(errs, alone_mask, strict=True) if a]
    shared = [e for e, a in zip(errs, alone_mask, strict=True) if not a]
    late = [x for p in parts for x in p["_late"]]
    # streams in flight: each worker samples its own count every 100 ms; the sum of minima is
    # a lower bound of the total, the sum of medians its typical value
    out["expected_tokens_per_s"] = (
        sum(p["streams_requested"] for p in parts) * 1000 / parts[0]["itl_ms"]
    )
    out["in_flight_min_sum"] = sum(min(p["_samples"]) for p in parts if p["_samples"])
    out["in_flight_median_sum"] = sum(pct(p["_samples"], 0.5) for p in parts)
    out["ts_error_ms_p50"] = pct(errs, 0.5) / 1e6
    out["ts_error_ms_p99"] = pct(errs, 0.99) / 1e6
    out["ts_error_ms_max"] = max(errs) / 1e6 if errs else None
    out["ts_error_samples"] = len(errs)
    out["ts_error_ms_p99_alone_in_read"] = pct(alone, 0.99) / 1e6
    out["ts_error_ms_p99_shared_read"] = pct(shared, 0.99) / 1e6
    out["events_in_shared_reads"] = len(shared) / len(errs) if errs else None
    out["send_lateness_ms_p50"] = pct(late, 0.5) / 1e6
    out["send_lateness_ms_p99"] = pct(late, 0.99) / 1e6
    out["loop_lag_ms_p99_per_worker"] = [round(p["loop_lag_ms_p99"], 3) for p in parts]
    out["requests"] = sum(p["requests"] for p in parts)
    out.update({k: v for k, v in parts[0].items() if k.startswith("server_")})
    return out


def _run_workers(args: argparse.Namespace, mode: str, port: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    # one common start for every worker's slots (spawning and importing take a while)
    args.t_start_ns = time.perf_counter_ns() + int(args.worker_lead_s * 1e9)
    with ctx.Pool(args.workers) as pool:
        parts = pool.starmap(_worker, [(args, mode, port, i) for i in range(args.workers)])
    return _merge(mode, parts)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["paced", "burst", "both"], default="both")
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=200, help="tokens per paced request")
    ap.add_argument("--duration", type=float, default=10.0, help="measured window, s")
    ap.add_argument("--ramp-s", type=float, default=1.0, help="spread of the first wave, s")
    ap.add_argument("--warmup-s", type=float, default=2.0, help="after the ramp, not measured")
    ap.add_argument("--burst-streams", type=int, default=100)
    ap.add_argument("--burst-tokens", type=int, default=1000)
    ap.add_argument("--burst-duration", type=float, default=5.0)
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--client-core", type=int, default=1)
    ap.add_argument(
        "--fastsse", type=Path, default=Path(os.environ.get("FASTSSE", DEFAULT_FASTSSE))
    )
    ap.add_argument("--no-uvloop", action="store_true", help="use the standard asyncio loop")
    ap.add_argument(
        "--server-uvloop",
        action="store_true",
        help="run fastsse with --uvloop (uvloop flushes writes after the tick, so its send "
        "stamps precede the real writes by up to a tick: timestamp errors are then inflated)",
    )
    ap.add_argument("--nice", type=int, default=0, help="os.nice() increment for both processes")
    ap.add_argument("--gc-freeze", action="store_true", help="gc.freeze() before the run")
    ap.add_argument(
        "--gc-threshold", type=int, default=0, help="gc.set_threshold(N, 50, 100) when > 0"
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="client processes; > 1 deals the streams over spawned workers, slot k to k mod N",
    )
    ap.add_argument(
        "--worker-cores",
        default="",
        help="comma-separated cores for the workers, cycled (default: --client-core, then "
        "the other usable cores)",
    )
    ap.add_argument("--worker-lead-s", type=float, default=4.0, help="spawn time before start")
    ap.add_argument("--json", action="store_true", help="print one JSON object per mode")
    ap.add_argument("--stream-usage", action="store_true", help="ask for continuous usage")
    ap.add_argument("--ignore-eos", action="store_true", help="send ignore_eos/min_tokens")
    return ap


def _setup(args: argparse.Namespace) -> tuple[Any, str]:
    """Cores, niceness and the GC as asked; the event loop factory and its name."""
    if not args.fastsse.exists():
        raise SystemExit(f"fastsse not found at {args.fastsse}; pass --fastsse PATH")
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    if args.worker_cores:
        args.worker_cores = [int(c) for c in args.worker_cores.split(",")]
    else:
        args.worker_cores = [args.client_core] + [c for c in usable if c != args.client_core]
    if args.workers == 1 and args.client_core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.client_core})
    if args.nice:
        os.nice(args.nice)
    loop_factory = asyncio.new_event_loop
    loop_name = "asyncio"
    if not args.no_uvloop:
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
            loop_name = "uvloop"
        except ImportError:
            pass
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    if args.gc_threshold > 0:
        gc.set_threshold(args.gc_threshold, 50, 100)
    return loop_factory, loop_name


def main() -> None:
    args = _parser().parse_args()
    loop_factory, loop_name = _setup(args)
    modes = ["paced", "burst"] if args.mode == "both" else [args.mode]
    print(
        f"# {args.workers} client process(es) on cores "
        f"{args.worker_cores[: args.workers] if args.workers > 1 else args.client_core} "
        f"({loop_name}), fastsse on core {args.server_core}; "
        f"{os.cpu_count()} CPUs here, shared with other processes",
        flush=True,
    )
    for mode in modes:
        port = free_port()
        proc = start_fastsse(args, mode, port)
        try:
            if args.workers > 1:
                res = _run_workers(args, mode, port)
            else:
                runner_fn = run_paced if mode == "paced" else run_burst
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    res = runner.run(runner_fn(args, port))
                res = {k: v for k, v in res.items() if not k.startswith("_")}
        finally:
            proc.terminate()
            proc.wait(5)
        res["loop"] = loop_name
        if args.json:
            print(json.dumps(res), flush=True)
        else:
            print(f"== {mode}")
            for k, v in res.items():
                print(f"  {k:28s} {v:.4g}" if isinstance(v, float) else f"  {k:28s} {v}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
