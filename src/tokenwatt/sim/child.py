"""The simulator as a child process: ``python -m tokenwatt.sim.child`` with JSON on stdin.

stdin holds one JSON object, ``{"config": SimConfig.to_dict(), "host": ..., "port": ...}``.
Once listening, the child prints one machine-readable line on stdout,
``{"ready": true, "url": "http://127.0.0.1:PORT/v1", "metrics_url": ..., "pid": ...}``, and
serves until SIGTERM or SIGINT, then closes its truth log and exits 0. A bad config or a busy
port is one line on stderr and exit status 2. The parent (``start_sim_subprocess``) reads the
ready line as JSON rather than searching a sentence meant for people.

``serve`` is also what ``tokenwatt sim`` runs; only its announcement differs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from tokenwatt.errors import SpecError, TokenwattError
from tokenwatt.sim.config import SimConfig
from tokenwatt.sim.server import SimServer

__all__ = ["ready_line", "serve"]

READY_KEY = "ready"


def ready_line(server: SimServer) -> str:
    """The JSON line announcing a listening simulator."""
    return json.dumps(
        {
            READY_KEY: True,
            "url": server.url,
            "metrics_url": server.metrics_url,
            "pid": os.getpid(),
        }
    )


def serve(config: SimConfig, host: str, port: int, announce: Callable[[SimServer], None]) -> None:
    """Serve until SIGINT/SIGTERM on a fresh loop; ``announce`` runs once it is listening."""
    from tokenwatt.sim.run import new_event_loop  # noqa: PLC0415 - run imports this module

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    server = SimServer(config, manage_gc=True)

    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start(host, port)
        except OSError as exc:
            raise SpecError(f"tokenwatt sim cannot bind {host}:{port}: {exc.strerror}") from None
        announce(server)
        await stop.wait()
        await server.stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def _read_request(text: str) -> tuple[SimConfig, str, int]:
    try:
        data: Any = json.loads(text)
        cfg = data["config"]
        host = str(data.get("host", "127.0.0.1"))
        port = int(data.get("port", 0))
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecError(
            f"tokenwatt.sim.child: stdin must be JSON {{'config': ..., 'host': ..., 'port': ...}}"
            f" ({type(exc).__name__}: {exc})"
        ) from None
    try:
        return SimConfig.from_dict(cfg), host, port
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecError(
            f"tokenwatt.sim.child: config is not a SimConfig.to_dict() ({type(exc).__name__}: "
            f"{exc}); build it with SimConfig(...).to_dict()"
        ) from None


def main() -> int:
    try:
        config, host, port = _read_request(sys.stdin.read())
        serve(config, host, port, lambda s: print(ready_line(s), flush=True))
    except TokenwattError as exc:
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
