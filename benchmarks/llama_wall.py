"""Wall time of `tokenwatt bench` against a real llama-server, with the boundary and its interval.

    python benchmarks/llama_wall.py                                   # the flag form, defaults
    python benchmarks/llama_wall.py --timeout 560 -- --duration 20    # bench flags after --

Starts llama.cpp's ``llama-server`` with the CI model (Gemma 3 270M Q4_K_M; found as the
realengine tests find them: ``TOKENWATT_LLAMA_SERVER``/``TOKENWATT_GGUF`` or
``~/.cache/tokenwatt-ci``) on one core (``taskset -c 0``, ``-t 1``, 4 slots, continuous
batching) and runs the flag form a user would type for it, the client on the other core:

    tokenwatt bench --base-url URL --model gemma-3-270m --api completions
        --slo-ttft-ms 2000 --slo-tpot-ms 100 --set model.source=GGUF
        --set hardware.accelerator=null --set hardware.custom.bandwidth_bytes_per_s=B ...

p99 TTFT ≤ 2 s and TPOT ≤ 100 ms (10 tokens/s per stream, faster than reading) are the SLOs
of issue 22's llama-server case (``--ttft-ms``/``--tpot-ms`` change them); B is this
machine's measured single-thread read bandwidth (``tokenwatt.hardware.measure``: one thread,
as the server's ``-t 1``). Prints the wall time,
the load average before and after (the machine is shared), the boundary with its interval,
every probe and the warnings. Bounded: at ``--timeout`` the bench gets SIGINT (it keeps what
was measured and says so), SIGKILL 60 s later; the server is stopped in every case.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from search_wall import _loadavg, _summary  # the same figures as the simulator's run

from tokenwatt.hardware.measure import measure_read_bandwidth

CACHE = Path(os.environ.get("TOKENWATT_CI_CACHE", Path.home() / ".cache" / "tokenwatt-ci"))
ALIAS = "gemma-3-270m"


def _find(env: str, path: Path) -> Path:
    p = Path(os.environ.get(env, path))
    if not p.is_file():
        raise SystemExit(f"{p} not found: run .ci/setup-realengine or set {env}")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") else []


def _start_server(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = _find("TOKENWATT_LLAMA_SERVER", CACHE / "bin" / "llama-server")
    gguf = _find("TOKENWATT_GGUF", CACHE / "models" / "gemma-3-270m-q4_k_m.gguf")
    port = _free_port()
    cmd = [*_pin(0), str(server), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
           "-c", "8192", "-np", "4", "-cb", "-t", "1", "--alias", ALIAS, "--no-jinja",
           "--chat-template", "gemma", "--metrics"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited with {proc.returncode}: see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.25)
    _stop(proc)
    raise SystemExit("llama-server did not become healthy within 60 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _bench(
    url: str, out: Path, slo_ms: tuple[float, float], extra: list[str], timeout_s: float
) -> tuple[float, int]:
    gguf = _find("TOKENWATT_GGUF", CACHE / "models" / "gemma-3-270m-q4_k_m.gguf")
    bandwidth = measure_read_bandwidth().bandwidth_bytes_per_s
    cmd = [*_pin(1), sys.executable, "-m", "tokenwatt", "bench", "--base-url", url,
           "--model", ALIAS, "--api", "completions", "--slo-ttft-ms", f"{slo_ms[0]:g}",
           "--slo-tpot-ms", f"{slo_ms[1]:g}", "--set", f"model.source={gguf}",
           "--set", "hardware.accelerator=null",
           "--set", f"hardware.custom.bandwidth_bytes_per_s={bandwidth:.4g}",
           "--set", "hardware.custom.memory_bytes=2.4e10",
           "--set", "hardware.custom.measured=true", "--out", str(out), "-q", *extra]  # fmt: skip
    print("bench:", " ".join(cmd[len(_pin(1)) + 2 :]))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        print(f"-- {timeout_s:g} s reached: SIGINT (the bench keeps what it measured)")
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    return time.perf_counter() - t0, rc


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--timeout", type=float, default=3600, help="SIGINT the bench after, s")
    ap.add_argument("--ttft-ms", type=float, default=2000, help="p99 TTFT limit")
    ap.add_argument("--tpot-ms", type=float, default=100, help="p99 TPOT limit")
    ap.add_argument("extra", nargs="*", help="more bench flags (after --)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        server, url = _start_server(Path(tmp) / "llama-server.log")
        try:
            print(f"load average before: {_loadavg()}")
            wall, rc = _bench(url, out, (args.ttft_ms, args.tpot_ms), args.extra, args.timeout)
            print(f"load average after: {_loadavg()}")
            print(f"wall time {wall:.1f} s ({wall / 60:.2f} min), exit {rc}")
        finally:
            _stop(server)
        if (out / "result.json").exists():
            _summary(out)


if __name__ == "__main__":
    main()
