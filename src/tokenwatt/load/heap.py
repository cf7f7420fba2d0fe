"""The collector held off the sender's heap while a probe runs.

A full (generation 2) collection walks every tracked object of the process: the imported
modules, the spec and result models, the records of earlier probes. In the demo it stopped the
event loop for 50-300 ms about once a probe, and the sends due in that pause left late
(measured: a 115 ms generation-2 pause inside probe 2 at 24 req/s gave a send-lateness p99 of
44 ms, and the "client sent requests late" self-check fired on a quiet machine; with the heap
frozen the generation-2 pauses inside the windows were gone). ``frozen_heap`` moves every
object that exists when a probe starts into the permanent generation (``gc.freeze``), so
the collections during the probe walk only what the probe itself allocates; at the end
``gc.unfreeze`` hands them back, and garbage among them is collected after the probe. No
collection is forced at the start (that would itself cost a pause of that size per probe).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen_heap"]

_depth = 0  # nested blocks freeze and unfreeze once
_ours = False  # whether the outermost block froze (a heap frozen by its owner stays so)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the heap for the duration of the block (the outermost block only; a heap
    already frozen by someone else is left as it is, frozen, on both ends)."""
    global _depth, _ours  # noqa: PLW0603 - one process-wide collector, one counter
    if _depth == 0:
        _ours = gc.get_freeze_count() == 0
        if _ours:
            gc.freeze()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _ours:
            gc.unfreeze()
