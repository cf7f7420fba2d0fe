"""OpenAI streaming semantics, pure: request bodies in, raw SSE payloads to record fields out.

No I/O here. The connection code hands each event's raw bytes, its arrival stamp and the index of
the read that returned it to a ``StreamInterpreter``, which decodes them in batches away from the
read itself (so JSON never delays a read) and finally fills the ``RequestRecord``.

Rules (docs/methodology.md has the reasoning):
* A content chunk carries non-empty ``text`` (completions) or a non-empty ``delta.content``,
  ``delta.reasoning_content``/``delta.reasoning`` or ``delta.tool_calls`` (chat). A chat chunk that
  only carries the role is not a token. Reasoning tokens are output tokens; a chunk that carries
  reasoning and nothing else is a reasoning chunk, and its tokens are counted apart too
  (``reasoning_tokens``); the first chunk carrying each kind is stamped.
* Tokens per content chunk come from the running ``usage.completion_tokens`` the server sends
  with ``continuous_usage_stats`` (difference to the previous usage); tokens reported on a
  non-content chunk move to the next content chunk, or to the last one if none follows. Without
  continuous usage each content chunk counts one token (``chunk_tokens_source="fallback"``).
* ``completion_tokens``/``prompt_tokens`` come from the last ``usage`` object the server sent; if it
  sent none, completion_tokens = Σ chunk_tokens and ``usage_source="fallback"``.
* A JSON object with an ``error`` member (or ``"object": "error"``) inside a 200 stream is a
  failure (``stream_error``), whatever else the stream held.
* The server's token counts are checked, never taken as given (``TokenCheck``): a count that
  is negative, above the ``max_tokens`` sent, falls, or disagrees with the content chunks
  received (a content chunk that adds no token, more chunks than counted tokens) makes the
  request a ``protocol`` failure naming the disagreement, and its counts enter no figure
  (its chunks carry 0 tokens, ``completion_tokens`` is 0).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import orjson

from tokenwatt.errors import SpecError
from tokenwatt.records import STAMP_TYPECODE, TOKENS_TYPECODE, RequestRecord
from tokenwatt.spec import redact_text

Api = Literal["completions", "chat"]
EventHook = Callable[[dict[str, Any], int], None]  # (decoded event, arrival stamp ns)

PATHS: dict[str, str] = {"completions": "/completions", "chat": "/chat/completions"}
DONE = b"[DONE]"
_MESSAGE_MAX = 300
# The most tokens one request may report when no max_tokens was sent: what a chunk's token
# count array holds (int32); a larger count is a lie, not a figure.
TOKENS_CEILING = 2**31 - 1


# What one request sends: text, token ids (completions) or a chat history (role/content dicts).
Prompt = str | list[int] | list[dict[str, str]]


def is_messages(prompt: Prompt) -> bool:
    """Whether ``prompt`` is a chat history (a list of role/content dicts)."""
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict)


def build_body(
    *,
    api: Api,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    stream_usage: bool = True,
    ignore_eos: bool = True,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of one streaming request.

    ``extra_body`` is merged last (shallow); a key set to None there removes the field, so a user
    can drop e.g. ``max_completion_tokens`` for a server that rejects it.
    """
    body: dict[str, Any] = {"model": model}
    if is_messages(prompt):
        if api != "chat":
            raise SpecError(
                "endpoint.api: a conversation is a list of chat messages; use api: chat"
            )
        body["messages"] = list(prompt)
        body["max_tokens"] = max_tokens
        body["max_completion_tokens"] = max_tokens
    elif api == "completions":
        body["prompt"] = prompt
        body["max_tokens"] = max_tokens
    else:
        if not isinstance(prompt, str):
            raise SpecError(
                "endpoint.api: the chat API takes text prompts, not token ids; "
                "use api: completions or endpoint.prompt_format: text"
            )
        body["messages"] = [{"role": "user", "content": prompt}]
        body["max_tokens"] = max_tokens
        body["max_completion_tokens"] = max_tokens
    body["stream"] = True
    if stream_usage:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = max_tokens
    if extra_body:
        for key, value in extra_body.items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
    return body


