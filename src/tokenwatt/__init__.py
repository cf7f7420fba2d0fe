"""TokenWatt Bench: SLO goodput, tokens per joule and decode bandwidth utilization (MBU)
for any OpenAI-compatible LLM serving endpoint."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
