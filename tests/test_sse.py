"""The SSE parser on bytes: spec examples, the bugs other clients hit, and split-invariance."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwatt.client.sse import SSEError, SSEParser


def parse(*reads: bytes, finish: bool = True) -> list[bytes]:
    p = SSEParser()
    out: list[bytes] = []
    for r in reads:
        out += p.feed(r)
    if finish:
        out += p.finish()
    return out


def test_openai_stream_one_read() -> None:
    raw = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    assert parse(raw) == [b'{"a":1}', b'{"a":2}', b"[DONE]"]


def test_event_split_across_reads_and_several_per_read() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"x"') == []
    assert p.feed(b":1}\n") == []
    assert p.feed(b'\ndata: {"y":2}\n\ndata: {"z"') == [b'{"x":1}', b'{"y":2}']
    assert p.feed(b":3}\n\n") == [b'{"z":3}']


def test_split_right_after_data_colon_keeps_the_payload() -> None:
    # vllm #51172: stripping each fragment lost the space after "data:" and broke the JSON
    assert parse(b"data:", b' {"a": 1}', b"\n\n") == [b'{"a": 1}']
    assert parse(b'data: {"t": "a', b' b"}\n\n') == [b'{"t": "a b"}']


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    raw = b"data: one" + eol + eol + b"data: two" + eol + eol
    assert parse(raw) == [b"one", b"two"]


def test_crlf_split_between_cr_and_lf() -> None:
    # the CR ends the line; the LF in the next read must not count as a second (blank) line
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\ndata: b\r\n\r\n") == [b"a\nb"]
    # and a bare CR followed by a read starting with an ordinary byte
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\r") == [b"a"]


def test_comments_and_keepalives_are_ignored() -> None:
    p = SSEParser()
    out = p.feed(b": keep-alive\n\n:ping\ndata: x\n\n: keep-alive\n\n")
    assert out == [b"x"]
    assert p.comments == 3


def test_data_with_and_without_space() -> None:
    # only one leading space is removed
    assert parse(b"data:x\n\ndata: x\n\ndata:  x\n\n") == [b"x", b"x", b" x"]


def test_multiline_data_joined_with_lf() -> None:
    assert parse(b"data: a\ndata: b\ndata:\n\n") == [b"a\nb\n"]


def test_other_fields_and_events_without_data() -> None:
    p = SSEParser()
    out = p.feed(b"event: error\nid: 7\nretry: 100\nfoo: bar\n\nevent: x\ndata: 1\n\n")
    assert out == [b"1"]  # the first block has no data: not dispatched
    assert p.event_type == b"x"
    assert p.last_event_id == b"7"


def test_field_name_data_without_colon_is_an_empty_data_line() -> None:
    assert parse(b"data\n\n") == [b""]


def test_lines_longer_than_128_kib_in_many_reads() -> None:
    body = b'{"text":"' + b"x" * (300 * 1024) + b'"}'
    raw = b"data: " + body + b"\n\n"
    p = SSEParser()
    out: list[bytes] = []
    for i in range(0, len(raw), 1000):
        out += p.feed(raw[i : i + 1000])
    assert out == [body]


def test_event_size_limit_is_a_clear_error() -> None:
    p = SSEParser(max_event_bytes=1000)
    with pytest.raises(SSEError, match="longer than 1000"):
        for _ in range(5):
            p.feed(b"x" * 400)


def test_utf8_character_split_across_reads() -> None:
    text = "naïve — 東京 🚀".encode()
    raw = b'data: {"t":"' + text + b'"}\n\n'
    cut = raw.index("🚀".encode()) + 2  # inside the 4-byte emoji
    out = parse(raw[:cut], raw[cut:])
    assert out == [b'{"t":"' + text + b'"}']
    assert out[0].decode() == '{"t":"naïve — 東京 🚀"}'


def test_bom_at_start_is_dropped_even_split() -> None:
    assert parse(b"\xef", b"\xbb", b"\xbfdata: a\n\n") == [b"a"]
    assert parse(b"\xef\xbb\xbfdata: a\n\n") == [b"a"]


def test_stream_ending_without_blank_line_or_done() -> None:
    # vllm #24373: [DONE] without the closing blank line; finish() keeps the complete line
    p = SSEParser()
    assert p.feed(b"data: a\n\ndata: [DONE]") == [b"a"]
    assert p.finish() == [b"[DONE]"]
    p = SSEParser()
    assert p.feed(b"data: a\n\ndata: b\n") == [b"a"]
    assert p.finish() == [b"b"]
    p = SSEParser()
    assert p.feed(b"data: a\n\n") == [b"a"]
    assert p.finish() == []


def test_error_object_is_passed_through_as_data() -> None:
    raw = b'data: {"error": {"message": "boom", "code": 504}}\n\ndata: [DONE]\n\n'
    assert parse(raw) == [b'{"error": {"message": "boom", "code": 504}}', b"[DONE]"]


# ---------------------------------------------------------------- property-based

_payload = st.binary(min_size=0, max_size=60).map(
    lambda b: b.replace(b"\r", b"").replace(b"\n", b"")
) | st.text(min_size=0, max_size=20).map(lambda s: s.replace("\r", "").replace("\n", "").encode())


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A valid event stream and the data payloads a conforming parser must return.

    One line-terminator style per stream: a CR terminator followed by an LF terminator would
    read as a single CRLF, so mixing them is not a valid way to write two lines.
    """
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    parts: list[bytes] = []
    expected: list[bytes] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["event", "event", "comment", "other"]))
        if kind == "comment":
            parts.append(b":" + draw(_payload) + eol)
            continue
        if kind == "other":
            parts.append(b"event: " + draw(_payload) + eol + eol)
            continue
        lines = draw(st.lists(_payload, min_size=1, max_size=3))
        space = draw(st.booleans())
        for ln in lines:
            parts.append(b"data:" + (b" " if space else b"") + ln + eol)
        parts.append(eol)
        if space:
            expected.append(b"\n".join(lines))
        else:  # without the space, a payload's own leading space is the one removed
            expected.append(b"\n".join(ln[1:] if ln[:1] == b" " else ln for ln in lines))
    return b"".join(parts), expected


def _split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(data=streams(), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_yields_the_expected_events(
    data: tuple[bytes, list[bytes]], cuts: list[int]
) -> None:
    raw, expected = data
    assert parse(raw) == expected
    assert parse(*_split(raw, cuts)) == expected
    assert parse(*[raw[i : i + 1] for i in range(len(raw))]) == expected  # byte by byte


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=8))
def test_arbitrary_bytes_never_crash_and_split_invariant(raw: bytes, cuts: list[int]) -> None:
    assert parse(*_split(raw, cuts)) == parse(raw)
