"""One engine replica: a vLLM-V1-like continuous-batching scheduler on a bandwidth roofline.

The engine knows nothing of clocks or sockets. ``plan(t_start_ns)`` schedules one step
(running requests first, then admissions from the FCFS waiting queue), advances every
scheduled request at once (as vLLM's ``_update_after_schedule`` does), prices the step and
returns it; the driver (real-time or virtual) decides when the step ends and delivers its
tokens. Every request is in exactly one place: ``waiting`` (a deque; preempted requests go
back to its front), ``running`` (admission order) or finished.

Per step, for each scheduled request ``new = num_tokens − computed`` (capped by the token
budget), where ``num_tokens = prompt + generated``; a request whose ``computed`` reaches
``num_tokens`` samples one token. That single rule covers chunked prefill, decode and
recompute after preemption. Tokens processed while ``computed`` is below the request's
prefill target are prefill (priced as compute); a decode step that emits token i ≥ 1 of a
request with prompt length L reads ``kv_bytes_read(L + i)`` bytes of KV cache.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.sim.config import BLOCK_SIZE, Derived, SimConfig
from tokenwatt.sim.prefix import PrefixCache
from tokenwatt.sim.routing import DistinctExperts, make_routing
from tokenwatt.sim.speculative import Speculator, StepSpeculation

__all__ = ["KVReader", "ReplicaEngine", "SimRequest", "Step"]

WAITING, RUNNING, FINISHED, ABORTED = 0, 1, 2, 3


class SimRequest:
    """One request's engine state. Slotted: touched on every step it is scheduled in."""

    __slots__ = (
        "arrival_ns",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "computed",
        "finish_reason",
        "first_scheduled_ns",
        "first_token_ns",
        "generated",
        "held",
        "last_scheduled_ns",
        "last_token_ns",
        "max_tokens",
        "preemptions",
        "prefill_target",
        "prompt_tokens",
        "replica",
        "rid",
        "sink",
        "state",
        "target_tokens",
    )

    def __init__(  # noqa: PLR0917
        self,
        rid: int,
        prompt_tokens: int,
        max_tokens: int,
        target_tokens: int,
        arrival_ns: int,
        sink: Any = None,
        block_hashes: tuple[int, ...] = (),
    ) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.target_tokens = target_tokens  # tokens it will generate: ≤ max_tokens
        self.finish_reason = "length" if target_tokens >= max_tokens else "stop"
        self.arrival_ns = arrival_ns
        self.sink = sink
        self.generated = 0
        self.computed = 0
        self.prefill_target = prompt_tokens
        self.blocks = 0
        self.block_hashes = block_hashes  # names of its full prompt blocks (prefix caching)
        self.held: list[int] = []  # the leading named blocks it holds (prefix caching)
        self.cached_tokens = -1  # prompt tokens found cached at its first admission
        self.state = WAITING
        self.preemptions = 0
        self.replica = -1
        self.first_scheduled_ns = 0
        self.last_scheduled_ns = 0
        self.first_token_ns = 0
        self.last_token_ns = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def finished(self) -> bool:
        return self.state >= FINISHED

    def __repr__(self) -> str:
        return (
            f"SimRequest(rid={self.rid}, L={self.prompt_tokens}, n={self.target_tokens}, "
            f"generated={self.generated}, computed={self.computed}, state={self.state})"
        )


class KVReader:
    """Σ kv_bytes_read(context) over a batch, vectorized over the geometry's layer groups."""

    def __init__(self, geometry: ModelGeometry) -> None:
        self.full_bytes = 0  # bytes per context token of groups that read the whole context
        self.windowed: list[tuple[str, int, int]] = []  # (kind, window, bytes per token)
        for g in geometry.kv_groups:
            if g.window is not None and g.kind in ("sliding", "chunked"):
                self.windowed.append((g.kind, g.window, g.bytes_per_token))
            else:
                self.full_bytes += g.bytes_per_token
        self.geometry = geometry

    def total(self, contexts: list[int]) -> int:
        if not contexts:
            return 0
        if not self.windowed:
            return self.full_bytes * sum(contexts)
        ctx = np.asarray(contexts, dtype=np.int64)
        out = self.full_bytes * int(ctx.sum())
        for kind, window, per_token in self.windowed:
            if kind == "sliding":
                out += per_token * int(np.minimum(ctx, window).sum())
            else:
                out += per_token * int((ctx % window).sum())
        return out


