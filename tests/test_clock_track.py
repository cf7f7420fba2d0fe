"""An actor's clock followed through a probe (``send.clock_track``), without Ray.

The truth: a stand-in actor whose clock is this process's monotonic clock plus a known offset
that drifts at a known rate (or steps once), read through the same exchange the coordinator
uses for Ray actors (``ray_workers.measure_offset``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tokenwatt.clock import now_ns
from tokenwatt.send.clock_track import OffsetTrack, clock_limit_ns
from tokenwatt.send.ray_workers import measure_offset


class _Remote:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn

    def remote(self) -> Awaitable[Any]:
        async def call() -> Any:
            await asyncio.sleep(0)  # a hop through the loop, as an actor call
            return self.fn()

        return call()


class _DriftingActor:
    """``clock_ns``: ours + base + drift × elapsed (+ a step after ``step_at_ns``)."""

    def __init__(self, base_ns: int, drift_ppm: float, step_ns: int = 0, step_at_ns: int = 0):
        self.t0 = now_ns()
        self.base, self.ppm, self.step, self.step_at = base_ns, drift_ppm, step_ns, step_at_ns
        self.clock_ns = _Remote(lambda: now_ns() + self.true_offset(now_ns()))
        self.node_id = _Remote(lambda: "node-under-test")

    def true_offset(self, t_ns: int) -> int:
        jump = self.step if self.step_at and t_ns >= self.t0 + self.step_at else 0
        return self.base + round((t_ns - self.t0) * self.ppm * 1e-6) + jump


def _follow(actor: _DriftingActor, samples: int, every_s: float) -> OffsetTrack:
    async def main() -> OffsetTrack:
        track = OffsetTrack()
        for i in range(samples):
            if i:
                await asyncio.sleep(every_s)
            o = await measure_offset(actor, 0)
            track.add(now_ns(), o.offset_ns, o.uncertainty_ns)
        return track

    return asyncio.run(main())


def test_a_drifting_clock_is_interpolated_and_its_drift_reported() -> None:
    actor = _DriftingActor(base_ns=1_037_000_000_000, drift_ppm=500.0)
    track = _follow(actor, samples=6, every_s=0.1)
    drift = track.drift_ppm()
    assert drift is not None and drift == pytest.approx(500.0, abs=50.0)
    # the interpolated offset at any instant of the run within its stated uncertainty
    u = track.uncertainty()
    for t in (track.at_ns[0] + k * (track.at_ns[-1] - track.at_ns[0]) // 7 for k in range(8)):
        assert abs(track.at(t) - actor.true_offset(t)) <= u + 50_000
    # a single measurement held flat would be off by drift × elapsed at the end
    end = track.at_ns[-1]
    assert abs(track.offset_ns[0] - actor.true_offset(end)) > 200_000
    assert track.refusal(clock_limit_ns([2000.0, 200.0]), "worker 0") is None


def test_a_stepped_clock_is_refused_with_the_remedy() -> None:
    actor = _DriftingActor(base_ns=-37_000_000_000, drift_ppm=0.0, step_ns=30_000_000)
    actor.step_at = 150_000_000  # the host's clock steps by 30 ms 0.15 s into the probe
    track = _follow(actor, samples=5, every_s=0.1)
    assert track.unexplained_ns() >= 10_000_000  # the step: no line through the samples
    limit = clock_limit_ns([2000.0, 50.0])  # 5 ms
    why = track.refusal(limit, "worker 3 (Ray actor on node abc)")
    assert why is not None and why.startswith("clock of worker 3 (Ray actor on node abc)")
    assert "> 5.00 ms (10% of the tightest SLO limit)" in why and "NTP/PTP" in why
    assert clock_limit_ns([None, None]) is None and track.refusal(None, "w") is None


def test_wide_samples_do_not_set_the_offset_but_a_step_is_still_seen() -> None:
    """Hand-built samples: one exchange held up by load (± 5 ms) between tight ones is not
    read for the offset; a later step of 30 ms shows in the unexplained part."""
    s = 1_000_000_000
    track = OffsetTrack()
    for at, off, unc in ((0, 0, 50_000), (s, 3_000_000, 5_000_000), (2 * s, 20_000, 60_000)):
        track.add(at, off, unc)
    assert track.at(s) == 10_000  # the line through the tight samples, not the wide one
    assert track.uncertainty() == 60_000 and track.best_ns == 0 and track.measured == 3
    assert track.drift_ppm() == pytest.approx(10.0)
    track.add(3 * s, 30_020_000, 60_000)  # the clock stepped by 30 ms
    assert track.unexplained_ns() > 5_000_000 and track.uncertainty() > 5_000_000
