"""OpenAI request bodies and chunk interpretation (pure functions, hand-built streams)."""

from __future__ import annotations

import orjson
import pytest

from tokenwatt.client.openai import (
    build_body,
    error_of,
    interpret,
    is_content,
    message_from_body,
    model_ids,
)
from tokenwatt.errors import SpecError
from tokenwatt.records import RequestRecord


def rec() -> RequestRecord:
    return RequestRecord(request_id=1, scheduled_ns=0, prompt_tokens_client=11, max_tokens=8)


def cmpl(text: str, *, fr: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    obj: dict[str, object] = {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": fr}],
    }
    if usage is not None:
        obj["usage"] = usage
    return orjson.dumps(obj)


def chat(delta: dict[str, object], *, fr: str | None = None, usage: object = None) -> bytes:
    obj: dict[str, object] = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": fr}],
    }
    if usage is not None:
        obj["usage"] = usage
    return orjson.dumps(obj)


def usage_only(prompt: int, completion: int) -> bytes:
    u = {"prompt_tokens": prompt, "completion_tokens": completion}
    return orjson.dumps({"choices": [], "usage": u})


def run(payloads: list[bytes], api: str = "completions", reads: list[int] | None = None):
    r = rec()
    stamps = [1000 * (i + 1) for i in range(len(payloads))]
    interpret(payloads, stamps, reads or list(range(len(payloads))), api, r)  # type: ignore[arg-type]
    return r


# ---------------------------------------------------------------- request bodies


def test_completions_body_with_token_ids_usage_and_ignore_eos() -> None:
    body = build_body(
        api="completions", model="m", prompt=[1, 2, 3], max_tokens=7, extra_body={"top_k": 1}
    )
    assert body == {
        "model": "m",
        "prompt": [1, 2, 3],
        "max_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "min_tokens": 7,
        "top_k": 1,
    }


def test_chat_body_and_options_off() -> None:
    body = build_body(
        api="chat",
        model="m",
        prompt="hi",
        max_tokens=5,
        stream_usage=False,
        ignore_eos=False,
        extra_body={"max_completion_tokens": None, "temperature": 0},
    )
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "stream": True,
        "temperature": 0,
    }


def test_chat_with_token_ids_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"endpoint\.api"):
        build_body(api="chat", model="m", prompt=[1, 2], max_tokens=1)


# ---------------------------------------------------------------- interpretation


def test_multi_token_chunks_from_continuous_usage() -> None:
    # speculative decoding: 1, 3, 2 tokens per chunk; final usage chunk adds nothing
    r = run(
        [
            cmpl("a", usage={"prompt_tokens": 5, "completion_tokens": 1}),
            cmpl("bcd", usage={"prompt_tokens": 5, "completion_tokens": 4}),
            cmpl("ef", fr="length", usage={"prompt_tokens": 5, "completion_tokens": 6}),
            usage_only(5, 6),
        ]
    )
    assert list(r.chunk_tokens) == [1, 3, 2]
    assert list(r.chunk_ns) == [1000, 2000, 3000]
    assert (r.first_token_ns, r.end_ns) == (1000, 3000)
    assert (r.prompt_tokens, r.completion_tokens) == (5, 6)
    assert r.usage_source == "server" and r.chunk_tokens_source == "usage"
    assert r.finish_reason == "length" and r.ok


def test_fallback_one_token_per_content_chunk_with_final_usage() -> None:
    r = run([cmpl("a"), cmpl("b"), cmpl("", fr="stop"), usage_only(9, 3)])
    assert list(r.chunk_tokens) == [1, 1]  # the empty-text finish chunk is no token
    assert r.completion_tokens == 3  # the server's count (EOS included) wins
    assert r.usage_source == "server" and r.chunk_tokens_source == "fallback"
    assert r.prompt_tokens == 9


def test_fallback_without_any_usage_is_flagged() -> None:
    r = run([cmpl("a"), cmpl("b"), cmpl("c")])
    assert r.completion_tokens == 3 and r.usage_source == "fallback"
    assert r.prompt_tokens == 11  # the client's own count


