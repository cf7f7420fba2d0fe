"""The sweep's hostile cases, as a user could try them: injected launch lines, secrets in URLs,
basic auth, servers that leave the process group, and a sweep that is stuck or killed.

    PYTHONPATH=src python benchmarks/hostile_sweep.py

``run()`` returns (case, outcome) pairs for whichever ``tokenwatt`` is importable, so the same
script gives a before/after with ``PYTHONPATH=/other/tree/src``. Every server is a small
Python script on 127.0.0.1 in a scratch folder; nothing outlives the script (each case stops
what it started, by PID).

Before (main at 9f72a1a) and after (this tree), measured on the 2-core development machine:

    case                       before                               after
    inject: sh -c bare         INJECTED (pwned file created)        no injection, 1 argument, intact
    inject: sh -c '...'        INJECTED (pwned file created)        no injection, 1 argument, intact
    inject: sh -c "..."        INJECTED (pwned file created)        no injection, 1 argument, intact
    spaces: argv               1 argument                           1 argument
    spaces: sh -c bare         mangled: the program got ["a"]       no injection, 1 argument, intact
    redact: ?k=TOKEN           TOKEN shown                          hidden
    basic auth: user:pass@ URL failed: Name or service not known    200 OK
    health password            in sweep.json, terminal cause        nowhere
    setsid server              alive after the sweep, no warnings   stopped, 1 warning
    double-fork daemon         alive after the sweep, no warnings   stopped, 1 warning
    SIGTERM during a stall     running 30 s later (then killed)     exit 143 after 15 s
    sweep SIGKILLed mid-point  server orphaned                      server stopped by guard

The stall is a 750-byte YAML alias bomb in the bench spec (the sweep expands it inside one C
call), signalled 8 s after the start; "after" is the guard's grace (2 x stop_timeout_s 2 s +
10 s) and the kill. The killed sweep is SIGKILLed (as the out-of-memory killer would) while
its server waits to become healthy.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

SERVER = """
import http.server, os, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
def serve():
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503 if mode == "never" else 200); self.end_headers()
        def log_message(self, *a): pass
    http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
if mode in ("setsid", "daemon"):
    if os.fork() == 0:
        os.setsid()
        if mode == "daemon" and os.fork() != 0:
            os._exit(0)
        print(f"daemon {os.getpid()}", flush=True)
        serve()
    while True:
        time.sleep(1)
