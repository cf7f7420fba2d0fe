"""Arrival schedules, drawn from a seed before they are needed.

Open loop: a renewal process at rate λ whose gaps are exponential (Poisson), gamma with shape
k and scale 1/(λk) (mean 1/λ, coefficient of variation 1/√k) or constant 1/λ. The first
arrival comes one gap after the start, as in a renewal process started at time 0. Gaps are
never rescaled to make the schedule end on time (vLLM ``bench serve`` rescales, which makes the
process no longer Poisson): the number of arrivals in a window is random, as it is in service.

Gaps are drawn in fixed blocks from a dedicated random stream, so the schedule depends only on
(seed, kind, rate, burstiness), however much of it a probe consumes.

Closed loop: ``concurrency`` requests in flight; each finished request starts the next.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tokenwatt.errors import SpecError
from tokenwatt.spec.workload import Arrival, Concurrency, Constant, Gamma, Poisson

__all__ = ["ClosedLoop", "OpenLoopSchedule", "make_arrivals"]

_BLOCK = 4096
_ARRIVAL_STREAM = 0x41525256  # "ARRV": the arrival stream of a probe's seed


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """Keep ``concurrency`` requests in flight; a request starts when another one ends."""

    concurrency: int


@dataclass(frozen=True, slots=True)
class OpenLoopSchedule:
    """Arrival times of a renewal process, in ns after the probe's start."""

    kind: Literal["poisson", "gamma", "constant"]
    rate_rps: float
    seed: int
    burstiness: float = 1.0  # gamma shape k

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
            raise SpecError(f"rate must be a positive number of requests/s, got {self.rate_rps}")
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise SpecError(f"workload.arrival.burstiness must be > 0, got {self.burstiness}")

    def _gaps_s(self, rng: np.random.Generator) -> np.ndarray:
        mean = 1.0 / self.rate_rps
        if self.kind == "poisson":
            return rng.exponential(mean, size=_BLOCK)
        if self.kind == "gamma":
            k = self.burstiness
            return rng.gamma(k, mean / k, size=_BLOCK)
        return np.full(_BLOCK, mean)

    def offsets_ns(self) -> Iterator[int]:
        """Arrival offsets, increasing, without end."""
        if self.kind == "constant":
            # Exact multiples of the period, so rounding never accumulates.
            period_ns = 1e9 / self.rate_rps
            i = 1
            while True:
                yield round(i * period_ns)
                i += 1
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, _ARRIVAL_STREAM]))
        base = 0
        while True:
            offs = base + np.cumsum(np.rint(self._gaps_s(rng) * 1e9).astype(np.int64))
            yield from offs.tolist()
            base = int(offs[-1])

    def first(self, n: int) -> list[int]:
        """The first ``n`` offsets (for tests and previews)."""
        it = self.offsets_ns()
        return [next(it) for _ in range(n)]


def make_arrivals(
    arrival: Arrival,
    *,
    rate_rps: float | None,
    seed: int,
    concurrency: int | None = None,
) -> OpenLoopSchedule | ClosedLoop:
    """The schedule a probe follows: ``concurrency`` overrides everything (closed loop); else a
    rate drives the spec's open-loop process; no rate needs a concurrency arrival in the spec."""
    if concurrency is not None:
        if concurrency < 1:
            raise SpecError(f"concurrency must be >= 1, got {concurrency}")
        return ClosedLoop(concurrency)
    if rate_rps is None:
        if isinstance(arrival, Concurrency):
            return ClosedLoop(arrival.concurrency)
        raise SpecError(
            f"workload.arrival is {arrival.kind}: give a rate (--rate) or use "
            "arrival: {kind: concurrency, concurrency: N}"
        )
    if isinstance(arrival, Concurrency):
        raise SpecError(
            "workload.arrival is concurrency (closed loop), which takes no rate: drop the rate "
            "or use arrival kind poisson, gamma or constant"
        )
    if isinstance(arrival, Gamma):
        return OpenLoopSchedule("gamma", rate_rps, seed, arrival.burstiness)
    if isinstance(arrival, Constant):
        return OpenLoopSchedule("constant", rate_rps, seed)
    assert isinstance(arrival, Poisson)
    return OpenLoopSchedule("poisson", rate_rps, seed)
