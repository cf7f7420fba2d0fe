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
    "count_chat_tokens",
    "count_text_tokens",
    "output_text",
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
