"""The one event-loop policy of every command that measures (``probe``, ``bench``, ``demo``).

uvloop where it is installed (tighter timers and I/O wake-ups for send times), else asyncio's
own loop. One policy means the two commands measure with the same client costs.

Stopping: SIGINT and SIGTERM handlers are installed explicitly on the loop, so both stop a
run the same way in the foreground and in a background job (where a shell starts the
process with SIGINT ignored, and Python then never raises KeyboardInterrupt). Either signal
cancels the main task, which a probe turns into a partial result that is written; the
simulator child is stopped by the target's ``async with``. ``stop_exit_code`` gives the exit
code the shell convention expects: 128 + the signal (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["STOP_SIGNALS", "run_async", "stop_exit_code", "stopped_by"]

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_stopped: list[int] = []  # the signal that stopped the latest run_async, if any


def stopped_by() -> int | None:
    """The signal that stopped the latest ``run_async`` (None: it was not stopped)."""
    return _stopped[-1] if _stopped else None


def stop_exit_code() -> int:
    """128 + the stopping signal; 130 (SIGINT) when no signal was seen (a KeyboardInterrupt
    raised some other way)."""
    sig = stopped_by()
    return 128 + (sig if sig is not None else signal.SIGINT)


async def _guarded(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None

    def on_signal(sig: int) -> None:
        _stopped.append(sig)
        main.cancel()  # a second signal cancels again: whatever is cleaning up hurries

    installed = []
    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    try:
        return await coro
    except asyncio.CancelledError:
        if _stopped:
            raise KeyboardInterrupt from None
        raise
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to the end under the one loop policy; SIGINT/SIGTERM cancel it (see the
    module doc). A cancellation that escapes ``coro`` is raised as KeyboardInterrupt."""
    _stopped.clear()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_guarded(coro))
    return uvloop.run(_guarded(coro))
