"""Shared pydantic base for spec sections: strict, frozen, unknown keys rejected, every number
finite and within a sane range.

The bounds are not policy; they keep a number inside what the code downstream can hold: a
timeout of ``inf`` or 1e308 s passed validation and then crashed asyncio's timers with
``OverflowError`` mid-run. Each bound is far beyond any real benchmark.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

MAX_SECONDS = 7 * 86_400.0  # timeouts, durations, intervals: a week
MAX_MS = MAX_SECONDS * 1000.0  # latency limits
MAX_TOKENS = 10_000_000  # one prompt or output length
MAX_RATE_RPS = 1e7  # requests per second
MAX_COUNT = 1_000_000_000  # requests, probes, in-flight requests
MAX_SEED = 2**63 - 1


class Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )
