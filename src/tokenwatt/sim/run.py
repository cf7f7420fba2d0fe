"""Starting the simulator: as a coroutine, in a background thread, or as a child process.

All three give a ``RunningSim`` handle with ``url`` (``http://127.0.0.1:PORT/v1``),
``metrics_url`` and ``stop()``. The thread has its own event loop (uvloop when installed)
but shares the GIL with the caller; the child process (``python -m tokenwatt.sim.child``) has
its own interpreter, so its timing does not suffer from the caller's CPU use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import IO, Any

from tokenwatt.errors import TokenwattError
from tokenwatt.sim.config import SimConfig
from tokenwatt.sim.server import SimServer

__all__ = ["RunningSim", "new_event_loop", "serve_sim", "start_sim_subprocess", "start_sim_thread"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when available (tighter timers, faster sockets), else asyncio's default."""
    try:
        import uvloop  # noqa: PLC0415 - optional

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


class RunningSim:
    """A started simulator. ``server`` is set for in-process ones (thread or coroutine)."""

    def __init__(
        self,
        url: str,
        *,
        server: SimServer | None = None,
        stopper: Any = None,
        process: subprocess.Popen[str] | None = None,
    ) -> None:
        self.url = url
        self.base_url = url.removesuffix("/v1")
        self.metrics_url = self.base_url + "/metrics"
        self.stats_url = self.base_url + "/tokenwatt/sim/stats"
        self.server = server
        self.process = process
        self._stopper = stopper
        self._stopped = False

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._stopper is not None:
            self._stopper()
        if self.process is not None:
            _stop_process(self.process)

    def __enter__(self) -> RunningSim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.asynccontextmanager
async def serve_sim(
    config: SimConfig, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[RunningSim]:
    """``async with serve_sim(config) as sim:`` on the caller's own event loop."""
    server = SimServer(config)
    await server.start(host, port)
    try:
        yield RunningSim(server.url, server=server)
    finally:
        await server.stop()


def start_sim_thread(
    config: SimConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout_s: float = 30.0,
    switch_interval_s: float | None = 0.0005,
) -> RunningSim:
    """Server and engine on their own event loop in a daemon thread; returns once bound.

    The thread shares the GIL with the caller: with Python's default 5 ms switch interval a
    busy caller would delay steps by up to 5 ms, so the process's switch interval is
    lowered to ``switch_interval_s`` (None leaves it alone). Prefer
    ``start_sim_subprocess`` when timing fidelity matters.
    """
    if switch_interval_s is not None and sys.getswitchinterval() > switch_interval_s:
        sys.setswitchinterval(switch_interval_s)
    ready = threading.Event()
    box: dict[str, Any] = {}

    def main() -> None:
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        server = SimServer(config)
        stop_event = asyncio.Event()
        box["loop"], box["stop_event"] = loop, stop_event

        async def body() -> None:
            try:
                await server.start(host, port)
            except BaseException as exc:
                box["error"] = exc
                ready.set()
                return
            box["server"] = server
            ready.set()
            await stop_event.wait()
            await server.stop()

        try:
            loop.run_until_complete(body())
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="tokenwatt-sim", daemon=True)
    thread.start()
    if not ready.wait(timeout_s):
        raise TokenwattError(f"the simulator did not start within {timeout_s:.0f} s")
    if "error" in box:
        err = box["error"]
        if isinstance(err, OSError):
            raise TokenwattError(f"the simulator could not bind {host}:{port}: {err}") from err
        raise err
    server: SimServer = box["server"]

    def stopper() -> None:
        loop: asyncio.AbstractEventLoop = box["loop"]
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(box["stop_event"].set)
        thread.join(timeout=10)

    return RunningSim(server.url, server=server, stopper=stopper)


def start_sim_subprocess(
    config: SimConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout_s: float = 60.0,
    stderr: Any = None,
) -> RunningSim:
    """``python -m tokenwatt.sim.child`` with the config as JSON on its stdin; returns once the
    child printed its JSON ready line (see ``tokenwatt.sim.child``)."""
    cmd = [sys.executable, "-m", "tokenwatt.sim.child"]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr if stderr is not None else subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert proc.stdin is not None and proc.stdout is not None
    request = {"config": config.to_dict(), "host": host, "port": port}
    try:
        proc.stdin.write(json.dumps(request))
        proc.stdin.close()
    except OSError:
        pass  # the child died at once; its stderr says why
    ready = _read_ready(proc.stdout, time.monotonic() + timeout_s)
    if ready is None:
        _stop_process(proc)
        err = proc.stderr.read() if proc.stderr is not None else ""
        tail = err.strip().splitlines()[-1:] or ["no output"]
        raise TokenwattError(f"the simulator process did not start: {tail[0]}")
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            threading.Thread(target=_drain, args=(pipe,), daemon=True).start()
    return RunningSim(str(ready["url"]), process=proc)


def _read_ready(stdout: IO[str], deadline: float) -> dict[str, Any] | None:
    """The child's JSON ready line; None when it exits or the deadline passes first.

    Lines that are not a JSON object with ``ready: true`` are skipped (a library may print).
    """
    while time.monotonic() < deadline:
        line = stdout.readline()
        if not line:
            return None
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("ready") is True and "url" in data:
            return data
    return None


def _drain(pipe: IO[str]) -> None:
    """Keep reading a child's pipe so that it never blocks on a full one."""
    with contextlib.suppress(ValueError, OSError):
        for _ in pipe:
            pass


def _stop_process(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
