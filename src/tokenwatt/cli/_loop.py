"""The one event-loop policy of every command that measures (``probe``, ``bench``, ``demo``).

uvloop where it is installed (tighter timers and I/O wake-ups for send times), else asyncio's
own loop. One policy means the two commands measure with the same client costs. Either way
Ctrl-C cancels the main task, which a probe turns into a partial result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_async"]

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
