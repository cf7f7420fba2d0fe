"""The simulator's tokenizer: a deterministic rule any client can reproduce exactly.

Prompt tokens:
- a text prompt counts ``len(text.split())`` tokens (whitespace-separated words);
- a token-id list counts its length;
- chat counts the words of every message's text content plus ``CHAT_TOKENS_PER_MESSAGE``
  per message plus ``CHAT_TOKENS_REPLY`` for the reply header (a stand-in for the chat
  template, in the spirit of OpenAI's own counting recipe).
Output: one word per token, each with a leading space, cycling through ``WORDS``, so a
client that splits the text on whitespace counts exactly the generated tokens.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHAT_TOKENS_PER_MESSAGE",
    "CHAT_TOKENS_REPLY",
    "WORDS",
    "chat_words",
    "count_chat_tokens",
    "count_text_tokens",
    "output_text",
    "prompt_words",
]

CHAT_TOKENS_PER_MESSAGE = 3
CHAT_TOKENS_REPLY = 3

# Short, common English words: one token each in the usual BPE vocabularies.
WORDS: tuple[str, ...] = (
    " the",
    " of",
    " and",
    " to",
    " a",
    " in",
    " is",
    " that",
    " it",
    " for",
    " on",
    " with",
    " as",
    " was",
    " at",
    " by",
)


def count_text_tokens(text: str) -> int:
    return len(text.split())


def _content_words(content: Any) -> int:
    """Words of a message's content: a string, or a list of parts whose ``text`` counts."""
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text_tokens(content)
    if isinstance(content, list):
        n = 0
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                n += count_text_tokens(part["text"])
        return n
    raise TypeError("content must be a string, a list of parts or null")


def prompt_words(prompt: Any) -> list[Any]:
    """The tokens of a completion prompt (a string's words, or the token ids as given): what
    prefix caching names blocks by. ``len`` equals the counted prompt tokens."""
    if isinstance(prompt, str):
        return prompt.split()
    if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
        return prompt_words(prompt[0])
    return list(prompt)


def _content_text(content: Any) -> list[str]:
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):
        return [
            w
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            for w in part["text"].split()
        ]
    return []


def chat_words(messages: list[dict[str, Any]]) -> list[Any]:
    """The tokens of a chat prompt: per message ``CHAT_TOKENS_PER_MESSAGE`` template tokens
    naming its role, then its words; then ``CHAT_TOKENS_REPLY`` reply-header tokens.
    ``len`` equals ``count_chat_tokens``."""
    out: list[Any] = []
    for m in messages:
        role = m.get("role")
        out.extend(("<|msg|>", role, i) for i in range(CHAT_TOKENS_PER_MESSAGE))
        out.extend(_content_text(m.get("content")))
    out.extend(("<|reply|>", i) for i in range(CHAT_TOKENS_REPLY))
    return out


def count_chat_tokens(messages: list[dict[str, Any]]) -> int:
    return (
        sum(_content_words(m.get("content")) for m in messages)
        + CHAT_TOKENS_PER_MESSAGE * len(messages)
        + CHAT_TOKENS_REPLY
    )


def output_text(start: int, count: int) -> str:
    """Text of output tokens ``start`` .. ``start + count − 1``."""
    n = len(WORDS)
    return "".join(WORDS[i % n] for i in range(start, start + count))
