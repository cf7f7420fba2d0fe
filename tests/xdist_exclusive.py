"""Under pytest-xdist, a test marked ``exclusive`` runs with no other worker's test beside it.

Those tests hold a figure measured against the wall clock (the client's send lateness or kernel
stamps, MBU, tokens/J, T or B over HTTP against the simulator's truth, a stall): a second
worker's test on the same cores moves their figures, not the code. The mark goes on each such
test, not on its module, so a module's argument checks, refusals, file shapes and virtual-time
figures keep sharing the cores. Loaded as a plugin by ``conftest.py`` (and by
``test_xdist_exclusive.py``, which checks the lock on a suite of its own).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

# The marked runs (``.ci/run``'s last stage) are real-time end-to-end runs almost throughout: a
# test with one of these markers runs alone unless it is marked ``virtual``.
LONG_RUN_MARKERS = ("slow", "realengine", "browser", "multihost")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "exclusive: holds a figure measured against the wall clock; under pytest-xdist it runs "
        "with no other worker's test beside it",
    )
    config.addinivalue_line(
        "markers",
        "virtual: reads no figure off the wall clock (virtual time, or pure computation), so it "
        "shares the cores under pytest-xdist even where its module or markers would not",
    )


def runs_alone(item: pytest.Item) -> bool:
    """Whether ``item`` takes the lock exclusively: ``virtual`` says it cannot be moved by a
    neighbour; otherwise an ``exclusive`` mark (on it or its module) or a long-run marker (real
    time end to end unless said otherwise) puts it alone."""
    if item.get_closest_marker("virtual") is not None:
        return False
    if item.get_closest_marker("exclusive") is not None:
        return True
    return any(item.get_closest_marker(name) is not None for name in LONG_RUN_MARKERS)


def lock_paths(config: pytest.Config) -> tuple[Path, Path] | None:
    """The run's turnstile and lock files, shared by its workers (named by xdist's run id), or
    None outside xdist."""
    run = getattr(config, "workerinput", {}).get("testrunuid")
    if run is None or os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    folder = Path(tempfile.gettempdir())
    return folder / f"xdist-{run}.turnstile", folder / f"xdist-{run}.lock"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """Exclusive tests take the lock alone, every other test shares it: a readers-writer lock
    over ``flock``; the turnstile, held by a writer while it waits, keeps new readers from
    starving it. Taken around the whole test, outside pytest-timeout's timer (this wrapper
    runs first), so the wait for a neighbour's long test never counts against a test's own
    timeout. Serial runs take no lock."""
    paths = lock_paths(item.config)
    if paths is None:
        yield
        return
    exclusive = runs_alone(item)
    with open(paths[0], "a") as gate, open(paths[1], "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