def test_chat_role_only_chunk_is_not_a_token() -> None:
    r = run(
        [
            chat({"role": "assistant", "content": ""}),
            chat({"content": "Hel"}),
            chat({"content": "lo"}, fr="stop"),
            usage_only(4, 2),
        ],
        api="chat",
    )
    assert list(r.chunk_ns) == [2000, 3000]
    assert r.first_token_ns == 2000
    assert list(r.chunk_tokens) == [1, 1]


def test_reasoning_and_tool_call_deltas_count_as_output() -> None:
    assert is_content(orjson.loads(chat({"reasoning_content": "hm"})), "chat")
    assert is_content(orjson.loads(chat({"tool_calls": [{"index": 0}]})), "chat")
    assert not is_content(orjson.loads(chat({"content": None})), "chat")
    assert not is_content({"choices": None}, "chat")
    assert not is_content({"object": None}, "chat")


def test_tokens_on_non_content_chunks_move_to_the_next_or_last_chunk() -> None:
    r = run(
        [
            chat({"role": "assistant"}, usage={"prompt_tokens": 3, "completion_tokens": 1}),
            chat({"content": "a"}, usage={"prompt_tokens": 3, "completion_tokens": 2}),
            chat({"content": "b"}, usage={"prompt_tokens": 3, "completion_tokens": 3}),
            chat({}, fr="stop", usage={"prompt_tokens": 3, "completion_tokens": 4}),
        ],
        api="chat",
    )
    assert list(r.chunk_tokens) == [2, 2]
    assert sum(r.chunk_tokens) == r.completion_tokens == 4


def test_error_object_in_a_200_stream_is_a_failure_even_after_content() -> None:
    err = b'{"error": {"message": "TimeoutError", "type": "GatewayTimeout", "code": 504}}'
    r = run([cmpl("a"), err])
    assert r.status == "error" and r.error_kind == "stream_error"
    assert r.error_message == "GatewayTimeout: TimeoutError"
    assert list(r.chunk_tokens) == [1]  # what arrived before stays measured


def test_error_only_stream_has_no_tokens() -> None:
    r = run([b'{"object":"error","message":"context too long","code":400}'])
    assert r.error_kind == "stream_error" and r.error_message == "context too long"
    assert list(r.chunk_ns) == [] and r.first_token_ns is None


def test_malformed_json_is_a_protocol_failure() -> None:
    r = run([cmpl("a"), b'{"choices": [', cmpl("b")])
    assert r.error_kind == "protocol"
    assert r.error_message is not None and "malformed JSON" in r.error_message
    r = run([b"[1,2]"])
    assert r.error_kind == "protocol"


def test_coalesced_reads_count_reads_with_several_content_chunks() -> None:
    # reads: 0 → 1 chunk, 1 → 3 chunks, 2 → 1 chunk + usage, 3 → 2 chunks
    p = [cmpl("a"), cmpl("b"), cmpl("c"), cmpl("d"), cmpl("e"), usage_only(1, 7), cmpl("f")]
    p.append(cmpl("g"))
    r = run(p, reads=[0, 1, 1, 1, 2, 2, 3, 3])
    assert r.coalesced_reads == 2


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"error":{"message":"The model `x` does not exist.","type":"NotFoundError",'
            b'"param":null,"code":404}}',
            "HTTP 404: NotFoundError: The model `x` does not exist.",
        ),
        (
            b'{"object":"error","message":"bad","type":"BadRequestError","code":404}',
            "HTTP 404: bad",
        ),
        (b'{"error":"Input validation error"}', "HTTP 404: Input validation error"),
        (b"<html>\n Not  Found</html>", "HTTP 404: <html> Not Found</html>"),
        (b"", "HTTP 404: Not Found"),
    ],
)
def test_http_error_messages(body: bytes, expected: str) -> None:
    assert message_from_body(404, "Not Found", body) == expected


def test_error_of_shapes() -> None:
    assert error_of({"error": None, "choices": []}) is None
    assert error_of({"error": {"code": "x"}}) == '{"code":"x"}'


def test_model_ids() -> None:
    assert model_ids(b'{"object":"list","data":[{"id":"a"},{"id":"b"}]}') == ["a", "b"]
    with pytest.raises(ValueError, match="data"):
        model_ids(b'{"detail":"Not Found"}')
