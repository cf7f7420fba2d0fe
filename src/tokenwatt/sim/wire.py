"""Bytes on the wire: OpenAI/vLLM-shaped SSE chunks, responses and errors.

Streams use HTTP/1.1 chunked framing with one HTTP chunk per write; a write holds every SSE
event a request gets in one step (chat's role chunk travels with the first token, as in
vLLM). The server caches the common chunk (one token, no per-chunk usage, not the last) per
request and word, so its per-step path is a list lookup and one ``transport.write``.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from tokenwatt.sim.tokens import output_text

__all__ = [
    "DONE",
    "KEEPALIVE_FRAME",
    "ChunkRenderer",
    "error_body",
    "frame",
    "new_request_id",
    "sse",
]

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"


def frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


KEEPALIVE_FRAME = frame(KEEPALIVE)


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def new_request_id(kind: str) -> str:
    prefix = "cmpl-" if kind == "completion" else "chatcmpl-"
    return prefix + secrets.token_hex(16)


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    """Current vLLM's error shape: ``{"error": {message, type, param, code=<status>}}``."""
    kinds = {
        400: "BadRequestError",
        404: "NotFoundError",
        405: "MethodNotAllowedError",
        413: "BadRequestError",
        500: "InternalServerError",
        503: "ServiceUnavailableError",
    }
    return {
        "error": {
            "message": message,
            "type": kinds.get(status, "BadRequestError"),
            "param": param,
            "code": status,
        }
    }


class ChunkRenderer:
    """Renders one request's stream: token chunks, the final chunk, usage and [DONE]."""

    __slots__ = (
        "answer",
        "cached_tokens",
        "chat",
        "continuous_usage",
        "created",
        "include_usage",
        "model",
        "prompt_tokens",
        "reasoning",
        "request_id",
    )

    def __init__(
        self,
        *,
        chat: bool,
        request_id: str,
        created: int,
        model: str,
        prompt_tokens: int,
        include_usage: bool,
        continuous_usage: bool,
    ) -> None:
        self.chat = chat
        self.request_id = request_id
        self.created = created
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.cached_tokens: int | None = None  # set with prefix caching: usage reports it
        # chat: output tokens 0 .. reasoning−1 go out as delta.reasoning_content (vLLM's
        # reasoning parser shape), the rest as delta.content
        self.reasoning = 0
        # a graded task's answer words (``sim.answers``): the first answer tokens' text
        self.answer: list[str] | None = None

    def _text(self, start: int, count: int) -> str:
        """Answer text of output tokens ``start .. start+count−1``: a graded answer's words
        first (after any reasoning), the usual words after them."""
        words = self.answer
        if words is None:
            return output_text(start, count)
        r = self.reasoning if self.chat else 0
        return "".join(
            f" {words[i - r]}" if 0 <= i - r < len(words) else output_text(i, 1)
            for i in range(start, start + count)
        )

    def _chunk(
        self, text: str, finish: str | None, completion_tokens: int, reasoning: bool = False
    ) -> dict[str, Any]:
        if self.chat:
            key = "reasoning_content" if reasoning else "content"
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {key: text} if text or finish is None else {},
                "logprobs": None,
                "finish_reason": finish,
            }
            if finish is not None:
                choice["stop_reason"] = None
            obj: dict[str, Any] = {
                "id": self.request_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [choice],
            }
        else:
            obj = {
                "id": self.request_id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                    }
                ],
            }
        if self.continuous_usage:
            obj["usage"] = self.usage(completion_tokens)
        return obj

    def usage(self, completion_tokens: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }
        if self.cached_tokens is not None:  # vLLM's shape, with prefix caching on
            out["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return out

    def role_event(self) -> bytes:
        obj: dict[str, Any] = {
            "id": self.request_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
        if self.continuous_usage:
            obj["usage"] = self.usage(0)
        return sse(obj)

    def tokens(self, start: int, count: int, finish: str | None) -> bytes:
        """The framed write for output tokens ``start .. start+count−1``; with ``finish``
        the last of them carries the finish reason and usage/[DONE] follow."""
        body = b""
        if self.chat and start == 0:
            body += self.role_event()
        r = self.reasoning if self.chat else 0
        answer = True
        if start < r:  # reasoning tokens first, in an event of their own
            n = min(count, r - start)
            answer = n < count
            body += sse(
                self._chunk(output_text(start, n), None if answer else finish, start + n, True)
            )
            start, count = start + n, count - n
        if answer:
            body += sse(self._chunk(self._text(start, count), finish, start + count))
        if finish is not None:
            body += self.tail_events(start + count)
        return frame(body)

    def tail_events(self, completion_tokens: int) -> bytes:
        out = b""
        if self.include_usage:
            out += sse(
                {
                    "id": self.request_id,
                    "object": "chat.completion.chunk" if self.chat else "text_completion",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self.usage(completion_tokens),
                }
            )
        return out + DONE

    def error(self, message: str, status: int) -> bytes:
        """A mid-stream failure as vLLM sends it: an error event, then [DONE]."""
        return frame(sse(error_body(message, status)) + DONE)

    def response(self, completion_tokens: int, finish: str) -> dict[str, Any]:
        """The non-streaming body."""
        text = self._text(0, completion_tokens)
        if self.chat:
            r = min(self.reasoning, completion_tokens)
            message = {"role": "assistant", "content": self._text(r, completion_tokens - r)}
            if r:
                message["reasoning_content"] = output_text(0, r)
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            obj = "text_completion"
        return {
            "id": self.request_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(completion_tokens),
        }