@dataclass(slots=True)
class Step:
    """One priced step. ``emits``: requests that get a token at its end (in order)."""

    index: int
    replica: int
    t_start_ns: int
    duration_s: float
    batch: int  # decode sequences (emit token i ≥ 1)
    prefill_tokens: int  # prompt (and recompute) tokens processed
    prefill_seqs: int
    distinct_experts: int
    weight_bytes: int
    kv_bytes: int
    memory_s: float
    prefill_s: float
    overhead_s: float
    energy_j: float  # all GPUs of the replica
    emits: list[SimRequest] = field(default_factory=list)
    finished: list[SimRequest] = field(default_factory=list)
    preempted: list[SimRequest] = field(default_factory=list)
    admitted: list[SimRequest] = field(default_factory=list)
    prompt_done_tokens: int = 0  # prompt tokens of prefills that completed (vLLM counter)
    cached: list[tuple[int, int]] = field(default_factory=list)  # (rid, cached tokens) on
    # first admission, prefix caching only
    evicted_blocks: int = 0  # prefix-cache blocks evicted while scheduling this step
    # speculative decoding only: tokens each entry of ``emits`` gets (one chunk each), what
    # the verification did, and the bytes the drafter read (not in weight_bytes)
    emit_counts: list[int] | None = None
    spec: StepSpeculation | None = None
    draft_bytes: int = 0

    @property
    def tokens_emitted(self) -> int:
        return len(self.emits) if self.emit_counts is None else sum(self.emit_counts)

    @property
    def duration_ns(self) -> int:
        return round(self.duration_s * 1e9)

    @property
    def t_end_ns(self) -> int:
        return self.t_start_ns + self.duration_ns

    @property
    def tokens(self) -> int:
        return self.batch + self.prefill_tokens


