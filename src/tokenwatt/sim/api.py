"""Request bodies of ``/v1/completions`` and ``/v1/chat/completions``, checked field by field.

Every problem becomes an ``ApiError`` with the HTTP status and a message naming the field,
which the server sends in vLLM's error shape. Unknown fields are ignored, as servers do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenwatt.sim.tokens import chat_words, count_chat_tokens, count_text_tokens, prompt_words

__all__ = ["ApiError", "Parsed", "parse_request"]

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class Parsed:
    model: str
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    prompt: list[Any] | None = None  # its tokens, when asked for (prefix caching)


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


def _opt_int(body: dict[str, Any], name: str, minimum: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"'{name}' must be an integer, got {type(v).__name__}", name)
    if v < minimum:
        raise _bad(f"'{name}' must be >= {minimum}, got {v}", name)
    return v


def _opt_bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _bad(f"'{name}' must be a boolean, got {type(v).__name__}", name)
    return v


def _is_token_list(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in v
    )


def _prompt_tokens(prompt: Any) -> int:
    """A string, a list of token ids, or a one-element list of either (batches: no)."""
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    if _is_token_list(prompt) and prompt:
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        (only,) = prompt
        if isinstance(only, str):
            return count_text_tokens(only)
        if _is_token_list(only):
            return len(only)
    if isinstance(prompt, list) and len(prompt) > 1 and not _is_token_list(prompt):
        raise _bad("batched prompts are not supported; send one prompt per request", "prompt")
    raise _bad("'prompt' must be a string or a list of token ids (non-negative integers)", "prompt")


def _messages_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list of message objects", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _bad(f"'messages[{i}]' must be an object", "messages")
        if not isinstance(m.get("role"), str):
            raise _bad(f"'messages[{i}].role' must be a string", "messages")
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _bad(
                f"'messages[{i}].content' must be a string, a list of parts or null", "messages"
            )
    return count_chat_tokens(messages)


def _model(body: dict[str, Any], served_model: str, accepts: Callable[[str], bool] | None) -> str:
    """The requested model: absent means the served one; another name must be one ``accepts``
    takes for this model, else vLLM's 404."""
    model = body.get("model")
    if model is None:
        return served_model
    if not isinstance(model, str):
        raise _bad("'model' must be a string", "model")
    if model != served_model and not (accepts is not None and accepts(model)):
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    return model


def _stream_options(body: dict[str, Any], stream: bool) -> tuple[bool, bool]:
    """``stream_options``' ``include_usage`` and ``continuous_usage_stats``, allowed only when
    streaming (vLLM's rule)."""
    opts = body.get("stream_options")
    if opts is None:
        return False, False
    if not isinstance(opts, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    if not stream:
        raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
    return _opt_bool(opts, "include_usage", default=True), _opt_bool(opts, "continuous_usage_stats")


def parse_request(
    body: Any,
    *,
    chat: bool,
    served_model: str,
    max_model_len: int,
    want_prompt: bool = False,
    accepts: Callable[[str], bool] | None = None,
) -> Parsed:
    """The request's fields, checked; ``want_prompt`` also returns the prompt's tokens;
    ``accepts`` says which other model names are this model (``sim.names``)."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = _model(body, served_model, accepts)

    if chat:
        if "messages" not in body:
            raise _bad("'messages' is required", "messages")
        prompt_tokens = _messages_tokens(body["messages"])
    else:
        if "prompt" not in body:
            raise _bad("'prompt' is required", "prompt")
        prompt_tokens = _prompt_tokens(body["prompt"])
    if prompt_tokens < 1:
        raise _bad("the prompt is empty; send at least one token", "prompt")

    n = _opt_int(body, "n", 1)
    if n not in (None, 1):
        raise _bad("only n=1 is supported", "n")
    stream = _opt_bool(body, "stream")
    include_usage, continuous = _stream_options(body, stream)

    max_tokens = None
    if chat:
        max_tokens = _opt_int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _opt_int(body, "max_tokens", 1)
    if prompt_tokens >= max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt has {prompt_tokens} tokens. Please reduce the length of the prompt.",
            "prompt" if not chat else "messages",
        )
    if max_tokens is None:
        max_tokens = max_model_len - prompt_tokens if chat else COMPLETION_DEFAULT_MAX_TOKENS
    if prompt_tokens + max_tokens > max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, "
            f"{max_tokens} in the completion). Please reduce the length of the prompt or "
            "completion.",
            "max_tokens",
        )
    min_tokens = _opt_int(body, "min_tokens", 0) or 0
    if min_tokens > max_tokens:
        raise _bad(
            f"'min_tokens' ({min_tokens}) must be <= max_tokens ({max_tokens})", "min_tokens"
        )
    ignore_eos = _opt_bool(body, "ignore_eos")
    prompt = None
    if want_prompt:
        prompt = chat_words(body["messages"]) if chat else prompt_words(body["prompt"])
    return Parsed(
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        prompt=prompt,
    )
