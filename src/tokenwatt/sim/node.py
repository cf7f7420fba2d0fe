"""A node: R independent engine replicas behind one router, and the requests' output lengths.

Routing is least outstanding requests (waiting + running, counted from arrival to finish),
ties broken round-robin so equal replicas share the load evenly.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from tokenwatt.sim.config import SimConfig
from tokenwatt.sim.engine import ReplicaEngine, SimRequest
from tokenwatt.sim.prefix import block_hashes

__all__ = ["SimNode"]


class SimNode:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.derived = config.derive()
        self.replicas = [ReplicaEngine(config, i, self.derived) for i in range(config.replicas)]
        self._rng = np.random.default_rng([config.settings.seed, 1_000_003])
        self._next_rid = 0
        self._rr = 0

    def output_tokens(self, max_tokens: int, min_tokens: int = 0, ignore_eos: bool = False) -> int:
        """How many tokens a request generates: max_tokens with ignore_eos, else a draw from
        the configured distribution, at least min_tokens, at most max_tokens."""
        if ignore_eos:
            return max_tokens
        dist = self.derived.output_len
        if dist.kind == "max":
            n = max_tokens
        elif dist.kind == "fixed":
            n = int(dist.a)
        elif dist.kind == "uniform":
            n = int(self._rng.integers(int(dist.a), int(dist.b) + 1))
        else:
            n = int(self._rng.geometric(1.0 / dist.a))
        return max(1, min(max_tokens, max(n, min_tokens)))

    def new_request(
        self,
        prompt_tokens: int,
        max_tokens: int,
        arrival_ns: int,
        *,
        min_tokens: int = 0,
        ignore_eos: bool = False,
        sink: Any = None,
        prompt: Sequence[Hashable] | None = None,
    ) -> SimRequest:
        """``prompt``: the prompt's tokens, for prefix caching (None: shares no prefix)."""
        self._next_rid += 1
        target = self.output_tokens(max_tokens, min_tokens, ignore_eos)
        names = (
            block_hashes(prompt)
            if prompt is not None and self.config.settings.prefix_caching
            else ()
        )
        return SimRequest(
            self._next_rid, prompt_tokens, max_tokens, target, arrival_ns, sink, names
        )

    def route(self) -> ReplicaEngine:
        """The replica with the fewest outstanding requests (round-robin among ties)."""
        reps = self.replicas
        n = len(reps)
        if n == 1:
            return reps[0]
        best = None
        for j in range(n):
            r = reps[(self._rr + j) % n]
            if best is None or r.outstanding < best.outstanding:
                best = r
        assert best is not None
        self._rr = (best.index + 1) % n
        return best

    def submit(self, req: SimRequest) -> ReplicaEngine:
        replica = self.route()
        replica.add(req)
        return replica
