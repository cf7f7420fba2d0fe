"""The simulator over HTTP: aiohttp routes in front of one real-time driver per replica.

Each driver runs its replica's steps on absolute deadlines: a step that starts at t (the
previous step's deadline, or the arrival that woke an idle replica) ends at t + its
modelled duration; the driver renders the step's chunks first, sleeps until shortly before
the deadline, spins to it and then writes every chunk straight to its socket (never
early). A driver that falls behind runs the next steps back to back from their deadlines,
so simulated time never stretches; the lag is exported as the catch-up deficit, and each
chunk's lateness (deadline → write) is recorded.

Streaming handlers only prepare the response and wait; the driver writes. A client that
disconnects cancels its handler (aiohttp ``handler_cancellation``), which aborts the request
and frees its KV blocks at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import random
import time
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tokenwatt import __version__
from tokenwatt.sim.answers import AnswerTruth, answer_words
from tokenwatt.sim.api import ApiError, parse_request
from tokenwatt.sim.config import SimConfig
from tokenwatt.sim.engine import ABORTED, FINISHED, ReplicaEngine, SimRequest, Step
from tokenwatt.sim.metrics import EngineStats, make_registry
from tokenwatt.sim.names import SIM_SERVER_NAME, accepts_model, served_names
from tokenwatt.sim.node import SimNode
from tokenwatt.sim.tokens import WORDS
from tokenwatt.sim.truth import Lateness, ReplicaTruth, TruthLog
from tokenwatt.sim.wire import KEEPALIVE_FRAME, ChunkRenderer, error_body, new_request_id
from tokenwatt.simsettings import parse_reasoning, reasoning_tokens

__all__ = ["SimServer"]

now_ns = time.perf_counter_ns

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
MAX_BODY_BYTES = 64 << 20
HARD_SPIN_NS = 300_000  # the last stretch before a deadline is a busy wait
GC_YOUNG_OBJECTS = 5000  # collect when this many container objects piled up ...
GC_MIN_SLACK_NS = 2_000_000  # ... and the step has this much time left before its deadline
GC_FULL_EVERY = 20  # every so many young collections, a full one


class _Sink:
    """Where a request's tokens go: its socket and renderer (streaming) or its future."""

    __slots__ = (
        "cacheable",
        "done",
        "ended",
        "error_after",
        "fast",
        "fd",
        "frames",
        "held_steps",
        "pending",
        "reasoning_frames",
        "renderer",
        "sent",
        "stall_after",
        "stream",
        "transport",
    )

    def __init__(
        self,
        renderer: ChunkRenderer,
        stream: bool,
        done: asyncio.Future[str],
        config: SimConfig,
    ) -> None:
        self.renderer = renderer
        self.stream = stream
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.fd = -1  # the socket's descriptor: step frames are written to it directly
        self.pending = 0  # tokens held back for a multi-token chunk
        self.held_steps = 0  # steps whose tokens are held back (``steps_per_chunk``)
        self.sent = 0  # chunks written
        self.error_after = config.settings.error_after_tokens
        self.stall_after = config.settings.stall_after_tokens
        self.ended = False  # nothing more will be written (finished, errored, stalled)
        self.frames: list[bytes | None] = [None] * len(WORDS)  # token frames by word
        # reasoning tokens' frames by word (a frame of their own); the same list when off
        self.reasoning_frames = self.frames
        # A frame depends only on its word unless it carries running usage counts.
        self.cacheable = not renderer.continuous_usage
        self.fast = (
            stream
            and config.settings.tokens_per_chunk == 1
            and config.settings.steps_per_chunk == 1
            and config.settings.speculative is None  # a chunk of 1 + accepted tokens per step
            and self.error_after is None
            and self.stall_after is None
        )


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    return _json(error_body(message, status, param), status)


