"""Cost and outcome of hostile surfaces, each in a child process with a memory cap and a time
cap: a /metrics that trickles or floods, engine counters that are negative or from two
replicas, a GGUF that lies, a big trace, a stale answer; then the sweep's (command injection,
secrets, processes that leave the group, SIGTERM), the files' (alias bombs, device files, deep
nesting, impossible figures) and the client's (lying token counts, stale answers with and
without ids, unresponsive and stalling servers) from `hostile_sweep.py`, `hostile_files.py` and
`hostile_client.py`, whose docstrings hold their before/after tables. Prints one line per case.

    PYTHONPATH=src python benchmarks/hostile_surfaces.py [--gguf PATH] [--only PART]

PART: core, sweep, files or client.

Run it against another tree (PYTHONPATH=/other/src) for a before/after. Figures: seconds of
wall time and CPU, peak RSS in MB (the child's ru_maxrss), and the outcome in a few words.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAP_S = 60
CAP_MB = 3000

_PRELUDE = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({cap} << 20, {cap} << 20))
sys.path.insert(0, {tests!r})
t0, c0 = time.perf_counter(), time.process_time()
def done(outcome):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{{time.perf_counter() - t0:7.2f}} s wall {{time.process_time() - c0:7.2f}} s cpu "
          f"{{rss:7.0f}} MB  {{outcome}}")
"""

_SCRAPE = """
from faultserver import FaultServer, threaded
from tokenwatt.engine import EngineScraper
with threaded(FaultServer(metrics={mode!r})) as srv:
    sc = EngineScraper(f"http://127.0.0.1:{{srv.port}}/metrics", "vllm", interval_s=0.05,
                       timeout_s=5.0).start()
    while srv.scrapes < 5 and sc.unavailable is None:
        time.sleep(0.02)
    w = sc.stop()
t = w.generated_tokens_per_s
done(f"unavailable={{(w.unavailable or '')[:70]!r}} engine T={{t}} "
     f"warnings={{len(sc.warnings)}}")
"""

_GGUF = """
from tokenwatt.geometry.gguf import geometry_from_gguf
try:
    g = geometry_from_gguf({path!r})
    done(f"ok: {{g.layers}} layers, {{g.stored_weight_bytes}} weight bytes")
except Exception as exc:
    done(f"{{type(exc).__name__}}: {{str(exc)[-80:]}}")
"""

_TRACE = """
from pathlib import Path
from tokenwatt.traffic.traces import load_trace
try:
    t = load_trace(Path({path!r}), {fmt!r})
    done(f"ok: {{len(t.rows)}} rows")
except Exception as exc:
    done(f"{{type(exc).__name__}}: {{str(exc)[-80:]}}")
"""

_STALE = """
import asyncio
from faultserver import LATE_TOKENS, FaultServer
from tokenwatt.client import StreamClient
from tokenwatt.load.probe import run_probe
from tokenwatt.spec import ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts
async def main():
    async with FaultServer(modes=["late_second_response"]) as srv:
        spec = parse_spec({{"name": "s", "endpoint": {{"url": srv.url, "model": "m",
            "prompt_format": "token_ids"}}, "model": {{"source": "llama-3.1-8b"}},
            "hardware": {{"accelerator": "h100-sxm"}},
            "workload": {{"input_tokens": 16, "output_tokens": 8, "seed": 1}},
            "slo": {{"ttft_ms": 500, "tpot_ms": 200}}}})
        c = StreamClient(srv.url, api="completions", model="m", timeouts=Timeouts(total_s=10))
        run = await run_probe(spec, c, rate_rps=None, concurrency=1, seed=1, max_requests=40,
            settings=ProbeSettings(warmup_s=0, min_duration_s=1, max_duration_s=30,
                                   early_stop=False))
        await c.aclose()
        return run
run = asyncio.run(main())
took = sum(1 for r in run.records if r.ok and r.output_tokens == LATE_TOKENS)
refused = sum(1 for r in run.records if "stale" in (r.error_message or ""))
done(f"{{len(run.records)}} records: {{took}} took a stale answer as their own, {{refused}} "
     f"refused; stray_answers in the result: {{getattr(run, 'stray_answers', 'absent')}}")
"""


def child(name: str, body: str, **fmt: object) -> None:
    code = _PRELUDE.format(cap=CAP_MB, tests=str(ROOT / "tests")) + body.format(**fmt)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=CAP_S,
            check=False,
        )
        line = out.stdout.strip().splitlines()[-1:] or [
            f"rc={out.returncode} {out.stderr.strip().splitlines()[-1:]}"
        ]
        print(f"{name:28s} {line[0]}", flush=True)
    except subprocess.TimeoutExpired:
        print(f"{name:28s} still running after {CAP_S} s (killed)", flush=True)


def _gguf_lie(folder: Path) -> Path:
    """A 300-byte GGUF whose block_count is 2^31 (hand-built, as tests/test_geometry_hostile)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_geometry_hostile import gguf_bytes, good_meta, good_tensors, write

    return write(folder / "lie.gguf", *gguf_bytes(good_meta(block_count=2**31), good_tensors()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", help="a real GGUF to time (e.g. Gemma 3 270M)")
    ap.add_argument("--only", choices=("core", "sweep", "files", "client"))
    args = ap.parse_args()
    print(f"tree: {os.environ.get('PYTHONPATH', '(installed)')}")
    if args.only in (None, "core"):
        _core(args.gguf)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    for part in ("sweep", "files", "client"):
        if args.only in (None, part):
            module = __import__(f"hostile_{part}")
            for case, outcome in module.run():
                print(f"{part:6} {case:45} {outcome}")


def _core(gguf: str | None) -> None:
    for mode in ("trickle", "flood", "negative", "nan", "replicas"):
        child(f"/metrics {mode}", _SCRAPE, mode=mode)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        child("GGUF block_count 2^31", _GGUF, path=str(_gguf_lie(folder)))
        if gguf:
            child("GGUF real file", _GGUF, path=gguf)
        big = folder / "mc.jsonl"
        row = '{"timestamp": %d, "input_length": 2048, "output_length": 9, "hash_ids": [%s]}\n'
        ids = ", ".join(str(i) for i in range(4))
        with big.open("w") as f:
            f.writelines(row % (i, ids) for i in range(1_000_001))
        child("Mooncake 10^6+1 rows", _TRACE, path=str(big), fmt="mooncake")
        az = folder / "az.csv"
        az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\ninf,2,3\n")
        child("Azure inf timestamp", _TRACE, path=str(az), fmt="azure")
    child("stale answers, 40 requests", _STALE)


if __name__ == "__main__":
    main()
