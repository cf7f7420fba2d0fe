"""AIPerf's ``profile_export_aiperf.json``, with its per-request ``profile_export.jsonl``.

The summary holds one block per metric (``unit``, ``avg``, ``p50``…``p99``, ``max``, ``count``).
AIPerf's names against TokenWatt's definitions:

* ``inter_token_latency`` is per request (E2E − TTFT) ÷ (OSL − 1): TokenWatt's TPOT.
* ``inter_chunk_latency`` is every gap between streamed events as AIPerf's client read them:
  TokenWatt's chunk ITL, except that events its client read together count as 0 ms gaps.
* ``output_token_throughput``: output tokens ÷ ``benchmark_duration`` (the whole profiling
  phase, its start-up included), not a steady window.
* Lengths: the server's usage where the record has it (``usage_prompt_tokens``,
  ``usage_completion_tokens``), else AIPerf's own count (its tokenizer on the text).
* Energy: with GPU telemetry AIPerf states its own mean GPU power over the profiling phase
  (``nvidia_average_gpu_power``, ``amd_average_gpu_power``: its counter delta ÷ the phase,
  summed over its GPUs), kept as the run's own figure; its ``gpu_telemetry_export.jsonl``
  beside the summary, read as a power log (``power.logs``), takes precedence.

The per-request file (``profile_export.jsonl`` beside the summary, read when present) gives
the exact lengths for MBU and τ = Σ(E2E − TTFT) ÷ Σ(n − 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tokenwatt.bounded import IMPORT_MAX_BYTES, read_bounded
from tokenwatt.importers.base import (
    ImportedRun,
    ImportFileError,
    latency_from,
    number,
    per_request,
    when,
)

__all__ = ["RECORDS_FILE", "looks_like", "read", "records_beside"]

RECORDS_FILE = "profile_export.jsonl"
KEYS = {"mean": "avg", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}
_SCALE = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "ns": 1e-9, "us": 1e-6}
NOTES = [
    "AIPerf's inter_token_latency is per request (E2E − TTFT)/(n − 1): imported as TPOT",
    "AIPerf's inter_chunk_latency counts events its client read together as 0 ms gaps",
    "AIPerf's output_token_throughput divides by the whole profiling phase (start-up "
    "included), not by a steady window",
]


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and "aiperf_version" in doc and "time_to_first_token" in doc


def records_beside(path: Path) -> list[dict[str, Any]] | None:
    """The per-request records of ``profile_export.jsonl`` beside the summary; None if absent."""
    beside = path.with_name(RECORDS_FILE)
    if not beside.is_file():
        return None
    out = []
    raw = read_bounded(beside, max_bytes=IMPORT_MAX_BYTES, error=ImportFileError)
    for i, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise ImportFileError(f"{beside.name} line {i}: not JSON") from None
    return out


def _value(rec: dict[str, Any], name: str) -> float | None:
    return number(rec, "metrics", name, "value")


def _per_request(records: list[dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for rec in records:
        meta = rec.get("metadata") or {}
        phase = meta.get("benchmark_phase")
        if rec.get("error") or meta.get("was_cancelled") or phase not in (None, "profiling"):
            continue
        n_in = _value(rec, "usage_prompt_tokens") or _value(rec, "input_sequence_length")
        n_out = _value(rec, "usage_completion_tokens") or _value(rec, "output_sequence_length")
        ttft_ms, e2e_ms = _value(rec, "time_to_first_token"), _value(rec, "request_latency")
        if n_in is None or n_out is None or ttft_ms is None or e2e_ms is None:
            continue
        rows.append((int(n_in), int(n_out), ttft_ms / 1e3, e2e_ms / 1e3))
    return per_request(rows)


def _lat(doc: dict[str, Any], name: str) -> Any:
    block = doc.get(name) or {}
    scale = _SCALE.get(str(block.get("unit", "ms")), 1e-3)
    return latency_from(block, KEYS, scale=scale, count=int(number(block, "count") or 0))


def _load(doc: dict[str, Any]) -> tuple[float | None, int | None]:
    phases = (doc.get("input_config") or {}).get("phases") or []
    prof: dict[str, Any] = next((p for p in phases if p.get("kind") == "profiling"), {})
    conc = prof.get("concurrency")
    rate = prof.get("request_rate") or prof.get("rate")
    return (float(rate) if isinstance(rate, int | float) else None), (
        int(conc) if isinstance(conc, int) and not rate else None
    )


def _own_power_w(doc: dict[str, Any]) -> float | None:
    """AIPerf's own mean GPU power (W, every vendor's GPUs summed); None without telemetry."""
    parts = [number(doc, f"{v}_average_gpu_power", "avg") for v in ("nvidia", "amd")]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def read(doc: Any, records: list[dict[str, Any]] | None = None) -> list[ImportedRun]:
    tput = number(doc, "output_token_throughput", "avg")
    duration = number(doc, "benchmark_duration", "avg")
    if tput is None or duration is None:
        raise ImportFileError(
            "AIPerf profile_export_aiperf.json: needs output_token_throughput and "
            "benchmark_duration"
        )
    per_request = _per_request(records) if records else {}
    notes = list(NOTES)
    if not per_request:
        notes.append(f"no {RECORDS_FILE} beside it: τ and lengths from the summary (MBU notes)")
    rate, conc = _load(doc)
    models = ((doc.get("input_config") or {}).get("models") or {}).get("items") or [{}]
    errors = sum(int(e.get("count", 0)) for e in doc.get("error_summary") or [])
    return [
        ImportedRun(
            tool="AIPerf",
            tool_version=doc.get("aiperf_version"),
            source_format="aiperf-profile-export",
            output_tokens_per_s=tput,
            duration_s=duration,
            ttft_s=_lat(doc, "time_to_first_token"),
            tpot_s=_lat(doc, "inter_token_latency"),
            itl_s=_lat(doc, "inter_chunk_latency"),
            e2e_s=_lat(doc, "request_latency"),
            requests_ok=int(number(doc, "request_count", "avg") or 0),
            requests_failed=errors,
            model=models[0].get("name"),
            rate_rps=rate,
            concurrency=conc,
            request_rate_rps=number(doc, "request_throughput", "avg"),
            mean_input_tokens=number(doc, "input_sequence_length", "avg"),
            mean_output_tokens=number(doc, "output_sequence_length", "avg"),
            max_input_tokens=number(doc, "input_sequence_length", "max"),
            max_output_tokens=number(doc, "output_sequence_length", "max"),
            started_at=when(doc.get("start_time")),
            ended_at=when(doc.get("end_time")),
            mean_power_w=_own_power_w(doc),
            notes=notes,
            **per_request,
        )
    ]
