"""What an imported file holds, in TokenWatt's units, whatever tool wrote it.

Each format module (``vllm``, ``guidellm``, ``aiperf``, ``inference_perf``, ``br02``) turns
its file into one ``ImportedRun`` per benchmark it holds (GuideLLM sweeps hold several). The
peer's own numbers are kept as the peer printed them (``Latency`` from its summary, T as its
throughput), with ``notes`` naming every place where its definition differs from
TokenWatt's (docs/methodology.md, "Importing other tools' results"). Per-request records,
where the file has them, give the exact lengths for MBU and the token-weighted ITL τ.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tokenwatt.errors import TokenwattError
from tokenwatt.result import Latency

__all__ = [
    "ImportFileError",
    "ImportedRun",
    "latency_from",
    "number",
    "per_request",
    "when",
]


class ImportFileError(TokenwattError):
    """A file that cannot be read as the format it claims; the message names the field."""


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """One benchmark (one load point) of another tool, in seconds and tokens."""

    tool: str
    tool_version: str | None
    source_format: str
    output_tokens_per_s: float  # T as the peer reported it
    duration_s: float  # the span the peer's throughput divides by
    ttft_s: Latency
    tpot_s: Latency
    itl_s: Latency
    e2e_s: Latency
    requests_ok: int
    requests_failed: int = 0
    model: str | None = None  # the served model name the file names
    rate_rps: float | None = None  # offered rate, requests/s (open loop)
    concurrency: int | None = None  # closed loop
    request_rate_rps: float | None = None  # completed requests/s as the peer reported it
    mean_input_tokens: float | None = None
    mean_output_tokens: float | None = None
    # per request (prompt tokens, output tokens), when the file has per-request records
    pairs: Sequence[tuple[int, int]] | None = None
    # per request (TTFT s, E2E s) of the same requests, for attainment and goodput
    timings: Sequence[tuple[float, float]] | None = None
    itl_token_weighted_s: float | None = None  # τ from per-request records
    max_input_tokens: float | None = None  # longest prompt, where a summary gives it
    max_output_tokens: float | None = None  # longest output, where a summary gives it
    median_itl_s: float | None = None  # the pooled ITL's median, where no mean is published
    mean_power_w: float | None = None  # the source's own mean power over its window (GPUs)
    engine_batch: float | None = None  # the engine's own mean running batch, where published
    # the node the file says this run ran on (accelerator name, GPUs), where it names one per
    # run (ML.ENERGY mixes GPUs in one file): only runs on the stated node are imported
    node: tuple[str, int] | None = None
    started_at: datetime | None = None  # the peer's own run start (UTC), where the file says
    ended_at: datetime | None = None
    notes: list[str] = field(default_factory=list)


def number(doc: Any, *path: str | int) -> float | None:
    """``doc[a][b]…`` as a float; None where any step is missing or not a number."""
    node = doc
    for key in path:
        in_dict = isinstance(node, dict) and key in node
        in_list = isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node)
        if not (in_dict or in_list):
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def latency_from(stats: Any, keys: dict[str, str], *, scale: float, count: int = 0) -> Latency:
    """A peer's summary block as ``Latency`` in seconds: ``keys`` maps our field (mean, p50,
    p90, p95, p99, max) to the peer's key inside ``stats``; ``scale`` converts to seconds."""
    values: dict[str, float | None] = {}
    for ours, theirs in keys.items():
        v = number(stats, *theirs.split("."))
        values[ours] = None if v is None else v * scale
    return Latency(count=count, **values)


def per_request(rows: Iterable[tuple[int, int, float, float]]) -> dict[str, Any]:
    """``ImportedRun``'s per-request fields from (prompt tokens, output tokens, TTFT s, E2E s)
    of each finished request: the pairs, the timings and τ = Σ(E2E − TTFT) ÷ Σ(n − 1) (the
    definition of ``metrics.latency``); {} when there is no row."""
    pairs, timings, decode_s, decode_n = [], [], 0.0, 0
    for n_in, n_out, ttft_s, e2e_s in rows:
        pairs.append((n_in, n_out))
        timings.append((ttft_s, e2e_s))
        if n_out > 1:
            decode_s += e2e_s - ttft_s
            decode_n += n_out - 1
    if not pairs:
        return {}
    tau = decode_s / decode_n if decode_n else None
    return {"pairs": pairs, "timings": timings, "itl_token_weighted_s": tau}


def when(value: Any, fmt: str | None = None) -> datetime | None:
    """A peer's timestamp as an aware UTC datetime: epoch seconds, ISO 8601, or ``fmt``
    (``strptime``; naive times taken as UTC, as the peers write them); None where absent or
    unreadable (the run's date is then the import's, said in the result's warnings)."""
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(float(value), UTC)
        if isinstance(value, datetime):
            stamp = value
        elif isinstance(value, str):
            stamp = datetime.strptime(value, fmt) if fmt else datetime.fromisoformat(value)
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)
