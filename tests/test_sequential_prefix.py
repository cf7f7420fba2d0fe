"""The sequential pass reads the counted requests in send order, never the fast ones first.

Near saturation a pass read from every finished request read the quick ones while the slow
ones (the misses) were still running: in virtual time a probe closed on 194 clean requests
judged 105 misses of 335 once they had drained. ``load.probe`` hands ``should_close`` the
counted requests sent before the oldest one still in flight; with output lengths drawn from
4 to 64 tokens requests finish out of send order, and the hook must still see a prefix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from test_probe_e2e import assert_nothing_lost, sim_spec
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.records import RequestRecord
from tokenwatt.spec import parse_spec

pytestmark = pytest.mark.timeout(120)


def test_should_close_sees_a_send_order_prefix() -> None:
    base = sim_spec(warmup_s=0.3, min_duration_s=3.0, min_requests=40).model_dump(mode="json")
    base["workload"]["output_tokens"] = {"kind": "uniform", "min": 4, "max": 64}
    spec = parse_spec(base)
    seen: list[list[int]] = []

    def close(done: Sequence[RequestRecord]) -> bool:
        seen.append(sorted(r.request_id for r in done))
        return False  # never close: the probe runs its window, the hook only watches

    async def main() -> ProbeRun:
        async with open_target(spec) as target:
            return await run_probe(spec, target.client, rate_rps=30.0, seed=5, should_close=close)

    run = asyncio.run(main())
    assert_nothing_lost(run)
    first = min(r.request_id for r in run.counted)
    assert seen, "the hook was never consulted"
    for ids in seen:
        assert ids == list(range(first, first + len(ids)))  # contiguous from the first counted
    # requests did finish out of send order, so the prefix was shorter than what had finished
    order = [r.request_id for r in sorted(run.counted, key=lambda r: r.done_ns or 0)]
    assert order != sorted(order)
