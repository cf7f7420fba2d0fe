"""GuideLLM's ``benchmarks.json`` (report version 2: ``metadata``, ``config``, ``benchmarks``).

One run per benchmark (a sweep holds several load points). Every metric is a distribution
per status under ``metrics.<name>.successful`` (``mean``, ``median``, ``max``,
``percentiles.p90/p95/p99``). GuideLLM's names against TokenWatt's definitions:

* ``inter_token_latency_ms`` is per request (E2E − TTFT) ÷ (n − 1): TokenWatt's TPOT.
* ``time_per_output_token_ms`` is per request E2E ÷ n, the first token included (BR0.2's
  NTPOT): not TPOT, so it is not used as TPOT here.
* There is no per-chunk ITL; TokenWatt's chunk ITL is left empty.
* ``output_tokens_per_second`` is GuideLLM's own rate (the figure its table prints).
"""

from __future__ import annotations

from typing import Any

from tokenwatt.importers.base import (
    ImportedRun,
    ImportFileError,
    latency_from,
    number,
    per_request,
    when,
)

__all__ = ["looks_like", "read"]

KEYS = {
    "mean": "mean",
    "p50": "median",
    "p90": "percentiles.p90",
    "p95": "percentiles.p95",
    "p99": "percentiles.p99",
    "max": "max",
}
NOTES = [
    "GuideLLM's inter_token_latency is per request (E2E − TTFT)/(n − 1): imported as TPOT; "
    "its time_per_output_token includes the first token and is not used",
    "GuideLLM reports no per-chunk ITL",
]


def looks_like(doc: Any) -> bool:
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        return False
    first = doc["benchmarks"][0] if doc["benchmarks"] else {}
    return isinstance(first, dict) and "time_to_first_token_ms" in (first.get("metrics") or {})


def _succ(metrics: dict[str, Any], name: str) -> Any:
    return (metrics.get(name) or {}).get("successful")


def _load(b: dict[str, Any]) -> tuple[float | None, int | None]:
    strategy = (b.get("config") or {}).get("strategy") or {}
    kind = strategy.get("type_")
    if kind == "concurrent":
        streams = strategy.get("streams")
        return None, int(streams) if isinstance(streams, int) else None
    rate = strategy.get("rate")
    return (float(rate) if isinstance(rate, int | float) else None), None


def _requests(b: dict[str, Any]) -> dict[str, Any]:
    """Per-request lengths and timings of the successful requests GuideLLM kept (it may keep a
    sample); {} when there are none."""
    rows = []
    for r in (b.get("requests") or {}).get("successful") or []:
        n_in = number(r, "prompt_tokens")
        n_out = number(r, "output_tokens")
        ttft_ms = number(r, "time_to_first_token_ms")
        e2e_s = number(r, "request_latency")
        if n_in is None or n_out is None or ttft_ms is None or e2e_s is None:
            continue
        rows.append((int(n_in), int(n_out), ttft_ms / 1e3, e2e_s))
    return per_request(rows)


def _run(b: dict[str, Any], version: str | None, model: str | None) -> ImportedRun:
    m = b.get("metrics") or {}
    tput = number(_succ(m, "output_tokens_per_second"), "mean")
    duration = number(b, "duration")
    if tput is None or duration is None:
        raise ImportFileError("GuideLLM benchmarks.json: a benchmark lacks duration or throughput")
    ok = int(number(m, "request_totals", "successful") or 0)
    rate, conc = _load(b)
    per_request = _requests(b)
    notes = list(NOTES)
    if not per_request:
        notes.append("no per-request records: lengths known only as means (see the MBU notes)")
    return ImportedRun(
        tool="GuideLLM",
        tool_version=version,
        source_format="guidellm-benchmarks-json",
        output_tokens_per_s=tput,
        duration_s=duration,
        ttft_s=latency_from(_succ(m, "time_to_first_token_ms"), KEYS, scale=1e-3, count=ok),
        tpot_s=latency_from(_succ(m, "inter_token_latency_ms"), KEYS, scale=1e-3, count=ok),
        itl_s=latency_from(None, {}, scale=1.0),
        e2e_s=latency_from(_succ(m, "request_latency"), KEYS, scale=1.0, count=ok),
        requests_ok=ok,
        requests_failed=int(number(m, "request_totals", "errored") or 0),
        model=model,
        rate_rps=rate,
        concurrency=conc,
        request_rate_rps=number(_succ(m, "requests_per_second"), "mean"),
        mean_input_tokens=number(_succ(m, "prompt_token_count"), "mean"),
        mean_output_tokens=number(_succ(m, "output_token_count"), "mean"),
        max_input_tokens=number(_succ(m, "prompt_token_count"), "max"),
        max_output_tokens=number(_succ(m, "output_token_count"), "max"),
        started_at=when(b.get("start_time")),
        ended_at=when(b.get("end_time")),
        notes=notes,
        **per_request,
    )


def read(doc: Any) -> list[ImportedRun]:
    meta = doc.get("metadata") or {}
    version = meta.get("guidellm_version")
    backend = ((doc.get("config") or {}).get("spec") or {}).get("backend") or {}
    return [_run(b, version, backend.get("model")) for b in doc["benchmarks"]]
