"""Under pytest-xdist, a test marked ``exclusive`` runs with no other worker's test beside it.

Those tests hold a figure measured against the wall clock (the client's send lateness or kernel
stamps, MBU, tokens/J, T or B over HTTP against the simulator's truth, a stall): a second
worker's test on the same cores moves their figures, not the code. The mark goes on each such
test, not on its module, so a module's argument checks, refusals, file shapes and virtual-time
figures keep sharing the cores. The exclusive tests run first, as one block on one worker, so
the other worker waits for them once. Loaded as a plugin by ``conftest.py`` (and by
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under xdist, the exclusive tests first, in their collected order, the rest after them.

    xdist's ``worksteal`` scheduler (pyproject's ``--dist``) hands each worker a run of
    consecutive tests (a first share, then halves stolen from the longest queue's tail), so
    the exclusive ones land together on one worker, which holds the lock across them (see
    ``pytest_runtest_protocol``): the other worker waits once for one block instead of once
    per exclusive test, each wait also costing the rest of whatever test it had running.
    Every worker sorts alike, so the collections still agree. Serial runs keep pytest's order."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    items[:] = sorted(items, key=lambda item: not runs_alone(item))


class _Lock:
    """One worker's hold on the run's readers-writer lock, kept open across tests so a run of
    exclusive tests can keep it without letting another worker's test in between."""

    def __init__(self, paths: tuple[Path, Path]) -> None:
        self.gate = open(paths[0], "a")  # noqa: SIM115 (held for the worker's whole run)
        self.lock = open(paths[1], "a")  # noqa: SIM115
        self.alone = False

    def take(self, alone: bool) -> None:
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        self.alone = alone

    def release(self) -> None:
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        self.alone = False


_LOCK = pytest.StashKey[_Lock]()


def pytest_unconfigure(config: pytest.Config) -> None:
    held = config.stash.get(_LOCK, None)
    if held is not None:
        held.gate.close()
        held.lock.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Exclusive tests take the lock alone, every other test shares it: a readers-writer lock
    over ``flock``; the turnstile, held by a writer while it waits, keeps new readers from
    starving it. An exclusive test whose next test on this worker is exclusive too keeps the
    lock for it (xdist names the next test before running this one), so consecutive exclusive
    tests run as one block. Taken around the whole test, outside pytest-timeout's timer (this
    wrapper runs first), so the wait for a neighbour's long test never counts against a test's
    own timeout. Serial runs take no lock."""
    paths = lock_paths(item.config)
    if paths is None:
        yield
        return
    held = item.config.stash.get(_LOCK, None)
    if held is None:
        held = item.config.stash[_LOCK] = _Lock(paths)
    exclusive = runs_alone(item)
    if not (exclusive and held.alone):
        held.take(exclusive)
    keep = False
    try:
        yield
        keep = exclusive and nextitem is not None and runs_alone(nextitem)
    finally:
        if not keep:
            held.release()