def sent_token_limit(body: Mapping[str, Any]) -> int | None:
    """The most output tokens a request body allows: its ``max_tokens`` or
    ``max_completion_tokens`` (the larger, where a server may read either); None if neither
    is an integer (``extra_body`` removed them)."""
    sent = [
        v
        for k in ("max_tokens", "max_completion_tokens")
        if isinstance(v := body.get(k), int) and not isinstance(v, bool) and v >= 0
    ]
    return max(sent) if sent else None


ANSWER = 1  # a choice carries answer output: text, delta.content or delta.tool_calls
REASONING = 2  # a choice carries delta.reasoning_content or delta.reasoning


def _kind_of(choice: Any, api: Api) -> int:
    """What output one choice carries: 0, ``ANSWER``, ``REASONING`` or both (bits)."""
    if not isinstance(choice, dict):
        return 0
    if api == "completions":
        if choice.get("text"):
            return ANSWER
        # a server may answer /completions in chat shape; accept it
        delta = choice.get("delta")
    else:
        delta = choice.get("delta")
        if delta is None and choice.get("text"):
            return ANSWER
    if isinstance(delta, dict):
        if delta.get("content"):  # the common chunk: no further look-ups
            mixed = delta.get("reasoning_content") or delta.get("reasoning")
            return ANSWER | REASONING if mixed else ANSWER
        kind = ANSWER if delta.get("tool_calls") else 0
        if delta.get("reasoning_content") or delta.get("reasoning"):
            kind |= REASONING
        return kind
    return 0


def _text_of(choice: Any, api: Api) -> bool:
    """Whether one choice carries generated output (a token)."""
    return _kind_of(choice, api) != 0


def _content_text(choices: Any) -> str:
    """The generated text of one content chunk (completions ``text`` or chat ``delta.content``)."""
    out: list[str] = []
    for c in choices:
        if not isinstance(c, dict):
            continue
        text = c.get("text")
        delta = c.get("delta")
        if not text and isinstance(delta, dict):
            text = delta.get("content")
        if isinstance(text, str):
            out.append(text)
    return "".join(out)


def is_content(obj: Any, api: Api) -> bool:
    """Whether a decoded chunk is content-bearing (see module rules)."""
    if not isinstance(obj, dict):
        return False
    choices = obj.get("choices")
    if not choices or not isinstance(choices, list):
        return False
    return any(_text_of(c, api) for c in choices)


