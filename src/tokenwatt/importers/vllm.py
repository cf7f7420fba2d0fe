"""``vllm bench serve --save-result`` JSON (with ``--save-detailed``: per-request arrays).

vLLM's summary keys are ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms``; with details the
file also holds ``input_lens``, ``output_lens``, ``ttfts`` (s) and ``itls`` (s, per request,
one gap per streamed chunk after the first). Its definitions against TokenWatt's:

* TPOT: per request (E2E − TTFT) ÷ (n − 1), mean and percentiles over requests: the same.
* ITL: every gap between streamed chunks, pooled: TokenWatt's chunk ITL (a chunk of several
  tokens is one gap), not τ; τ is Σ(E2E − TTFT) ÷ Σ(n − 1) from the per-request arrays.
* ``output_throughput``: all output tokens ÷ the whole run (first send to last completion,
  ramp and drain included), not tokens received inside a steady window.
* Token counts: what vLLM counted (the server's usage when it streams it, else vLLM's own
  tokenizer on the text).
"""

from __future__ import annotations

from datetime import timedelta
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

NOTES = [
    "vLLM's output_throughput divides every output token by the whole run (ramp and drain "
    "included), not by a steady window",
    "vLLM's ITL is per streamed chunk (pooled gaps), TokenWatt's chunk ITL; τ is recomputed "
    "from the per-request arrays where the file has them",
    "token counts as vLLM counted them (server usage, else its tokenizer on the text)",
]


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and "output_throughput" in doc and "completed" in doc


def _lat(doc: dict[str, Any], name: str, count: int) -> Any:
    keys = {"mean": f"mean_{name}_ms", "p50": f"median_{name}_ms"}
    keys |= {f"p{q}": f"p{q}_{name}_ms" for q in (90, 95, 99) if f"p{q}_{name}_ms" in doc}
    return latency_from(doc, keys, scale=1e-3, count=count)


def _details(doc: dict[str, Any]) -> dict[str, Any]:
    """Per-request pairs, (TTFT, E2E) and τ from the detailed arrays; {} without them.
    E2E is ``latencies`` where written, else TTFT + the request's chunk gaps (``itls``)."""
    ins, outs, ttfts, itls = (doc.get(k) for k in ("input_lens", "output_lens", "ttfts", "itls"))
    if not (
        isinstance(ins, list)
        and isinstance(outs, list)
        and isinstance(ttfts, list)
        and isinstance(itls, list)
    ):
        return {}
    errors = doc.get("errors") or [""] * len(outs)
    ends = doc.get("latencies")  # E2E per request, where the file has it
    if not isinstance(ends, list) or len(ends) != len(outs):
        ends = [float(t) + float(sum(g)) for t, g in zip(ttfts, itls, strict=False)]
    rows = [
        (int(p), int(n), float(ttft), float(e2e))
        for p, n, ttft, e2e, err in zip(ins, outs, ttfts, ends, errors, strict=False)
        if not err and n and ttft  # a failed request: vLLM leaves output_len 0 and ttft 0
    ]
    return per_request(rows)


def read(doc: Any) -> list[ImportedRun]:
    """One run: vLLM writes one load point per file."""
    duration = number(doc, "duration")
    tput = number(doc, "output_throughput")
    if duration is None or tput is None:
        raise ImportFileError("vllm bench serve JSON: needs duration and output_throughput")
    ok = int(number(doc, "completed") or 0)
    failed = int(number(doc, "failed") or 0)
    rate = number(doc, "request_rate")
    conc = number(doc, "max_concurrency")
    closed = rate is None or rate == float("inf")
    detail = _details(doc)
    ended = when(doc.get("date"), "%Y%m%d-%H%M%S")
    notes = list(NOTES)
    if not detail:
        notes.append(
            "no per-request arrays (--save-detailed): τ from the pooled mean ITL, lengths "
            "known only as means (see the MBU notes)"
        )
    return [
        ImportedRun(
            tool="vllm bench serve",
            tool_version=doc.get("vllm_version") or doc.get("version"),
            source_format="vllm-bench-serve",
            output_tokens_per_s=tput,
            duration_s=duration,
            ttft_s=_lat(doc, "ttft", ok),
            tpot_s=_lat(doc, "tpot", ok),
            itl_s=_lat(doc, "itl", 0),
            e2e_s=_lat(doc, "e2el", ok),
            requests_ok=ok,
            requests_failed=failed,
            model=doc.get("model_id"),
            rate_rps=None if closed else rate,
            concurrency=int(conc) if closed and conc is not None else None,
            request_rate_rps=number(doc, "request_throughput"),
            mean_input_tokens=(number(doc, "total_input_tokens") or 0) / max(ok, 1),
            mean_output_tokens=(number(doc, "total_output_tokens") or 0) / max(ok, 1),
            # vLLM stamps ``date`` when it saves the result, at the run's end (to the second)
            started_at=None if ended is None else ended - timedelta(seconds=duration),
            ended_at=ended,
            notes=notes,
            **detail,
        )
    ]