def _collect_in_slack(deadline_ns: int) -> None:
    """Garbage collection at a moment of our choosing: with automatic collection off, a
    young-generation pass runs only when enough objects piled up and the step has slack."""
    young, middle, _ = gc.get_count()
    if young < GC_YOUNG_OBJECTS:
        return
    slack = deadline_ns - now_ns()
    if slack < GC_MIN_SLACK_NS:
        return
    gc.collect(2 if middle >= GC_FULL_EVERY and slack > 3 * GC_MIN_SLACK_NS else 1)


class ReplicaDriver:
    """Runs one replica's steps in real time."""

    def __init__(self, server: SimServer, engine: ReplicaEngine) -> None:
        self.server = server
        self.engine = engine
        self.truth = server.truth[engine.index]
        self.stats = server.stats[engine.index]
        self._wake = asyncio.Event()
        self.last_deadline_ns = 0
        self.spin_ns = round(server.config.settings.spin_s * 1e9)
        self.tokens_per_chunk = server.config.settings.tokens_per_chunk
        self.steps_per_chunk = server.config.settings.steps_per_chunk

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        engine, truth = self.engine, self.truth
        truth.go_idle(now_ns())
        while True:
            while not engine.has_work():
                self._wake.clear()
                await self._wake.wait()
                self.last_deadline_ns = max(self.last_deadline_ns, now_ns())
            t_start = self.last_deadline_ns
            step = engine.plan(t_start)
            if step is None:
                truth.go_idle(t_start)
                await asyncio.sleep(0)
                continue
            t_actual_start = now_ns()
            idle = truth.begin_step(step)
            writes, stalled = self._render(step)
            deadline = step.t_end_ns
            late = now_ns() >= deadline
            if late:
                truth.late_steps += 1
            else:
                if self.server.manage_gc:
                    _collect_in_slack(deadline)
                await self._sleep_until(deadline)
            t_emit = self._write(writes, deadline)
            truth.note_deficit(max(0, t_emit - deadline) / 1e9)
            self.last_deadline_ns = deadline
            self._after(step, t_emit, stalled)
            log = self.server.truth_log
            if log is not None:
                log.write(
                    step,
                    t_start_ns=t_actual_start,
                    t_end_ns=t_emit,
                    idle_s=idle,
                    idle_energy_j=idle * truth.idle_power_w,
                    running=len(engine.running),
                    waiting=len(engine.waiting),
                    kv_usage=engine.kv_usage,
                )
            if not engine.has_work():
                truth.go_idle(deadline)
            if late:  # catching up: still let the loop serve sockets once per step
                await asyncio.sleep(0)

    async def _sleep_until(self, deadline: int) -> None:
        rem = deadline - now_ns()
        if rem > self.spin_ns:
            await asyncio.sleep((rem - self.spin_ns) / 1e9)
        while deadline - now_ns() > HARD_SPIN_NS:
            await asyncio.sleep(0)  # keep serving sockets while waiting
        while now_ns() < deadline:
            pass

    def _render(self, step: Step) -> tuple[list[tuple[_Sink, bytes]], list[SimRequest]]:
        """Every chunk this step will write, built before its deadline."""
        writes: list[tuple[_Sink, bytes]] = []
        stalled: list[SimRequest] = []
        n_words = len(WORDS)
        if step.cached:  # prefix caching: usage reports each admitted request's cached tokens
            for req in step.admitted:
                if req.sink is not None and req.sink.renderer.cached_tokens is None:
                    req.sink.renderer.cached_tokens = max(0, req.cached_tokens)
        counts = step.emit_counts
        emits = step.emits
        for j, req in enumerate(emits):
            sink: _Sink | None = req.sink
            if sink is None or sink.ended or req.state == ABORTED:
                continue
            idx = req.generated - 1
            if idx == 0 and sink.renderer.answer is not None:
                sink.renderer.answer = self.server.answers.decide(sink.renderer.answer, len(emits))
            if sink.fast:  # the hot path: a cached frame, one per word
                if sink.cacheable and req.state != FINISHED and idx:
                    cache = sink.frames if idx >= sink.renderer.reasoning else sink.reasoning_frames
                    frame = cache[idx % n_words]
                    if frame is None:
                        frame = sink.renderer.tokens(idx, 1, None)
                        cache[idx % n_words] = frame
                else:  # first or last token, or per-chunk usage that differs every chunk
                    finish = req.finish_reason if req.state == FINISHED else None
                    frame = sink.renderer.tokens(idx, 1, finish)
                    if finish is not None:
                        sink.ended = True
                writes.append((sink, frame))
                continue
            finish = req.finish_reason if req.state == FINISHED else None
            if not sink.stream:
                continue
            if sink.error_after is not None and idx >= sink.error_after:
                writes.append((sink, sink.renderer.error("simulated engine failure", 500)))
                sink.ended = True
                stalled.append(req)
                continue
            if sink.stall_after is not None and idx >= sink.stall_after:
                sink.ended = True
                stalled.append(req)
                continue
            sink.pending += 1 if counts is None else counts[j]
            sink.held_steps += 1
            if self._flush(sink) or finish is not None:
                n = sink.pending
                sink.pending = sink.held_steps = 0
                sink.sent += 1
                writes.append((sink, sink.renderer.tokens(idx - n + 1, n, finish)))
                if finish is not None:
                    sink.ended = True
        return writes, stalled

    def _flush(self, sink: _Sink) -> bool:
        """Write the held tokens now: enough tokens (``tokens_per_chunk``) and enough steps
        (``steps_per_chunk``, a stream interval: the first token still goes alone)."""
        if self.steps_per_chunk > 1:
            return sink.sent == 0 or sink.held_steps >= self.steps_per_chunk
        return sink.pending >= self.tokens_per_chunk

    def _write(self, writes: list[tuple[_Sink, bytes]], deadline: int) -> int:
        """Each frame straight to its socket with one ``write(2)`` (the transport's buffer
        only takes what the kernel did not, or everything while it already holds bytes, so
        order is kept); every write is stamped for the lateness record."""
        clock, write = now_ns, os.write
        t_emit = clock()
        stamps: list[int] = []
        dead: list[_Sink] = []
        for sink, data in writes:
            tr = sink.transport
            if tr is None or tr.is_closing():
                dead.append(sink)
                continue
            if sink.fd < 0 or tr.get_write_buffer_size():
                tr.write(data)
            else:
                try:
                    n = write(sink.fd, data)
                except BlockingIOError:
                    n = 0
                except OSError:  # reset or closed by the peer: as a disconnect
                    dead.append(sink)
                    continue
                if n < len(data):
                    tr.write(data[n:])
            stamps.append(clock())
        self.server.lateness.add_ns(stamps, deadline)
        for sink in dead:
            if not sink.done.done():
                sink.done.set_result("disconnected")
        return t_emit

    def _after(self, step: Step, t_emit: int, stalled: list[SimRequest]) -> None:
        stats, engine = self.stats, self.engine
        stats.iteration_tokens.observe(step.tokens)
        stats.generation_tokens += step.tokens_emitted
        if step.spec is not None:
            v = step.spec
            stats.spec_drafts += v.drafts
            stats.spec_draft_tokens += v.proposed
            stats.spec_accepted_tokens += v.accepted
            for pos, n in enumerate(v.accepted_per_pos):
                stats.spec_accepted_per_pos[pos] += n
        stats.prompt_tokens += step.prompt_done_tokens
        stats.routed_tokens += step.batch + step.prefill_tokens  # through every MoE layer
        stats.preemptions += len(step.preempted)
        gaps: dict[int, int] = {}
        for req in step.emits:
            last = req.last_token_ns
            if last:
                gaps[last] = gaps.get(last, 0) + 1
            else:
                req.first_token_ns = t_emit
                stats.ttft.observe((t_emit - req.arrival_ns) / 1e9)
                stats.prefill.observe((t_emit - req.last_scheduled_ns) / 1e9)
            req.last_token_ns = t_emit
        for last, n in gaps.items():
            stats.itl.observe((t_emit - last) / 1e9, n)
        for req in step.finished:
            self._finished(req, t_emit)
        for req in stalled:
            engine.abort(req)
            stats.success["abort"] += 1
            sink = req.sink
            if sink is not None and sink.error_after is not None and not sink.done.done():
                sink.done.set_result("error")

    def _finished(self, req: SimRequest, t_emit: int) -> None:
        stats = self.stats
        stats.success[req.finish_reason] += 1
        e2e = (t_emit - req.arrival_ns) / 1e9
        stats.e2e.observe(e2e)
        stats.queue.observe(max(0, req.first_scheduled_ns - req.arrival_ns) / 1e9)
        stats.inference.observe((t_emit - req.last_scheduled_ns) / 1e9)
        stats.decode.observe((t_emit - req.first_token_ns) / 1e9)
        if req.generated > 1:
            stats.tpot.observe((t_emit - req.first_token_ns) / 1e9 / (req.generated - 1))
        stats.req_prompt.observe(req.prompt_tokens)
        stats.req_generation.observe(req.generated)
        stats.req_max_tokens.observe(req.max_tokens)
        stats.req_n.observe(1)
        sink = req.sink
        if sink is not None and not sink.done.done():
            sink.done.set_result(req.finish_reason)


