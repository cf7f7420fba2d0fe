"""What a sending worker process needs, shared by the live senders (``send``).

One client process carries about 100k streamed tokens/s on one core; near that its loop reads
late, events share reads and stamps lose their precision exactly where a big node is tested.
The live senders (``send.processes`` on this machine, ``send.ray_actors`` across
machines) move the sending into worker processes; this module holds what both need:

* :class:`ClientConfig`: everything a worker needs to build its own ``StreamClient``
  (picklable), and :class:`ScheduledRequest`: one request and its slot.
* How many workers (``workers: N | auto``: one per core this process may use, leaving one for
  the coordinator) and which core each is pinned to.
* A worker process's body (:func:`run_loop`: pinned, a fresh loop, uvloop where installed).
* The failure recorded for a request whose worker died before reporting it
  (``error_kind="worker_lost"``): nothing dealt is lost.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tokenwatt.client import StreamClient
from tokenwatt.client.openai import Prompt
from tokenwatt.records import RequestRecord
from tokenwatt.spec.endpoint import Timeouts

__all__ = [
    "ClientConfig",
    "ScheduledRequest",
    "auto_workers",
    "lost_record",
    "pinned_core",
    "run_loop",
    "worker_count",
]


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """One request dealt to a worker: what to send and when (``offset_ns``: its slot, an
    absolute monotonic time on the coordinator's clock; a Ray actor's copy is moved onto the
    actor's own clock)."""

    index: int
    offset_ns: int
    prompt: Prompt  # text, token ids or a chat history
    prompt_tokens_client: int
    max_tokens: int


def worker_count(n: int | Literal["auto"]) -> int:
    """``workers: N | auto`` as a number of processes (auto: ``auto_workers()``)."""
    count = auto_workers() if n == "auto" else n
    if count < 1:
        raise ValueError(f"workers must be >= 1 or auto, got {n}")
    return count


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Everything a worker needs to build its own ``StreamClient`` (picklable)."""

    base_url: str
    api: Literal["completions", "chat"]
    model: str
    timeouts: Timeouts
    api_key: str | None = None
    extra_body: Mapping[str, Any] | None = None
    stream_usage: bool = True
    max_connections: int = 4096
    kernel_timestamps: bool | None = None
    ignore_eos: bool = True

    @classmethod
    def from_client(cls, client: StreamClient, *, ignore_eos: bool = True) -> ClientConfig:
        """The settings of an open client, for workers that build their own copy of it."""
        return cls(
            base_url=client.base_url,
            api=client.api,
            model=client.model,
            timeouts=client.timeouts,
            api_key=client._api_key,
            extra_body=client.extra_body,
            stream_usage=client.stream_usage,
            max_connections=client.max_connections,
            ignore_eos=ignore_eos,
        )

    def make_client(self) -> StreamClient:
        return StreamClient(
            self.base_url,
            api=self.api,
            model=self.model,
            api_key=self.api_key,
            timeouts=self.timeouts,
            extra_body=self.extra_body,
            stream_usage=self.stream_usage,
            max_connections=self.max_connections,
            kernel_timestamps=self.kernel_timestamps,
        )


def auto_workers() -> int:
    """``workers: auto``: one per core this process may use, leaving one for the coordinator."""
    return max(1, len(_cores()) - 1)


def pinned_core(worker: int) -> int:
    """Worker i on the (i+1)-th usable core, wrapping: the first is the coordinator's."""
    cores = _cores()
    return cores[(worker + 1) % len(cores)]


def _cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def lost_record(req: ScheduledRequest, *, start_ns: int, message: str, at_ns: int) -> RequestRecord:
    """The failure recorded for a dealt request whose worker died before reporting it."""
    return RequestRecord(
        request_id=req.index,
        scheduled_ns=start_ns + req.offset_ns,
        prompt_tokens_client=req.prompt_tokens_client,
        max_tokens=req.max_tokens,
        status="error",
        error_kind="worker_lost",
        error_message=message,
        done_ns=at_ns,
    )


def run_loop(main: Coroutine[Any, Any, None], core: int | None) -> None:
    """A worker process's body: pin it to ``core`` (if any), run ``main`` on a fresh loop
    (uvloop where installed)."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    loop_factory: Any = asyncio.new_event_loop
    try:
        import uvloop  # noqa: PLC0415 (optional: the standard loop works without it)

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main)
