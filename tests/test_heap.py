"""The heap frozen while a probe runs (``load.heap``): no full collection walks what existed
before the probe, and it is handed back after."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

import pytest

from test_probe_e2e import sim_spec
from tokenwatt.load.heap import frozen_heap
from tokenwatt.load.probe import ProbeProgress, run_probe
from tokenwatt.load.target import open_target


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``gc.freeze`` / ``gc.unfreeze`` call from here on, in order (still made)."""
    calls: list[str] = []
    for name in ("freeze", "unfreeze"):
        real = getattr(gc, name)

        def counted(real: Callable[[], None] = real, name: str = name) -> None:
            calls.append(name)
            real()

        monkeypatch.setattr(gc, name, counted)
    return calls


def test_frozen_for_the_block_once_and_handed_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frozen objects may die while frozen (another thread of the process drops the last
    reference), so the count may fall; a second freeze would raise it by the fresh objects."""
    calls = _count_calls(monkeypatch)
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0  # everything that existed is out of the collections' walk
        fresh = [[] for _ in range(10_000)]  # tracked after the freeze
        with frozen_heap():  # nested: the same freeze, not a second one
            assert gc.get_freeze_count() <= frozen
        assert 0 < gc.get_freeze_count() <= frozen  # the inner block did not unfreeze
        del fresh
    assert gc.get_freeze_count() == 0
    assert calls == ["freeze", "unfreeze"]


def test_a_heap_frozen_by_its_owner_stays_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.freeze()
    try:
        owner = gc.get_freeze_count()
        calls = _count_calls(monkeypatch)
        fresh = [[] for _ in range(10_000)]  # a freeze of ours would take them too
        with frozen_heap():
            assert 0 < gc.get_freeze_count() <= owner
        assert 0 < gc.get_freeze_count() <= owner
        del fresh
        assert calls == []  # neither frozen again nor handed back: the owner's to unfreeze
    finally:
        monkeypatch.undo()
        gc.unfreeze()


@pytest.mark.timeout(60)
def test_a_probe_runs_with_the_heap_frozen() -> None:
    spec = sim_spec(warmup_s=0.2, min_duration_s=1.0, min_requests=5, max_duration_s=5)
    counts: list[int] = []

    def seen(p: ProbeProgress) -> None:
        counts.append(gc.get_freeze_count())

    async def main() -> None:
        async with open_target(spec) as target:
            run = await run_probe(spec, target.client, rate_rps=10.0, seed=1, on_progress=seen)
            assert run.metrics.requests_ok >= 5

    asyncio.run(main())
    assert counts and min(counts) > 0  # frozen at every progress call during the probe
    assert gc.get_freeze_count() == 0  # and handed back
