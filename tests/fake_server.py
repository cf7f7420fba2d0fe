"""A small stand-in for an inference server, for the sweep's process tests.

    python fake_server.py PORT MODE [SECONDS]

MODE: ok (serves /health, with a forked child that sleeps: the group must be stopped whole),
fail (prints an error and exits 3 before listening), die (serves, then exits 4 after SECONDS),
ignore-term (serves; it and its child ignore SIGTERM, so only SIGKILL stops them),
never-healthy (listens but answers 503). The child's PID is printed to the log as
``child PID``.

Modes that leave the process group (the server stays in the foreground, sleeping; what serves
the port has left): setsid (a child calls ``setsid`` and serves), daemon (a classic double fork:
child ``setsid``, grandchild serves, child exits), daemon-noenv (the same, the grandchild
re-executed with an empty environment, so only its port ties it to the server). The process
that serves prints ``daemon PID``. Mode serve (internal) just serves.
"""

from __future__ import annotations

import http.server
import os
import signal
import sys
import threading
import time


def serve(port: int, status: int = 200) -> None:
    """Serve /health on ``port`` in this process, forever."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def leave_group(port: int, mode: str) -> None:
    """The foreground process sleeps; a process outside its group serves ``port``."""
    if os.fork() == 0:
        os.setsid()
        if mode != "setsid" and os.fork() != 0:
            os._exit(0)  # the middle process of a double fork
        print(f"daemon {os.getpid()}", flush=True)
        if mode == "daemon-noenv":
            os.execve(sys.executable, [sys.executable, __file__, str(port), "serve"], {})
        serve(port)
    while True:
        time.sleep(1)


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "serve":
        serve(port)
    if mode in ("setsid", "daemon", "daemon-noenv"):
        leave_group(port, mode)
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    if mode == "fail":
        print("fake: cannot load the model (out of memory)", flush=True)
        sys.exit(3)
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:  # the child: an engine worker that outlives nothing on its own
        time.sleep(3600)
        os._exit(0)
    print(f"child {pid}", flush=True)
    status = 503 if mode == "never-healthy" else 200

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"fake: listening on {port}", flush=True)
    if mode == "die":
        time.sleep(seconds)
        print("fake: crashed", flush=True)
        os._exit(4)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
