"""Streaming OpenAI client with kernel receive timestamps (see docs/methodology.md).

``StreamClient`` sends one streaming request per ``stream()`` call over its own non-blocking
sockets and returns a ``RequestRecord``; it sets no load policy.
"""

from __future__ import annotations

from tokenwatt.client.core import StreamClient
from tokenwatt.client.openai import build_body, interpret
from tokenwatt.client.sse import SSEError, SSEParser
from tokenwatt.client.stamps import kernel_stamps_available, take_clock_info

__all__ = [
    "SSEError",
    "SSEParser",
    "StreamClient",
    "build_body",
    "interpret",
    "kernel_stamps_available",
    "take_clock_info",
]