serve()
"""
SECRET = "Hunter2Secret"
BENCH = {
    "endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"},
    "model": {"source": "qwen3-8b"},
    "hardware": {"accelerator": "h100-sxm"},
}


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="hostile-sweep-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _inject(template: str, value: str) -> Callable[[], str]:
    def case() -> str:
        from tokenwatt.spec.sweep import render_command

        with scratch() as d:
            try:
                argv = render_command(template, {"tok": value})
            except Exception as exc:  # a refusal is an outcome
                return f"refused: {str(exc)[:50]}"
            res = subprocess.run(
                argv, check=False, cwd=d, capture_output=True, text=True, timeout=20
            )
            if (d / "pwned").exists():
                return "INJECTED (pwned file created)"
            got = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "nothing"
            if got == json.dumps([value]):
                return "no injection, 1 argument, intact"
            return f"mangled: the program got {got[:24]}"

    return case


def _argv_spaces() -> str:
    from tokenwatt.spec.sweep import render_command

    argv = render_command("srv --model {tok}", {"tok": "a b c"})
    return "1 argument" if argv[2:] == ["a b c"] else f"{len(argv) - 2} arguments"


def _redact_query() -> str:
    from tokenwatt.spec import redact_text

    shown = redact_text("power @ http://127.0.0.1:9/metrics?k=TOKEN")
    return "TOKEN shown" if "TOKEN" in shown else "hidden"


def _basic_auth() -> str:
    from tokenwatt import httpget

    want = "Basic " + base64.b64encode(b"tw:" + SECRET.encode()).decode()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.headers.get("Authorization") == want else 401)
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        httpget.get(f"http://tw:{SECRET}@127.0.0.1:{srv.server_address[1]}/", timeout_s=5)
        return "200 OK"
    except httpget.HttpError as exc:
        return f"failed: {str(exc)[:40]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _sweep_spec(d: Path, mode: str, *, health_user: bool = False, timeout_s: float = 20) -> Path:
    (d / "server.py").write_text(SERVER)
    who = f"tw:{SECRET}@" if health_user else ""
    doc = {
        "name": "hostile",
        "server": {
            "command": f"{sys.executable} {d / 'server.py'} {{port}} {mode}",
            "health_url": f"http://{who}127.0.0.1:{{port}}/health",
            "health_timeout_s": timeout_s,
            "stop_timeout_s": 2,
        },
        "points": [{"n": 1}],
        "bench": BENCH,
        "set": {"endpoint.url": "http://127.0.0.1:{port}/v1"},
    }
    path = d / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _health_password() -> str:
    from tokenwatt.load.sweep import run_sweep
    from tokenwatt.spec.sweep import load_sweep_spec

    with scratch() as d:
        spec = load_sweep_spec(_sweep_spec(d, "never", health_user=True, timeout_s=1))
        result = asyncio.run(run_sweep(spec, BENCH, d / "out"))
        where = []
        if SECRET in (d / "out" / "sweep.json").read_text():
            where.append("sweep.json")
        if SECRET in (result.points[0].cause or ""):
            where.append("terminal cause")
        return f"in {', '.join(where)}" if where else "nowhere"


def _left_group(mode: str) -> Callable[[], str]:
    def case() -> str:
        from tokenwatt.load.sweep import run_sweep
        from tokenwatt.spec.sweep import load_sweep_spec

        with scratch() as d:
            spec = load_sweep_spec(_sweep_spec(d, mode))
            result = asyncio.run(run_sweep(spec, BENCH, d / "out"))
            log = (d / "out" / result.points[0].log_file).read_text()
            m = re.search(r"daemon (\d+)", log)
            if m is None:
                return "the daemon never started"
            pid = int(m.group(1))
            time.sleep(0.5)
            alive = _alive(pid)
            _kill(pid)
            n = len(getattr(result.points[0], "warnings", []))
            state = "alive after the sweep" if alive else "stopped"
            return f"{state}, {n or 'no'} warning{'s' if n != 1 else ''}"

    return case


def _cli(d: Path, sweep: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tokenwatt", "sweep", str(sweep), "-o", str(d / "out")]

    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    # the stall expands the bomb: keep it off the machine's memory (inherited by its children)
    resource.prlimit(proc.pid, resource.RLIMIT_AS, (3 << 30, 3 << 30))
    return proc


def _stall() -> str:
    """A 750-byte alias bomb in the bench spec: the sweep stalls expanding it."""
    with scratch() as d:
        path = _sweep_spec(d, "ok")
        plain = yaml.safe_load(path.read_text())
        del plain["bench"]
        doc = yaml.safe_dump(plain)
        levels = ["      a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        for i in range(1, 9):
            refs = ", ".join([f"*a{i - 1}"] * 9)
            levels.append(f"      a{i}: &a{i} [{refs}]")
        bench = yaml.safe_dump({"bench": BENCH}).replace(
            "    url: http://127.0.0.1:1/v1\n",
            "    url: http://127.0.0.1:1/v1\n    extra_body:\n" + "\n".join(levels) + "\n",
        )
        path.write_text(doc + bench)
        proc = _cli(d, path)
        time.sleep(8)  # the sweep has started and is expanding the spec
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
            return f"exit {proc.returncode} after {time.monotonic() - t0:.0f} s"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "running 30 s later (then killed)"


def _killed_mid_point() -> str:
    with scratch() as d:
        proc = _cli(d, _sweep_spec(d, "never", timeout_s=120))
        log = d / "out" / "points" / "00-n=1" / "server.log"
        server = None
        deadline = time.monotonic() + 30
        while server is None and time.monotonic() < deadline:
            server = _listener_pid(log)
            time.sleep(0.1)
        if server is None:
            proc.kill()
            return "the server never started"
        sweeper = int(Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(sweeper, signal.SIGKILL)  # the process running the sweep, as the OOM killer would
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        time.sleep(0.5)
        orphaned = _alive(server)
        _kill(server)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return "server orphaned" if orphaned else "server stopped by guard"


def _listener_pid(log: Path) -> int | None:
    """The PID of the server whose log is ``log`` (its only process), once it runs."""
    if not log.exists():
        return None
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = d.joinpath("cmdline").read_bytes()
                if b"server.py" in cmd and str(log.parents[3]).encode() in cmd:
                    return int(d.name)
    return None


PY, CODE = sys.executable, "import json, sys; print(json.dumps(sys.argv[1:]))"
BARE = f"sh -c 'echo starting {{tok}}; exec {PY} -c \"{CODE}\" {{tok}}'"
SINGLE = f"sh -c \"echo '{{tok}}'; exec {PY} -c '{CODE}' '{{tok}}'\""
DOUBLE = f'sh -c \'echo "{{tok}}"; exec {PY} -c "{CODE}" "{{tok}}"\''
CASES: list[tuple[str, Callable[[], str]]] = [
    ("inject: sh -c bare", _inject(BARE, "x;touch${IFS}./pwned")),
    ("inject: sh -c '...'", _inject(SINGLE, "x;touch${IFS}./pwned")),
    ('inject: sh -c "..."', _inject(DOUBLE, "$(touch${IFS}./pwned)")),
    ("spaces: argv", _argv_spaces),
    ("spaces: sh -c bare", _inject(f"sh -c 'exec {PY} -c \"{CODE}\" {{tok}}'", "a b c")),
    ("redact: ?k=TOKEN", _redact_query),
    ("basic auth: user:pass@ URL", _basic_auth),
    ("health password", _health_password),
    ("setsid server", _left_group("setsid")),
    ("double-fork daemon", _left_group("daemon")),
    ("SIGTERM during a stall", _stall),
    ("sweep SIGKILLed mid-point", _killed_mid_point),
]  # fmt: skip


def run() -> list[tuple[str, str]]:
    """Every case's outcome for the ``tokenwatt`` on the path."""
    out = []
    for name, case in CASES:
        try:
            outcome = case()
        except Exception as exc:  # the tree under test may lack what a case needs
            outcome = f"{type(exc).__name__}: {str(exc)[:50]}"
        out.append((name, outcome))
    return out


if __name__ == "__main__":
    import tokenwatt

    print(f"tokenwatt from {Path(tokenwatt.__file__).parent}")
    for name, outcome in run():
        print(f"{name:30s}{outcome}", flush=True)