class SimServer:
    """The aiohttp application, the node and its drivers. Bind with ``start()``."""

    def __init__(self, config: SimConfig, *, manage_gc: bool = False) -> None:
        self.config = config
        self.manage_gc = manage_gc
        self.reasoning_rule = parse_reasoning(config.settings.reasoning)
        self.reasoning_tokens = 0  # truth: reasoning tokens the requests admitted will stream
        self.answers = AnswerTruth(
            config.settings.answer_error, random.Random(config.settings.seed)
        )
        self.node = SimNode(config)
        t0 = now_ns()
        self.truth = [ReplicaTruth(r.idle_power_w, t0) for r in self.node.replicas]
        k = self.node.derived.speculative.num_tokens if self.node.derived.speculative else 0
        self.stats = [EngineStats(config.settings.max_model_len, k) for _ in self.node.replicas]
        self.lateness = Lateness()
        self.truth_log = TruthLog(config.settings.truth_log) if config.settings.truth_log else None
        self.registry = make_registry(self.snapshot)
        self.created = int(time.time())
        self._accepts = functools.partial(
            accepts_model, served=config.served_model_name, geometry=config.geometry
        )
        self.drivers: list[ReplicaDriver] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._sinks: set[_Sink] = set()
        self._runner: web.AppRunner | None = None
        self.host = ""
        self.port = 0
        self.app = self._make_app()

    # -- lifecycle ------------------------------------------------------------------
    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._errors])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/tokenwatt/sim/stats", self.sim_stats)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Bind and start the drivers. With ``manage_gc`` (a process of its own: the CLI),
        automatic garbage collection is turned off and done between steps instead, where a
        pause delays nothing."""
        if self.manage_gc:
            gc.collect()
            gc.freeze()
            gc.disable()
        try:
            runner, site = await self._bind(host, port)
        except BaseException:
            if self.manage_gc:  # a start that failed (a busy port) hands the collector back
                gc.enable()
                gc.unfreeze()
            raise
        self._runner = runner
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[attr-defined]
        self.host, self.port = sock.getsockname()[:2]

    async def _bind(self, host: str, port: int) -> tuple[web.AppRunner, web.TCPSite]:
        """Start the drivers and serve on ``host:port``; what ``start`` cleans up on failure."""
        self.drivers = [ReplicaDriver(self, e) for e in self.node.replicas]
        self._tasks = [asyncio.create_task(d.run()) for d in self.drivers]
        if self.config.settings.keepalive_s:
            self._tasks.append(asyncio.create_task(self._keepalive()))
        runner = web.AppRunner(
            self.app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        return runner, site

    async def stop(self) -> None:
        for sink in list(self._sinks):
            if not sink.done.done():
                sink.done.set_result("shutdown")
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.truth_log is not None:
            self.truth_log.close()
        if self.manage_gc:
            gc.enable()

    @property
    def url(self) -> str:
        return f"http://{_host(self.host)}:{self.port}/v1"

    @property
    def metrics_url(self) -> str:
        return f"http://{_host(self.host)}:{self.port}/metrics"

    async def _keepalive(self) -> None:
        interval = self.config.settings.keepalive_s
        assert interval is not None
        while True:
            await asyncio.sleep(interval)
            for sink in list(self._sinks):
                tr = sink.transport
                if sink.stream and not sink.ended and tr is not None and not tr.is_closing():
                    tr.write(KEEPALIVE_FRAME)

    # -- middleware: every error in OpenAI's shape ----------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            resp: web.StreamResponse = await handler(request)
            return resp
        except ApiError as exc:
            return _error(exc.status, exc.message, exc.param)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"request body too large (limit {MAX_BODY_BYTES} bytes)")
        except web.HTTPException as exc:
            if exc.status >= 400:
                return _error(exc.status, f"{exc.reason}: {request.method} {request.path}")
            raise

    # -- routes --------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return _json({"version": f"{SIM_SERVER_NAME} {__version__}"})

    async def models(self, request: web.Request) -> web.Response:
        """One model card per name served (``sim.names``), owned by the simulator."""
        c = self.config
        card = {
            "object": "model",
            "created": self.created,
            "owned_by": SIM_SERVER_NAME,
            "root": c.geometry.name,
            "parent": None,
            "max_model_len": c.settings.max_model_len,
        }
        names = served_names(c.served_model_name, c.geometry)
        return _json({"object": "list", "data": [{"id": n, **card} for n in names]})

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def sim_stats(self, request: web.Request) -> web.Response:
        out = {
            "cpu_s": time.process_time(),
            "lateness": self.lateness.summary(),
            "truth": self.truth_totals(),
            "engines": [
                {
                    "running": len(e.running),
                    "waiting": len(e.waiting),
                    "kv_usage": e.kv_usage,
                    "num_blocks": e.num_blocks,
                    "steps": e.steps,
                    "preemptions": e.preemptions,
                }
                for e in self.node.replicas
            ],
        }
        if request.query.get("reset") == "1":
            self.lateness.reset()
        return _json(out)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        arrival = now_ns()
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON body: {exc}") from None
        c = self.config
        p = parse_request(
            body,
            chat=chat,
            served_model=c.served_model_name,
            max_model_len=c.settings.max_model_len,
            accepts=self._accepts,
            want_prompt=c.settings.prefix_caching,
        )
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        renderer = ChunkRenderer(
            chat=chat,
            request_id=new_request_id("chat" if chat else "completion"),
            created=int(time.time()),
            model=p.model,
            prompt_tokens=p.prompt_tokens,
            include_usage=p.include_usage,
            continuous_usage=p.continuous_usage,
        )
        sink = _Sink(renderer, p.stream, done, c)
        req = self.node.new_request(
            p.prompt_tokens,
            p.max_tokens,
            arrival,
            min_tokens=p.min_tokens,
            ignore_eos=p.ignore_eos,
            sink=sink,
            prompt=p.prompt,
        )
        self._answer(req, sink, body, chat=chat, ignore_eos=p.ignore_eos)
        if chat and self.reasoning_rule[0] != "off":
            renderer.reasoning = reasoning_tokens(self.reasoning_rule, req.target_tokens)
            self.reasoning_tokens += renderer.reasoning
            sink.reasoning_frames = [None] * len(WORDS)
        resp: web.StreamResponse | None = None
        if p.stream:
            resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
            resp.enable_chunked_encoding()
            try:
                await resp.prepare(request)
            except ConnectionError:  # the client left before its stream began: as a cancel
                raise asyncio.CancelledError from None
            sink.transport = tr = request.transport
            sock = tr.get_extra_info("socket") if tr is not None else None
            sink.fd = sock.fileno() if sock is not None else -1
        replica = self.node.submit(req)
        self._sinks.add(sink)
        self.drivers[replica.index].wake()
        try:
            outcome = await done
        except asyncio.CancelledError:
            self._abort(replica, req)
            raise
        finally:
            self._sinks.discard(sink)
        if outcome == "disconnected":
            self._abort(replica, req)
        if resp is not None:
            if outcome == "shutdown" and not sink.ended:
                with contextlib.suppress(ConnectionError):
                    await resp.write(renderer.error("server shutting down", 503))
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
            return resp
        if outcome not in ("length", "stop"):
            return _error(503, f"request ended early: {outcome}")
        return _json(renderer.response(req.generated, req.finish_reason))

    def _answer(
        self, req: SimRequest, sink: _Sink, body: dict[str, Any], *, chat: bool, ignore_eos: bool
    ) -> None:
        """A graded task's prompt gets its answer (``sim.answers``); the request then stops
        after it unless ``ignore_eos`` keeps it going."""
        if chat:
            msgs = body.get("messages")
            last = msgs[-1] if isinstance(msgs, list) and msgs else None
            text = last.get("content") if isinstance(last, dict) else None
        else:
            text = body.get("prompt")
        words = answer_words(text)
        if words is None:
            return
        sink.renderer.answer = words
        sink.cacheable = False  # its frames are its own
        if not ignore_eos:
            req.target_tokens = min(req.max_tokens, len(words))
            req.finish_reason = "length" if req.target_tokens >= req.max_tokens else "stop"

    def _abort(self, replica: ReplicaEngine, req: SimRequest) -> None:
        if replica.abort(req):
            self.stats[replica.index].success["abort"] += 1

    # -- state for /metrics -------------------------------------------------------------
    def truth_totals(self) -> dict[str, float]:
        t = now_ns()
        keys = (
            "decode_weight_bytes",
            "weight_bytes",
            "decode_kv_bytes",
            "draft_bytes",
            "prefill_tokens",
            "busy_s",
            "idle_s",
            "memory_s",
            "prefill_s",
            "overhead_s",
            "steps",
            "decode_steps",
            "tokens_emitted",
            "decode_tokens",
            "late_steps",
        )
        out: dict[str, float] = {k: float(sum(getattr(r, k) for r in self.truth)) for k in keys}
        out["energy_j"] = sum(r.energy_at(t) for r in self.truth)
        out["evicted_blocks"] = float(
            sum(e.prefix.evictions for e in self.node.replicas if e.prefix is not None)
        )
        out["running_s"] = sum(r.running_s_at(t) for r in self.truth)
        out["decode_batch_s"] = sum(r.decode_batch_s_at(t) for r in self.truth)
        out["deficit_s"] = max(r.deficit_s for r in self.truth)
        out["max_deficit_s"] = max(r.max_deficit_s for r in self.truth)
        out["graded_answers"] = float(self.answers.answers)
        out["graded_wrong"] = float(self.answers.wrong)
        out["graded_error_probability_sum"] = self.answers.error_probability_sum
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "model": self.config.served_model_name,
            "engines": [
                {
                    "running": len(e.running),
                    "waiting": len(e.waiting),
                    "kv_usage": e.kv_usage,
                    "num_blocks": e.num_blocks,
                    "stats": self.stats[e.index],
                    "prefix_caching": e.prefix is not None,
                    "prefix_queries": e.prefix.queries if e.prefix is not None else 0,
                    "prefix_hits": e.prefix.hits if e.prefix is not None else 0,
                    "expert_inclusion": e.routing.inclusion(),
                }
                for e in self.node.replicas
            ],
            "truth": self.truth_totals(),
            "lateness": self.lateness,
            "bandwidth_bytes_per_s": self.node.derived.bandwidth_bytes_per_s * self.config.replicas,
        }


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
