"""Fixtures shared by the test modules (the builders they use are in ``builders.py``; the
xdist lock that lets a timing test run alone is in ``xdist_exclusive.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from builders import sim8b_config
from tokenwatt.sim import RunningSim, start_sim_thread


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    """The standard simulator (``builders.sim8b_config``) on 127.0.0.1, one per test module;
    a module that needs another configuration defines its own ``sim``."""
    with start_sim_thread(sim8b_config()) as running:
        yield running


pytest_plugins = ["xdist_exclusive"]
