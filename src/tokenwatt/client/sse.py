"""Server-sent events on bytes, with no network code (WHATWG HTML §9.2 event-stream parsing).

Works on raw bytes so that a read may end anywhere: inside a line, between CR and LF, or in
the middle of a multi-byte UTF-8 character. Line terminators are ASCII and never occur inside a
UTF-8 sequence, so splitting bytes on them and decoding each event's complete payload later is
exact. Only ``data`` payloads are returned (the OpenAI streaming API uses no other field); they stay
bytes so that JSON decoding can happen off the read path (orjson reads bytes directly).
"""

from __future__ import annotations

_BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_EVENT_BYTES = 64 << 20


class SSEError(ValueError):
    """The byte stream cannot be an event stream (an event or line beyond the size limit)."""


class SSEParser:
    """Incremental event-stream parser: ``feed(bytes) -> [data payloads]``, then ``finish()``.

    Follows the spec: lines end in LF, CRLF or CR; a blank line dispatches the event; ``:``
    starts a comment (keep-alive); one space after ``field:`` is dropped; several ``data`` lines
    join with LF; an event with no ``data`` line is not dispatched. No line-length limit short of
    ``max_event_bytes`` (aiohttp's 128 KiB line cap broke other clients on long outputs).
    """

    __slots__ = (
        "_buf",
        "_data",
        "_skip_lf",
        "_started",
        "comments",
        "event_type",
        "last_event_id",
        "max_event_bytes",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._buf = bytearray()  # incomplete last line
        self._data: list[bytes] | None = None  # data lines of the event being built
        self._skip_lf = False  # the previous feed ended in CR: a leading LF belongs to it
        self._started = False  # BOM check done
        self.max_event_bytes = max_event_bytes
        self.comments = 0  # comment lines seen (keep-alives)
        self.event_type = b""  # last `event:` value seen (informational)
        self.last_event_id = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Consume the next bytes of the stream; return the data of every event they complete."""
        if (
            self._data is None
            and not self._buf
            and not self._skip_lf
            and self._started
            and data[:6] == b"data: "
            and data.find(b"\n", 6) == len(data) - 2
            and data[-1] == 0x0A
            and b"\r" not in data
        ):
            return [data[6:-2]]  # the usual read: exactly one `data: …\n\n` event
        if not self._started:
            if self._buf:
                data = bytes(self._buf) + data
                self._buf.clear()
            if len(data) < 3 and _BOM.startswith(data):
                self._buf += data  # could still be the start of a BOM: wait for more
                return []
            self._started = True
            if data.startswith(_BOM):
                data = data[3:]
        if self._skip_lf:
            if not data:
                return []
            self._skip_lf = False
            if data[0] == 0x0A:
                data = data[1:]
        has_cr = b"\r" in data
        if not has_cr and b"\n" not in data:
            self._buf += data  # no complete line yet (a long line arriving in pieces)
            if len(self._buf) > self.max_event_bytes:
                raise SSEError(f"SSE line longer than {self.max_event_bytes} bytes")
            return []
        if self._buf:
            self._buf += data
            data = bytes(self._buf)
            self._buf.clear()
        if has_cr:
            if data[-1] == 0x0D:
                self._skip_lf = True  # CR at the end: an LF in the next feed is the same terminator
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        tail = lines.pop()
        if tail:
            self._buf += tail
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        cur = self._data
        for line in lines:
            if not line:
                if cur is not None:
                    out.append(cur[0] if len(cur) == 1 else b"\n".join(cur))
                    cur = None
                continue
            if line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
                if cur is None:
                    cur = [value]
                else:
                    cur.append(value)
                    if sum(map(len, cur)) > self.max_event_bytes:
                        raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
                continue
            if line[0] == 0x3A:  # ":" comment / keep-alive
                self.comments += 1
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"event":
                self.event_type = value
            elif name == b"id" and b"\0" not in value:
                self.last_event_id = value
            elif name == b"data":  # "data" with no colon: an empty data line
                if cur is None:
                    cur = [b""]
                else:
                    cur.append(b"")
            # retry and unknown fields are ignored
        self._data = cur
        return out

    def finish(self) -> list[bytes]:
        """End of stream: dispatch an event left without its closing blank line.

        The spec discards such an event; servers that omit the final blank line after
        ``data: [DONE]`` exist (vllm #24373), so a complete ``data`` line is kept instead.
        """
        lines: list[bytes] = []
        if self._buf:
            lines.append(bytes(self._buf))
            self._buf.clear()
        lines.append(b"")
        return self._lines(lines)
