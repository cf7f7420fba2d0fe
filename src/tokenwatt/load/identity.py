"""Whether an endpoint is the built-in simulator, asked of the endpoint itself.

Why: a run against a standalone ``tokenwatt sim`` drives a URL like any engine's, and its
spec says nothing of a simulator; its figures were still simulated, and every view must say
so. The simulator names itself in ``/version`` (``tokenwatt-sim <version>``) and in the
``owned_by`` of its model cards (``sim.names.SIM_SERVER_NAME``, passed in by ``load.target``,
the one module of ``load`` that knows the simulator); either is enough. An engine
that answers neither (vLLM answers ``/version`` with its own version; others 404) is an
engine. Both reads are bounded (2 s, 64 KiB each) and any failure means "not the simulator":
the check never stops a run. The model cards are read first; ``/version`` only where they
leave the question open (``server_identity``).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from tokenwatt import httpget

__all__ = ["IDENTITY_TIMEOUT_S", "server_identity"]

IDENTITY_TIMEOUT_S = 2.0
_MAX_BYTES = 1 << 16


def _get(url: str) -> str | None:
    try:
        return httpget.get(url, timeout_s=IDENTITY_TIMEOUT_S, max_bytes=_MAX_BYTES).decode(
            "utf-8", "replace"
        )
    except (httpget.HttpError, ValueError):
        return None


def _version_text(body: str) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return version[:200] if isinstance(version, str) else None


def _card_owners(body: str) -> set[str]:
    try:
        doc = json.loads(body)
    except ValueError:
        return set()
    data = doc.get("data") if isinstance(doc, dict) else None
    cards = data if isinstance(data, list) else []
    return {o for c in cards if isinstance(c, dict) and isinstance(o := c.get("owned_by"), str)}


def server_identity(base_url: str, name: str) -> str | None:
    """``"tokenwatt-sim 0.1.0"`` (its ``/version``) or ``"tokenwatt-sim (model card)"`` when
    the endpoint at ``base_url`` (ending in ``/v1``) names itself ``name``; None otherwise.
    ``/version`` is asked only of an endpoint whose model cards are owned by ``name`` or by
    ``vllm`` (the simulator's cards said so before they named it): an engine that claims
    neither is not sent to a path it may not serve. Blocking: call it from a thread."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    root = f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
    cards = _get(root + parts.path.rstrip("/") + "/models")
    owners = _card_owners(cards) if cards is not None else set()
    if not owners & {name, "vllm"}:
        return None
    body = _get(root + "/version")
    version = _version_text(body) if body is not None else None
    if version is not None and version.startswith(name):
        return version
    return f"{name} (model card)" if name in owners else None
