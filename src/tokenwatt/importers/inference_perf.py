"""inference-perf's lifecycle report (``summary_lifecycle_metrics.json``/``.yaml``).

Its ``successes`` block holds ``latency`` distributions in seconds (``time_to_first_token``,
``time_per_output_token``, ``inter_token_latency``, ``request_latency``,
``normalized_time_per_output_token``), ``prompt_len``/``output_len`` and ``throughput``
(``output_tokens_per_sec`` = output tokens of the successful requests ÷
``benchmark_time_seconds``). Against TokenWatt's definitions:

* TPOT: (E2E − TTFT) ÷ (n − 1) per request: the same; ITL: per streamed chunk: TokenWatt's
  chunk ITL, not τ. The report has no per-request records, so τ is taken as mean TPOT.
* Throughput over the whole benchmark time, not a steady window.
"""

from __future__ import annotations

from typing import Any

from tokenwatt.importers.base import ImportedRun, ImportFileError, latency_from, number

__all__ = ["looks_like", "read"]

KEYS = {"mean": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}
NOTES = [
    "inference-perf's throughput divides the successful requests' output tokens by the whole "
    "benchmark time, not by a steady window",
    "inference-perf's inter_token_latency is per streamed chunk (TokenWatt's chunk ITL); its "
    "report has no per-request records, so τ and lengths come from its summary (MBU notes)",
]


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and "successes" in doc and "load_summary" in doc


def read(doc: Any) -> list[ImportedRun]:
    s = doc["successes"]
    lat = s.get("latency") or {}
    duration = number(doc, "benchmark_time_seconds")
    tput = number(s, "throughput", "output_tokens_per_sec")
    if duration is None or tput is None:
        raise ImportFileError(
            "inference-perf report: needs benchmark_time_seconds and "
            "successes.throughput.output_tokens_per_sec"
        )
    ok = int(number(s, "count") or 0)
    return [
        ImportedRun(
            tool="inference-perf",
            tool_version=None,
            source_format="inference-perf-lifecycle",
            output_tokens_per_s=tput,
            duration_s=duration,
            ttft_s=latency_from(lat.get("time_to_first_token"), KEYS, scale=1.0, count=ok),
            tpot_s=latency_from(lat.get("time_per_output_token"), KEYS, scale=1.0, count=ok),
            itl_s=latency_from(lat.get("inter_token_latency"), KEYS, scale=1.0),
            e2e_s=latency_from(lat.get("request_latency"), KEYS, scale=1.0, count=ok),
            requests_ok=ok,
            requests_failed=int(number(doc, "failures", "count") or 0),
            rate_rps=number(doc, "load_summary", "requested_rate"),
            request_rate_rps=number(s, "throughput", "requests_per_sec"),
            mean_input_tokens=number(s, "prompt_len", "mean"),
            mean_output_tokens=number(s, "output_len", "mean"),
            max_input_tokens=number(s, "prompt_len", "max"),
            max_output_tokens=number(s, "output_len", "max"),
            notes=list(NOTES),
        )
    ]
