"""The in-process sender: each request an asyncio task on the probe's own loop.

The default (``search.probe.workers: 1``), the closed loop and conversations. The probe
hands a request over at its slot (``lead_ns`` 0); the task streams it through the probe's
client and reports the record, which the client fills in place so a cancelled stream
(Ctrl-C, early stop, drain timeout) keeps the chunks that had arrived. A task cancelled
before its first step was never sent, but it was scheduled: it is reported ``cancelled``
too, so no scheduled request goes missing from the count. Its keep-up is this process's,
as one worker's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tokenwatt.clock import now_ns
from tokenwatt.records import RequestRecord
from tokenwatt.result import WorkerKeepUp
from tokenwatt.send.base import Sendable, SenderBase, Streamer, cpu_seconds, stream_one
from tokenwatt.send.figures import worker_stats

__all__ = ["LocalSender"]

_NS = 1_000_000_000


class LocalSender(SenderBase):
    """Requests sent as tasks of this process (see the module doc)."""

    def __init__(self, client: Streamer, *, ignore_eos: bool) -> None:
        super().__init__()
        self.client = client
        self.ignore_eos = ignore_eos
        self.tasks: set[asyncio.Task[None]] = set()
        self.recorded: set[int] = set()
        self.sent: list[RequestRecord] = []  # records of requests that left (sent_ns set)
        self.cpu0, self.wall0 = 0.0, 0

    async def _open(self) -> None:
        self.cpu0, self.wall0 = cpu_seconds(), now_ns()

    def _dispatch(self, plan: Sendable, slot_ns: int) -> None:
        task = asyncio.get_running_loop().create_task(self._run_one(plan, slot_ns))
        self.tasks.add(task)

        def finished(t: asyncio.Task[None]) -> None:
            self.tasks.discard(t)
            if plan.index not in self.recorded:
                # cancelled before its first step: never sent, but scheduled (the module doc)
                self._done(_bare(plan, slot_ns, "cancelled", "cancelled before sending"))

        task.add_done_callback(finished)

    async def _run_one(self, plan: Sendable, sched_ns: int) -> None:
        rec = RequestRecord(
            request_id=plan.index,
            scheduled_ns=sched_ns,
            prompt_tokens_client=plan.prompt_tokens_client,
            max_tokens=plan.max_tokens,
        )
        try:
            rec = await stream_one(
                self.client, plan, sched_ns, ignore_eos=self.ignore_eos, record=rec
            )
        except asyncio.CancelledError:
            if rec.status == "ok":  # cancelled before the client could mark it
                rec.error_kind = "cancelled"
                rec.error_message = rec.error_message or "cancelled"
                rec.done_ns = rec.done_ns or now_ns()
            self._done(rec)
            raise
        except Exception as exc:  # a client bug must not lose the probe: record it as a failure
            rec = _bare(plan, sched_ns, "protocol", f"client raised {type(exc).__name__}: {exc}")
        self._done(rec)

    def late_first_tokens(self, limit_ns: int) -> list[int]:
        """The client's streams past ``limit_ns`` with no first token (a client that cannot
        say, a test double, reports none)."""
        ask = getattr(self.client, "late_first_tokens", None)
        return list(ask(limit_ns)) if ask is not None else []

    def _done(self, rec: RequestRecord) -> None:
        self.recorded.add(rec.request_id)
        if rec.sent_ns is not None:
            self.sent.append(rec)
        self._record(rec)

    async def finish(self, *, cancel: bool) -> list[WorkerKeepUp]:
        """Cancel (or wait for) what is in flight; this process's keep-up, as one worker's."""
        pending = set(self.tasks)
        if cancel:
            for t in pending:
                t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        busy = (cpu_seconds() - self.cpu0) / max(1e-9, (now_ns() - self.wall0) / _NS)
        return [worker_stats(0, self.sent, dealt=len(self.sent), busy_fraction=busy)]


def _bare(plan: Sendable, sched_ns: int, kind: Any, msg: str) -> RequestRecord:
    """A request that ended without an answer (never sent, or the client raised)."""
    return RequestRecord(
        request_id=plan.index,
        scheduled_ns=sched_ns,
        prompt_tokens_client=plan.prompt_tokens_client,
        max_tokens=plan.max_tokens,
        status="error",
        error_kind=kind,
        error_message=msg,
        done_ns=now_ns(),
    )
