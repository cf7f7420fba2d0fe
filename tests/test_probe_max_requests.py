"""``max_requests`` counts exactly N requests, even where an early stop or a sequential close
would end the window sooner (`tokenwatt probe --max-requests 40` once scheduled 24 of 40 at a
Poisson rate and cancelled 8)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from test_probe_e2e import assert_nothing_lost, sim_spec
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.records import RequestRecord

pytestmark = pytest.mark.timeout(120)


def test_open_loop_max_requests_is_not_cut_short() -> None:
    spec = sim_spec(warmup_s=0.2)
    asked: list[int] = []

    def always(done: Sequence[RequestRecord]) -> bool:
        asked.append(len(done))
        return True  # would stop (or close) the window at the first poll

    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            return await run_probe(
                spec, target.client, rate_rps=20.0, seed=4, max_requests=12,
                should_stop=always, should_close=always,
            )  # fmt: skip

    run = asyncio.run(main())
    assert_nothing_lost(run)
    assert not run.stopped_early and asked == []  # neither hook was consulted
    assert run.metrics.requests_counted == 12
    assert run.metrics.requests_ok == 12 and run.metrics.requests_cancelled == 0
