"""Virtual time: the same node and engines, stepped as fast as the CPU allows, no sleeping.

A discrete-event loop over request arrivals and step ends. A replica that is idle when a
request reaches it starts a step at the arrival time; a busy one starts its next step at the
end of the current one, so a request that arrives during a step is scheduled in the next
(arrivals at exactly a step's end count as arrived). Deterministic for a given seed: the
scheduler and step-time tests run here.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tokenwatt.sim.config import SimConfig
from tokenwatt.sim.engine import ReplicaEngine, SimRequest, Step
from tokenwatt.sim.node import SimNode
from tokenwatt.sim.truth import ReplicaTruth, TruthLog

__all__ = ["VirtualSim"]


@dataclass(slots=True)
class _Pending:
    arrival_ns: int
    req: SimRequest


@dataclass
class VirtualSim:
    """Drive a ``SimNode`` in virtual nanoseconds; records every step and token time."""

    config: SimConfig
    truth_log: str | Path | None = None
    node: SimNode = field(init=False)
    now_ns: int = 0
    steps: list[Step] = field(default_factory=list)
    token_ns: dict[int, list[int]] = field(default_factory=dict)
    requests: dict[int, SimRequest] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.node = SimNode(self.config)
        self.truth = [ReplicaTruth(r.idle_power_w, 0) for r in self.node.replicas]
        self._arrivals: list[tuple[int, int, _Pending]] = []
        self._current: list[Step | None] = [None] * len(self.node.replicas)
        self._log = TruthLog(self.truth_log) if self.truth_log else None

    def submit(
        self,
        arrival_s: float,
        prompt_tokens: int,
        max_tokens: int,
        *,
        min_tokens: int = 0,
        ignore_eos: bool = True,
        prompt: Sequence[Hashable] | None = None,
    ) -> SimRequest:
        """``prompt``: its tokens (prefix caching reads them; their count must be
        ``prompt_tokens``); None: a prompt that shares no prefix with any other."""
        if prompt is not None and len(prompt) != prompt_tokens:
            raise ValueError(f"prompt has {len(prompt)} tokens, prompt_tokens is {prompt_tokens}")
        t = round(arrival_s * 1e9)
        req = self.node.new_request(
            prompt_tokens, max_tokens, t, min_tokens=min_tokens, ignore_eos=ignore_eos,
            prompt=prompt,
        )  # fmt: skip
        heapq.heappush(self._arrivals, (t, req.rid, _Pending(t, req)))
        self.requests[req.rid] = req
        self.token_ns[req.rid] = []
        return req

    def _start(self, replica: ReplicaEngine, t_ns: int) -> None:
        step = replica.plan(t_ns)
        self._current[replica.index] = step
        truth = self.truth[replica.index]
        if step is None:
            truth.go_idle(t_ns)
            return
        idle = truth.begin_step(step)
        if self._log is not None:
            self._log.write(
                step,
                t_start_ns=t_ns,
                t_end_ns=step.t_end_ns,
                idle_s=idle,
                idle_energy_j=idle * truth.idle_power_w,
                running=len(replica.running),
                waiting=len(replica.waiting),
                kv_usage=replica.kv_usage,
            )

    def _finish(self, replica: ReplicaEngine, step: Step) -> None:
        t = step.t_end_ns
        counts = step.emit_counts
        for j, req in enumerate(step.emits):
            if req.first_token_ns == 0:
                req.first_token_ns = t
            req.last_token_ns = t
            stamps = self.token_ns[req.rid]
            stamps.extend([t] * (1 if counts is None else counts[j]))  # one chunk per step
        self.steps.append(step)
        self._start(replica, t)

    def run(self, until_s: float | None = None) -> None:
        """Process events up to ``until_s`` (None: until every request has finished)."""
        limit = None if until_s is None else round(until_s * 1e9)
        reps = self.node.replicas
        while True:
            t_step, busy = None, None
            for rep in reps:
                cur = self._current[rep.index]
                if cur is not None and (t_step is None or cur.t_end_ns < t_step):
                    t_step, busy = cur.t_end_ns, rep
            t_arr = self._arrivals[0][0] if self._arrivals else None
            if t_arr is None and t_step is None:
                break
            if t_arr is not None and (t_step is None or t_arr <= t_step):
                if limit is not None and t_arr > limit:
                    break
                self.now_ns = t_arr
                woken: list[ReplicaEngine] = []
                while self._arrivals and self._arrivals[0][0] == t_arr:
                    _, _, pending = heapq.heappop(self._arrivals)
                    rep = self.node.submit(pending.req)
                    if self._current[rep.index] is None and rep not in woken:
                        woken.append(rep)
                for rep in woken:  # simultaneous arrivals share the first step
                    self._start(rep, t_arr)
                continue
            assert busy is not None and t_step is not None
            if limit is not None and t_step > limit:
                break
            self.now_ns = t_step
            step = self._current[busy.index]
            assert step is not None
            self._finish(busy, step)
        if limit is not None:
            self.now_ns = max(self.now_ns, limit)

    def abort(self, req: SimRequest) -> bool:
        return self.node.replicas[req.replica].abort(req) if req.replica >= 0 else False

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