def error_of(obj: Any) -> str | None:
    """The message of an in-band error: OpenAI nested, flat ``object: error``, or a TGI string."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if err is not None and err is not False:
        if isinstance(err, dict):
            msg = err.get("message")
            kind = err.get("type") or err.get("code")
            text = str(msg) if msg is not None else orjson.dumps(err).decode(errors="replace")
            return f"{kind}: {text}" if kind and msg is not None else text
        return str(err)
    if obj.get("object") == "error":
        return str(obj.get("message") or obj.get("type") or "error")
    return None


def message_from_body(status: int, reason: str, body: bytes, location: str = "") -> str:
    """One line for a non-2xx answer: the body's error message if it has one; for a redirect,
    where it points and what to do (the client follows no redirect: a POST body and its API key
    must not be replayed to another place)."""
    if 300 <= status < 400:
        where = redact_text(location.strip()) or "a place it does not name (no Location header)"
        return shorten(
            f"HTTP {status}: the endpoint redirects to {where}; "
            "use that URL as endpoint.url (ending in /v1)"
        )
    msg: str | None = None
    try:
        msg = error_of(orjson.loads(body))
    except orjson.JSONDecodeError:
        msg = None
    if msg is None:
        text = body.decode("utf-8", errors="replace").strip()
        msg = " ".join(text.split()) if text else reason
    return shorten(f"HTTP {status}: {msg}")


def shorten(text: str, limit: int = _MESSAGE_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class StreamInterpreter:
    """Turns one response's SSE payloads into record fields, a batch at a time.

    The read path only appends (payload, stamp, read index) to the ``pending_*`` lists; ``flush``
    decodes them (called every few dozen events and at the end), keeping just the facts a record
    needs, so memory stays small on long streams and decoding runs in tight batches.
    """

    __slots__ = (
        "api",
        "cached_tokens",
        "carried",
        "chunk_ns",
        "chunk_usage",
        "coalesced",
        "completion_tokens",
        "continuous",
        "count_error",
        "error",
        "finish_reason",
        "first_answer_ns",
        "first_reasoning_ns",
        "hook",
        "last_read",
        "max_tokens",
        "pending_payloads",
        "pending_reads",
        "pending_stamps",
        "prev_cum",
        "prompt_tokens",
        "protocol_error",
        "reasoning_chunks",
        "reasoning_last",
        "reasoning_usage",
        "response_id",
        "run_in_read",
        "text_parts",
    )

    def __init__(
        self,
        api: Api,
        hook: EventHook | None = None,
        *,
        collect_text: bool = False,
        max_tokens: int | None = None,
    ) -> None:
        self.api: Api = api
        # the most output tokens the request allowed (None: it sent no limit)
        self.max_tokens = max_tokens if max_tokens is not None else TOKENS_CEILING
        self.count_error: str | None = None  # the first disagreement in the token counts
        # the answer's text pieces, only when asked (a conversation resends its answers)
        self.text_parts: list[str] | None = [] if collect_text else None
        self.cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
        self.hook = hook  # sees every decoded event with its stamp (tests, benchmarks)
        self.pending_payloads: list[bytes] = []
        self.pending_stamps: list[int] = []
        self.pending_reads: list[int] = []
        self.chunk_ns: list[int] = []
        self.chunk_usage: list[int] = []  # tokens per content chunk from running usage
        self.continuous = True  # every content chunk so far carried usage.completion_tokens
        self.prev_cum = 0
        self.carried = 0  # tokens reported on non-content chunks, not yet given to a chunk
        self.last_read = -1  # read index of the last content chunk
        self.run_in_read = 0  # content chunks seen so far in that read
        self.coalesced = 0  # reads that returned more than one content chunk
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.protocol_error: str | None = None
        self.completion_tokens: int | None = None  # from the last usage object
        self.prompt_tokens: int | None = None
        self.response_id: str | None = None  # the first event's "id" (one per answer)
        # reasoning: chunks that carry only reasoning text, their tokens from running usage,
        # whether the last content chunk was one; the first stamp of each kind of output
        self.reasoning_chunks = 0
        self.reasoning_usage = 0
        self.reasoning_last = False
        self.first_reasoning_ns: int | None = None
        self.first_answer_ns: int | None = None

    def add(self, payload: bytes, stamp_ns: int, read_index: int) -> None:
        self.pending_payloads.append(payload)
        self.pending_stamps.append(stamp_ns)
        self.pending_reads.append(read_index)

    @property
    def first_ns(self) -> int | None:
        return self.chunk_ns[0] if self.chunk_ns else None

    def flush(self) -> None:
        """Decode every pending payload."""
        payloads = self.pending_payloads
        if not payloads:
            return
        stamps = self.pending_stamps
        reads = self.pending_reads
        self.pending_payloads = []
        self.pending_stamps = []
        self.pending_reads = []
        api = self.api
        loads = orjson.loads
        for i, raw in enumerate(payloads):
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError:
                if self.protocol_error is None:
                    head = raw[:80].decode("utf-8", "replace")
                    self.protocol_error = shorten("malformed JSON in an SSE event: " + head)
                continue
            if not isinstance(obj, dict):
                if self.protocol_error is None:
                    head = raw[:80].decode("utf-8", "replace")
                    self.protocol_error = shorten("an SSE event is not a JSON object: " + head)
                continue
            if self.hook is not None:
                self.hook(obj, stamps[i])
            if self.response_id is None and isinstance(rid := obj.get("id"), str) and rid:
                self.response_id = rid
            err = obj.get("error")
            if (err is not None and err is not False) or obj.get("object") == "error":
                msg = error_of(obj)
                if msg is not None:
                    if self.error is None:
                        self.error = shorten(msg)
                    continue
            usage = obj.get("usage")
            delta_tokens = self._read_usage(usage) if isinstance(usage, dict) else -1
            choices = obj.get("choices")
            kind = 0
            if isinstance(choices, list):
                for c in choices:
                    if isinstance(c, dict):
                        fr = c.get("finish_reason")
                        if fr:
                            self.finish_reason = str(fr)
                        if kind != ANSWER:  # (the common completions case checked inline)
                            kind |= ANSWER if c.get("text") else _kind_of(c, api)
            if kind:
                if self.text_parts is not None:
                    self.text_parts.append(_content_text(choices))
                self.chunk_ns.append(stamps[i])
                reasoning = kind == REASONING
                if reasoning or self.first_answer_ns is None or self.reasoning_last:
                    self._note_kind(kind, stamps[i])  # (an answer's later chunks skip it)
                r = reads[i]
                if r == self.last_read:
                    self.run_in_read += 1
                    if self.run_in_read == 2:
                        self.coalesced += 1
                else:
                    self.last_read = r
                    self.run_in_read = 1
                if delta_tokens < 0:
                    self.continuous = False
                    self.chunk_usage.append(0)
                else:
                    if delta_tokens + self.carried == 0 and self.continuous:
                        self._count_wrong(
                            f"a content chunk added no token (usage.completion_tokens stayed "
                            f"at {self.prev_cum})"
                        )
                    self.chunk_usage.append(delta_tokens + self.carried)
                    if reasoning:
                        self.reasoning_usage += delta_tokens + self.carried
                    self.carried = 0
            elif delta_tokens > 0:
                self.carried += delta_tokens

    def _note_kind(self, kind: int, stamp_ns: int) -> None:
        """A content chunk's kind: its stamp may be the first of its kind; a chunk of reasoning
        alone is counted (a chunk with answer text too counts as answer)."""
        if kind & REASONING and self.first_reasoning_ns is None:
            self.first_reasoning_ns = stamp_ns
        if kind & ANSWER:
            self.reasoning_last = False
            if self.first_answer_ns is None:
                self.first_answer_ns = stamp_ns
        else:
            self.reasoning_last = True
            self.reasoning_chunks += 1

    def _read_usage(self, usage: dict[str, Any]) -> int:
        """Take a chunk's usage block; the tokens it adds to the running completion count
        (-1: it states no completion count, so this chunk's tokens are unknown)."""
        delta_tokens = -1
        cum = usage.get("completion_tokens")
        if isinstance(cum, int) and not isinstance(cum, bool):
            if cum < 0 or cum > self.max_tokens:
                self._count_wrong(
                    f"usage.completion_tokens {cum} is "
                    + ("negative" if cum < 0 else f"above the max_tokens {self.max_tokens} sent")
                )
                cum = min(max(cum, 0), self.max_tokens)
            elif cum < self.prev_cum:
                self._count_wrong(f"usage.completion_tokens fell from {self.prev_cum} to {cum}")
            self.completion_tokens = cum
            delta_tokens = max(0, cum - self.prev_cum)
            self.prev_cum = max(self.prev_cum, cum)
        pt = usage.get("prompt_tokens")
        if isinstance(pt, int) and not isinstance(pt, bool):
            if 0 <= pt <= TOKENS_CEILING:
                self.prompt_tokens = pt
            else:
                self._count_wrong(f"usage.prompt_tokens {pt} is out of range")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            ct = details.get("cached_tokens")
            if isinstance(ct, int) and not isinstance(ct, bool) and ct >= 0:
                self.cached_tokens = ct
        return delta_tokens

    def _count_wrong(self, what: str) -> None:
        if self.count_error is None:
            self.count_error = shorten(f"token counts disagree: {what}")

    def _check_totals(self) -> None:
        """What only the whole stream shows: more content chunks than tokens counted (each
        content chunk carries at least one), or more than ``max_tokens`` of them."""
        n = len(self.chunk_ns)
        if n > self.max_tokens:
            self._count_wrong(f"{n} content chunks for max_tokens {self.max_tokens}")
        elif self.completion_tokens is not None and self.completion_tokens < n:
            self._count_wrong(
                f"usage.completion_tokens {self.completion_tokens} is below the {n} content "
                "chunks received"
            )

    def fill(self, rec: RequestRecord) -> None:
        """Flush and write the token, usage and finish fields; mark in-stream failures.

        A transport failure already on the record (status "error") is kept as the reason.
        """
        self.flush()
        self._check_totals()
        chunk_ns = self.chunk_ns
        if self.count_error is not None:
            self._fill_untrusted(rec)
        else:
            if self.continuous and chunk_ns:
                tokens = list(self.chunk_usage)
                if self.carried:
                    tokens[-1] += self.carried
                rec.chunk_tokens_source = "usage"
                rec.reasoning_tokens = self.reasoning_usage + (
                    self.carried if self.reasoning_last else 0
                )
            else:
                tokens = [1] * len(chunk_ns)
                rec.chunk_tokens_source = "fallback"
                rec.reasoning_tokens = self.reasoning_chunks
            rec.chunk_tokens = array(TOKENS_TYPECODE, tokens)
            if self.completion_tokens is not None:
                rec.completion_tokens = self.completion_tokens
                rec.usage_source = "server"
            else:
                rec.completion_tokens = sum(tokens)
                rec.usage_source = "fallback"
        rec.chunk_ns = array(STAMP_TYPECODE, chunk_ns)
        if chunk_ns:
            rec.first_token_ns = chunk_ns[0]
            rec.end_ns = chunk_ns[-1]
        rec.first_reasoning_ns = self.first_reasoning_ns
        rec.first_answer_ns = self.first_answer_ns
        rec.coalesced_reads = self.coalesced
        rec.finish_reason = self.finish_reason
        rec.prompt_tokens = (
            self.prompt_tokens if self.prompt_tokens is not None else rec.prompt_tokens_client
        )
        rec.cached_tokens = self.cached_tokens
        if self.text_parts is not None:
            rec.answer_text = "".join(self.text_parts)
        if rec.status == "ok":
            if self.error is not None:
                rec.status = "error"
                rec.error_kind = "stream_error"
                rec.error_message = self.error
            elif self.protocol_error is not None or self.count_error is not None:
                rec.status = "error"
                rec.error_kind = "protocol"
                rec.error_message = self.protocol_error or self.count_error

    def _fill_untrusted(self, rec: RequestRecord) -> None:
        drop_counts(rec, len(self.chunk_ns))


def drop_counts(rec: RequestRecord, chunks: int | None = None) -> None:
    """Counts that cannot be trusted (they disagree, or the answer may be another request's)
    enter no figure: every chunk keeps its stamp and carries 0 tokens, 0 in all."""
    n = len(rec.chunk_ns) if chunks is None else chunks
    rec.chunk_tokens = array(TOKENS_TYPECODE, [0]) * n
    rec.chunk_tokens_source = "fallback"
    rec.completion_tokens = 0
    rec.reasoning_tokens = 0
    rec.usage_source = "fallback"


def interpret(
    payloads: Sequence[bytes],
    stamps: Sequence[int],
    reads: Sequence[int],
    api: Api,
    rec: RequestRecord,
    *,
    max_tokens: int | None = None,
) -> None:
    """Fill ``rec`` from a whole stream's payloads at once (tests, offline use)."""
    it = StreamInterpreter(api, max_tokens=max_tokens)
    for p, s, r in zip(payloads, stamps, reads, strict=True):
        it.add(p, s, r)
    it.fill(rec)


def model_ids(body: bytes) -> list[str]:
    """Model ids from a /v1/models answer; ValueError if it is not one."""
    obj = orjson.loads(body)
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        raise ValueError("no 'data' list in the /models answer")
    ids = [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    return ids


__all__: Sequence[str] = (
    "DONE",
    "PATHS",
    "Prompt",
    "StreamInterpreter",
    "build_body",
    "drop_counts",
    "error_of",
    "interpret",
    "is_content",
    "is_messages",
    "message_from_body",
    "model_ids",
    "sent_token_limit",
)
