"""The one bounded reader of user files: specs, sweep files, imported results, result files.

A file a user names can be anything: a symlink to ``/dev/zero``, a FIFO nobody writes to, a
gigabyte of JSON, a 200,000-deep array, a 500-byte YAML alias bomb that expands to billions of
nodes, or figures of NaN and 1e308. Each is refused here before it costs memory or a
traceback: the file is ``stat``-ed first (only regular files are opened; their size is checked
before a byte is read), the read itself stops at the limit, YAML's events are counted with
aliases expanded before any object is built, and every number is checked finite and within
``MAX_MAGNITUDE``. A refusal is one line naming the file and the limit, raised as the caller's
own error class (``SpecError`` for specs, ``ReportError`` for results), so the CLI prints it
and exits 2.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml

from tokenwatt.errors import TokenwattError

__all__ = [
    "DATASET_MAX_BYTES",
    "IMPORT_MAX_BYTES",
    "MAX_DEPTH",
    "MAX_MAGNITUDE",
    "MAX_YAML_NODES",
    "RESULT_MAX_BYTES",
    "RESULT_WHOLE_MAX_BYTES",
    "SPEC_MAX_BYTES",
    "check_numbers",
    "check_regular",
    "checked_float",
    "load_document",
    "open_regular",
    "parse_json",
    "parse_yaml",
    "read_bounded",
    "refuse_constant",
]

MIB = 1 << 20
SPEC_MAX_BYTES = 4 * MIB  # a spec or sweep file: a few kB in practice
IMPORT_MAX_BYTES = 256 * MIB  # another tool's results, per-request records included
DATASET_MAX_BYTES = 2048 * MIB  # a prompt dataset (ShareGPT's V3 file is 642 MB)
RESULT_WHOLE_MAX_BYTES = 16 * MIB  # a result.json read whole; a larger one is streamed
RESULT_MAX_BYTES = 2048 * MIB  # a streamed result.json (its probes kept only in part)
MAX_DEPTH = 64  # nesting of lists and mappings; tokenwatt's own files use under 10
MAX_YAML_NODES = 1_000_000  # nodes of a YAML document with every alias expanded
# Larger than any figure the tool reads (10²¹ FLOP/s, bytes, ns since boot, a 64-bit seed),
# small enough that no product of two figures overflows a float: a bigger number is damage.
MAX_MAGNITUDE = 1e21
_CONSTANT = re.compile(r"-?(NaN|Infinity)")
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Format = Literal["json", "yaml", "auto"]


def _refuse(error: type[TokenwattError], path: Path | str, why: str) -> TokenwattError:
    return error(f"{path}: {why}")


def open_regular(
    path: Path, *, max_bytes: int, error: type[TokenwattError], what: str = "file"
) -> int:
    """A read-only descriptor on ``path``, which must be a regular file of at most
    ``max_bytes``; devices, FIFOs, sockets and folders are refused without being opened
    (opening a FIFO would block, reading ``/dev/zero`` never ends)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _refuse(error, path, f"cannot read {what} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(error, path, "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(error, path, "not a regular file (a device, FIFO or socket); give a file")
    if st.st_size > max_bytes:
        raise _refuse(
            error, path, f"{st.st_size / MIB:.1f} MiB, over the {max_bytes / MIB:g} MiB limit"
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise _refuse(error, path, f"cannot read {what} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between stat and open
        os.close(fd)
        raise _refuse(error, path, "not a regular file (a device, FIFO or socket); give a file")
    return fd


def check_regular(
    path: str | Path, *, max_bytes: int, error: type[TokenwattError], what: str = "file"
) -> None:
    """Refuse ``path`` unless it is a regular file within ``max_bytes`` (for a reader of its
    own, such as a line-by-line one, which a device without newlines would never end)."""
    os.close(open_regular(Path(path), max_bytes=max_bytes, error=error, what=what))


def read_bounded(
    path: str | Path, *, max_bytes: int, error: type[TokenwattError], what: str = "file"
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (a file that grows while read
    is refused at the limit, never read on)."""
    p = Path(path)
    fd = open_regular(p, max_bytes=max_bytes, error=error, what=what)
    with os.fdopen(fd, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _refuse(error, p, f"grew past the {max_bytes / MIB:g} MiB limit while read")
    return data


def load_document(
    path: str | Path,
    *,
    max_bytes: int,
    error: type[TokenwattError],
    fmt: Format = "auto",
    what: str = "file",
    values: bool = True,
) -> Any:
    """A JSON or YAML file (``auto``: JSON first, then YAML), bounded in every way this
    module names; the source in every message is ``path``. ``values=False`` leaves the
    numbers unchecked (NaN and Infinity read as floats) for a caller that checks the
    figures it uses: other tools' files write ``.inf`` for "unlimited"."""
    p = Path(path)
    raw = read_bounded(p, max_bytes=max_bytes, error=error, what=what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(
            error, p, f"cannot read {what}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None
    src = str(p)
    if fmt == "json":
        return parse_json(text, source=src, error=error, values=values)
    if fmt == "yaml":
        return parse_yaml(text, source=src, error=error, values=values)
    try:
        return parse_json(text, source=src, error=error, quiet=True, values=values)
    except _NotJsonError:
        return parse_yaml(text, source=src, error=error, values=values)


class _NotJsonError(Exception):
    """Internal: the text is not JSON at all (``auto`` then tries YAML)."""


def parse_json(
    text: str,
    *,
    source: str,
    error: type[TokenwattError],
    quiet: bool = False,
    values: bool = True,
) -> Any:
    """JSON text checked for depth and numbers; ``quiet``: a syntax error raises
    ``_NotJsonError`` (the caller tries YAML) instead of the one-line refusal; ``values``:
    as ``load_document``."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg or "recursion" in exc.msg:
            raise _refuse(error, source, f"nested deeper than {MAX_DEPTH} levels") from None
        near = text[max(exc.pos - 1, 0) : exc.pos + 9]
        m = _CONSTANT.search(near)
        if m and not values:
            return _json_with_constants(text, source=source, error=error)
        if m:
            where = f"line {exc.lineno}, column {exc.colno}"
            raise _refuse(
                error, source, f"{m.group()} at {where}: numbers must be finite"
            ) from None
        if quiet:
            raise _NotJsonError from None
        raise _refuse(
            error, source, f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    check_numbers(data, source=source, error=error, values=values)
    return data


def _json_with_constants(text: str, *, source: str, error: type[TokenwattError]) -> Any:
    """JSON holding NaN or Infinity (Python's ``json.dump`` writes them), for a caller that
    checks its figures itself; orjson has already bounded the nesting."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _refuse(error, source, f"not valid JSON ({str(exc)[:80]})") from None
    check_numbers(data, source=source, error=error, values=False)
    return data


def parse_yaml(
    text: str,
    *,
    source: str,
    error: type[TokenwattError],
    syntax_errors: bool = False,
    values: bool = True,
) -> Any:
    """YAML text: its events counted first (depth, aliases expanded, recursion), then built
    by the safe loader, then its numbers checked. ``syntax_errors``: a ``yaml.YAMLError``
    reaches the caller as it is (a flag's text that is not YAML stays text)."""
    try:
        _check_yaml_events(yaml.parse(text, Loader=_SAFE_LOADER), source=source, error=error)
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        if syntax_errors:
            raise
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise _refuse(error, source, f"not valid YAML{where}: {problem}") from None
    except (ValueError, RecursionError) as exc:  # an int of 5,000 digits, a deep constructor
        raise _refuse(error, source, f"cannot be read as YAML ({str(exc)[:80]})") from None
    check_numbers(data, source=source, error=error, values=values)
    return data


def _check_yaml_events(events: Iterator[yaml.Event], *, source: str, error: type) -> None:
    """Depth and expanded size from the event stream alone (no object built yet): each open
    collection's size so far on a stack, each anchor's size when it closes, an alias costing
    its anchor's full size. An alias to a collection still open would make a loop: refused."""
    stack: list[list[Any]] = [[None, 0]]  # [anchor, expanded nodes so far]
    sizes: dict[str, int] = {}
    open_anchors: set[str] = set()
    for ev in events:
        if isinstance(ev, yaml.CollectionStartEvent):
            if len(stack) > MAX_DEPTH:
                raise _refuse(error, source, f"nested deeper than {MAX_DEPTH} levels")
            if ev.anchor:
                sizes.pop(ev.anchor, None)
                open_anchors.add(ev.anchor)
            stack.append([ev.anchor, 1])
            continue
        if isinstance(ev, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
            if anchor:
                sizes[anchor] = size
                open_anchors.discard(anchor)
        elif isinstance(ev, yaml.ScalarEvent):
            size = 1
            if ev.anchor:
                sizes[ev.anchor] = 1
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor in open_anchors:
                raise _refuse(error, source, f"alias *{ev.anchor} refers to itself (a loop)")
            size = sizes.get(ev.anchor or "", 1)
        else:
            continue
        stack[-1][1] += size
        if stack[-1][1] > MAX_YAML_NODES:
            raise _refuse(
                error,
                source,
                f"expands to over {MAX_YAML_NODES:,} nodes with its aliases (a YAML alias "
                "bomb?); write the values out or use fewer aliases",
            )


def check_numbers(
    data: Any, *, source: str, error: type[TokenwattError], values: bool = True
) -> None:
    """Every number finite and within ``MAX_MAGNITUDE`` (``values``), every nesting within
    ``MAX_DEPTH``; the refusal names the first offending key path (``probes[3].ttft_s.p99``)."""
    # (node, key, parent entry, depth): the path is spelled out only for a refusal
    todo: list[tuple[Any, Any, Any, int]] = [(data, None, None, 0)]
    while todo:
        entry = todo.pop()
        node, _, _, depth = entry
        if isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                raise _refuse(error, source, f"nested deeper than {MAX_DEPTH} levels")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            todo.extend((v, k, entry, depth + 1) for k, v in items)
        elif values and isinstance(node, float | int) and not isinstance(node, bool):
            bad = _number_problem(node)
            if bad:
                raise _refuse(error, source, f"{_path(entry)} is {bad}")


def _path(entry: tuple[Any, Any, Any, int]) -> str:
    keys: list[Any] = []
    while entry[2] is not None:
        keys.append(entry[1])
        entry = entry[2]
    out = ""
    for k in reversed(keys):
        out += f"[{k}]" if isinstance(k, int) else (f".{_key(k)}" if out else _key(k))
    return out or "the document"


def _key(k: Any) -> str:
    """A key as written, or quoted with its escapes where it holds a line break or another
    unprintable character: the refusal stays one line whatever the document's keys are."""
    text = str(k)
    return text if text.isprintable() else repr(text)


def _number_problem(x: float) -> str | None:
    if isinstance(x, float) and not math.isfinite(x):
        return f"{x}: numbers must be finite"
    if abs(x) > MAX_MAGNITUDE:
        shown = f"{x:.3g}" if isinstance(x, float) else f"an integer of {x.bit_length()} bits"
        return f"{shown}, beyond ±{MAX_MAGNITUDE:g}: not a figure this tool can hold"
    return None


def checked_float(text: str) -> float:
    """A JSON float literal, refused when beyond ``MAX_MAGNITUDE`` (``json``'s ``parse_float``
    hook on the streaming path, where no tree is walked)."""
    x = float(text)
    bad = _number_problem(x)
    if bad:
        raise ValueError(bad)
    return x


def refuse_constant(name: str) -> float:
    """``json``'s ``parse_constant`` hook: NaN and ±Infinity are not numbers a file may hold."""
    raise ValueError(f"{name}: numbers must be finite")


_CHUNK_BYTES = 8 * MIB


def stream_indented_array(
    path: str | Path,
    key: str,
    on_item: Callable[[Any], None],
    *,
    max_bytes: int,
    error: type[TokenwattError],
    what: str = "file",
) -> dict[str, Any]:
    """A JSON object in the layout ``json.dumps(indent=2)`` writes, read in chunks: each
    element of its top-level array ``key`` is parsed alone and handed to ``on_item`` (so
    never all of them are held), and the rest of the object is returned with ``key`` as
    ``[]``. In that layout an element is the text from a line ``    {`` to the next line
    ``    }`` (JSON strings hold no raw newline), and each piece must parse as one object,
    so a file in another layout is refused, never misread. Numbers are finite
    (``parse_piece``); the rest of the object is checked as everywhere here."""
    p = Path(path)
    fd = open_regular(p, max_bytes=max_bytes, error=error, what=what)
    opener = f'\n  "{key}": [\n    {{'.encode()
    with os.fdopen(fd, "rb") as f:
        head, buf = _read_until(f, opener)
        if head is None:
            raise _refuse(
                error,
                p,
                f"over {RESULT_WHOLE_MAX_BYTES / MIB:g} MiB and not in the layout tokenwatt "
                f"writes (no line '  \"{key}\": [' followed by '    {{'); a file this large "
                "is read only in that layout",
            )
        index, pos = 0, 0
        while True:
            buf, pos, end = _next_end(f, buf, pos, p, error)
            on_item(parse_piece(buf[pos:end], source=f"{p}: {key}[{index}]", error=error))
            index += 1
            if buf.startswith(b",\n    {", end):
                pos = end + 6  # the next element starts at its "{"
                continue
            break
        tail = buf[end:] + f.read(max_bytes)
    if not tail.startswith(b"\n  ]"):
        raise _refuse(error, p, f"{key}[{index - 1}] is not followed by ',' or the array's end")
    skeleton = head + b'\n  "' + key.encode() + b'": []' + tail[4:]
    doc = parse_json(skeleton.decode("utf-8", "replace"), source=str(p), error=error)
    if not isinstance(doc, dict):
        raise _refuse(error, p, "not a JSON object at the top")
    return doc


def parse_piece(piece: bytes, *, source: str, error: type[TokenwattError]) -> Any:
    """One element's JSON by orjson, which refuses NaN, Infinity and numbers beyond a float
    (and nests at most 1024 deep). The magnitude walk is left to the caller, who knows which
    of the element's numbers it will use (walking every number of 20,000 elements would cost
    more than parsing them)."""
    try:
        item = orjson.loads(piece)
    except orjson.JSONDecodeError as exc:
        m = _CONSTANT.search(piece[max(exc.pos - 1, 0) : exc.pos + 9].decode("utf-8", "replace"))
        why = f"{m.group()}: numbers must be finite" if m else f"not valid JSON ({exc.msg})"
        raise _refuse(error, source, why) from None
    return item


def _read_until(f: Any, marker: bytes) -> tuple[bytes | None, bytes]:
    """(the text before ``marker``, the rest from the marker's ``{`` on); (None, b"")
    where the file has no such marker."""
    buf = b""
    while True:
        at = buf.find(marker)
        if at >= 0:
            return buf[:at], buf[at + len(marker) - 1 :]
        chunk = f.read(_CHUNK_BYTES)
        if not chunk:
            return None, b""
        buf += chunk


def _next_end(
    f: Any, buf: bytes, pos: int, path: Path, error: type[TokenwattError]
) -> tuple[bytes, int, int]:
    """(buffer, start, end) of the element starting at ``buf[pos]``: ``end`` is just past
    its line ``    }``, and the 7 bytes after it are in the buffer too (read on as needed;
    the buffer is cut to start at the element when it grows)."""
    start = pos
    while True:
        at = buf.find(b"\n    }", start)
        if at >= 0 and len(buf) >= at + 13:
            return buf, pos, at + 6
        chunk = f.read(max(_CHUNK_BYTES, len(buf) - pos))
        if not chunk:
            if at >= 0:
                return buf, pos, at + 6
            raise _refuse(error, path, "ends inside an element of its array (truncated?)")
        start = (at if at >= 0 else max(len(buf) - 6, pos)) - pos
        buf, pos = buf[pos:] + chunk, 0