class ReplicaEngine:
    """Scheduler, KV blocks and step pricing of one data-parallel replica."""

    def __init__(self, config: SimConfig, index: int = 0, derived: Derived | None = None) -> None:
        self.config = config
        self.index = index
        self.d = derived if derived is not None else config.derive()
        g = config.geometry
        self.geometry = g
        self.rng = np.random.default_rng([config.settings.seed, index])
        self.routing: DistinctExperts = make_routing(
            g.experts, g.experts_per_token, g.moe_layers, self.d.zipf_s, self.rng
        )
        self.kv = KVReader(g)
        self.spec = self._speculator(config)
        self.spec_k = 0 if self.spec is None else self.spec.k  # lookahead tokens per decode
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.num_blocks = self.d.num_blocks
        self.free_blocks = self.d.num_blocks
        self.prefix = PrefixCache() if config.settings.prefix_caching else None
        self._evicted = 0  # evictions of the step being planned, before its last reconcile
        self.steps = 0
        self.preemptions = 0
        self.outstanding = 0  # requests routed here and not finished (router's measure)
        gpus = config.gpus_per_replica
        tdp = self.d.tdp_w if self.d.tdp_w is not None else 0.0
        self._idle_power_w = self.d.idle_w * gpus
        self._dyn_w = (tdp - self.d.idle_w) * gpus

    def _speculator(self, config: SimConfig) -> Speculator | None:
        settings = self.d.speculative
        if settings is None:
            return None
        g = self.geometry
        rng = np.random.default_rng([config.settings.seed, self.index, 1])
        mtp_routing = None
        if settings.method == "mtp" and g.is_moe:
            mtp_routing = make_routing(
                g.experts, g.experts_per_token, settings.num_tokens, self.d.zipf_s, rng
            )
        return Speculator(settings, g, config.draft_geometry, rng, mtp_routing)

    # -- queue management ----------------------------------------------------------
    def add(self, req: SimRequest) -> None:
        req.replica = self.index
        req.state = WAITING
        self.waiting.append(req)
        self.outstanding += 1

    def abort(self, req: SimRequest) -> bool:
        """Drop a request wherever it is and free its KV; False when already finished."""
        if req.state >= FINISHED:
            return False
        if req.state == RUNNING:
            self.running.remove(req)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)
        self._free(req)
        req.state = ABORTED
        self.outstanding -= 1
        return True

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def kv_usage(self) -> float:
        """vLLM's gauge: 1 − free / total (no null block here)."""
        return 1.0 - self.free_blocks / self.num_blocks

    @property
    def idle_power_w(self) -> float:
        return self._idle_power_w

    def _free(self, req: SimRequest) -> None:
        if req.held:  # named blocks stay cached: free only when no other request holds them
            assert self.prefix is not None
            self.free_blocks += req.blocks - len(req.held) + self.prefix.release(req.held)
            req.held = []
        else:
            self.free_blocks += req.blocks
        req.blocks = 0

    def _allocate(self, req: SimRequest, new_tokens: int) -> bool:
        need = -(-(req.computed + new_tokens) // BLOCK_SIZE) - req.blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        self.free_blocks -= need
        req.blocks += need
        return True

    def _preempt(self, req: SimRequest) -> None:
        self._free(req)
        req.computed = 0
        req.prefill_target = req.num_tokens
        req.state = WAITING
        req.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(req)

    # -- one step -----------------------------------------------------------------
    def plan(self, t_start_ns: int) -> Step | None:
        """Schedule, advance and price one step starting at ``t_start_ns``; None if idle."""
        budget = self.config.settings.max_batched_tokens
        running = self.running
        scheduled: list[tuple[SimRequest, int]] = []
        preempted: list[SimRequest] = []
        admitted: list[SimRequest] = []
        i = 0
        free = self.free_blocks
        lookahead = self.spec_k
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.computed
            new = req.prompt_tokens + req.generated - computed
            if new == 1:  # a decode, the common case, inline: blocks for ceil((computed + 1) / B)
                # (speculation: k lookahead slots more, and k + 1 tokens of the budget)
                need = (computed + BLOCK_SIZE + lookahead) // BLOCK_SIZE - req.blocks
                if need <= 0 or need <= free:
                    if need > 0:
                        free -= need
                        req.blocks += need
                    scheduled.append((req, 1))
                    budget -= 1 + lookahead
                    i += 1
                    continue
            self.free_blocks = free
            new = min(new, budget)
            if new <= 0:
                i += 1
                continue
            while not self._allocate(req, new):
                victim = running.pop()
                preempted.append(victim)
                self._preempt(victim)
                if victim is req:
                    break
            free = self.free_blocks
            if req.state != RUNNING:  # it preempted itself: stop serving running requests
                break
            scheduled.append((req, new))
            budget -= new
            i += 1
        self.free_blocks = free

        cached: list[tuple[int, int]] = []
        if not preempted:
            cap = self.config.settings.max_num_seqs
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < cap:
                req = waiting[0]
                if self.prefix is not None and req.computed == 0:
                    if not self._admit_cached(req, budget, cached):
                        break  # head-of-line: admission never preempts
                    new = min(req.num_tokens - req.computed, budget)
                else:
                    new = min(req.num_tokens - req.computed, budget)
                    if not self._allocate(req, new):
                        break  # head-of-line: admission never preempts
                waiting.popleft()
                req.state = RUNNING
                if not req.first_scheduled_ns:
                    req.first_scheduled_ns = t_start_ns
                req.last_scheduled_ns = t_start_ns
                running.append(req)
                admitted.append(req)
                scheduled.append((req, new))
                budget -= new

        if not scheduled:
            return None
        step = self._advance_and_price(t_start_ns, scheduled, preempted, admitted)
        if self.prefix is not None:
            step.cached = cached
            step.evicted_blocks = self.prefix.reconcile(self.free_blocks) + self._evicted
            self._evicted = 0
        return step

    def _admit_cached(self, req: SimRequest, budget: int, cached: list[tuple[int, int]]) -> bool:
        """Allocate a waiting request's blocks, reusing its cached prompt prefix; False (and
        nothing changed) when the blocks do not fit. Cached tokens count as computed."""
        prefix = self.prefix
        assert prefix is not None
        self._evicted += prefix.reconcile(self.free_blocks)  # fresh blocks handed out so far
        hit = prefix.match(req.block_hashes, (req.prompt_tokens - 1) // BLOCK_SIZE)
        names = req.block_hashes[:hit]
        hit_tokens = hit * BLOCK_SIZE
        new = min(req.num_tokens - hit_tokens, budget)
        fresh = -(-(hit_tokens + new) // BLOCK_SIZE) - hit
        if fresh + prefix.free_among(names) > self.free_blocks:
            return False
        self.free_blocks -= fresh + prefix.free_among(names)
        prefix.acquire(names)
        req.held = list(names)
        req.blocks = hit + fresh
        req.computed = hit_tokens
        prefix.queries += req.num_tokens
        prefix.hits += hit_tokens
        # named now, as vLLM does when it allocates: a twin admitted later in this step hits
        self._register(req, min(hit_tokens + new, req.prompt_tokens) // BLOCK_SIZE)
        if req.cached_tokens < 0:
            req.cached_tokens = hit_tokens
            cached.append((req.rid, hit_tokens))
        return True

    def _register(self, req: SimRequest, full_blocks: int) -> None:
        """Name the prompt blocks a request has now computed (scheduled, as vLLM does)."""
        prefix = self.prefix
        assert prefix is not None
        held, names = req.held, req.block_hashes
        while len(held) < min(full_blocks, len(names)) and prefix.register(names[len(held)]):
            held.append(names[len(held)])

    def _advance_and_price(
        self,
        t_start_ns: int,
        scheduled: list[tuple[SimRequest, int]],
        preempted: list[SimRequest],
        admitted: list[SimRequest],
    ) -> Step:
        contexts: list[int] = []
        emits: list[SimRequest] = []
        finished: list[SimRequest] = []
        prefill_tokens = 0
        prefill_seqs = 0
        prompt_done = 0
        spec = self.spec
        verified: list[bool] = []  # speculation: per emitting request, was it a verify step
        for req, new in scheduled:
            before = req.computed
            decode = before >= req.prefill_target
            if decode:
                contexts.append(before + 1)  # token i = generated reads L + i cached tokens
            else:
                prefill_tokens += new
                prefill_seqs += 1
            req.computed = after = before + new
            if self.prefix is not None and len(req.held) < len(req.block_hashes):
                self._register(req, min(after, req.prompt_tokens) // BLOCK_SIZE)
            generated = req.generated
            if after >= req.prompt_tokens + generated:
                if generated == 0:
                    prompt_done += req.prompt_tokens
                emits.append(req)
                if spec is not None:  # generated is advanced by ``_verify`` below
                    verified.append(decode)
                    continue
                req.generated = generated + 1
                if req.generated >= req.target_tokens:
                    finished.append(req)
        counts = verdict = None
        if spec is not None:
            counts, verdict = self._verify(spec, emits, verified, finished)
        if finished:
            self._retire(finished)
        knobs, d = self.config.settings, self.d
        batch = len(contexts)
        kv_bytes = self.kv.total(contexts)
        distinct, weight_bytes, draft_bytes = self._weights(contexts, prefill_tokens)
        memory_s = (weight_bytes + kv_bytes + draft_bytes) * d.s_per_byte
        prefill_s = prefill_tokens * d.s_per_prefill_token
        overhead_s = d.step_overhead_s
        duration = memory_s + prefill_s + overhead_s
        energy = self._idle_power_w * duration + self._dyn_w * (
            memory_s * knobs.efficiency + prefill_s * knobs.prefill_efficiency
        )
        self.steps += 1
        return Step(
            index=self.steps,
            replica=self.index,
            t_start_ns=t_start_ns,
            duration_s=duration,
            batch=batch,
            prefill_tokens=prefill_tokens,
            prefill_seqs=prefill_seqs,
            distinct_experts=distinct,
            weight_bytes=weight_bytes,
            kv_bytes=kv_bytes,
            memory_s=memory_s,
            prefill_s=prefill_s,
            overhead_s=overhead_s,
            energy_j=energy,
            emits=emits,
            finished=finished,
            preempted=preempted,
            admitted=admitted,
            prompt_done_tokens=prompt_done,
            emit_counts=counts,
            spec=verdict,
            draft_bytes=draft_bytes,
        )

    def _retire(self, finished: list[SimRequest]) -> None:
        for req in finished:
            self._free(req)
            req.state = FINISHED
        self.running = [r for r in self.running if r.state == RUNNING]
        self.outstanding -= len(finished)

    def _weights(self, contexts: list[int], prefill_tokens: int) -> tuple[int, int, int]:
        """(distinct experts, target weight bytes, drafter bytes) of a step."""
        spec = self.spec
        routed = len(contexts) + prefill_tokens
        draft_bytes = 0
        if spec is not None:  # the target verifies k + 1 positions of each decode sequence
            routed += len(contexts) * spec.k
            draft_bytes = spec.draft_bytes(contexts)
        distinct = self.routing.total(routed)
        g = self.geometry
        return distinct, g.dense_weight_bytes + distinct * g.expert_bytes, draft_bytes

    def _verify(
        self,
        spec: Speculator,
        emits: list[SimRequest],
        verified: list[bool],
        finished: list[SimRequest],
    ) -> tuple[list[int], StepSpeculation]:
        """Advance each emitting request by its tokens: 1 after a prefill, 1 + accepted after
        a verify step (capped by its length; the accepted tokens' KV is already written)."""
        out = StepSpeculation(spec.k)
        drafts = sum(verified)
        accepted = spec.accepted(drafts).tolist() if drafts else []
        counts: list[int] = []
        j = 0
        for req, decode in zip(emits, verified, strict=True):
            n = 1
            if decode:
                a = accepted[j]
                j += 1
                out.accepted += a
                for p in range(a):
                    out.accepted_per_pos[p] += 1
                n = min(1 + a, req.target_tokens - req.generated)
                req.computed += n - 1
                out.emitted += n
            req.generated += n
            counts.append(n)
            if req.generated >= req.target_tokens:
                finished.append(req)
        out.drafts = drafts
        out.proposed = drafts * spec.k
        return counts, out
