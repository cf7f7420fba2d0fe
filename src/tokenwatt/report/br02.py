"""llm-d Benchmark Report v0.2 (BR0.2): one partial report per probe, for tools others run.

BR0.2 is the format inference-perf emits and llm-d-benchmark merges across harnesses. The
models below are written from its published field list (``version``; ``run`` with ``uid``,
``eid``, ``time``; ``scenario.load``; ``results.request_performance.aggregate`` with
``requests``, ``latency`` and ``throughput`` blocks, each statistic carrying ``units``, a
``mean`` and the percentile set ``min, p0p1, p1, p5, p10, p25, p50, p75, p90, p95, p99, p99p9,
max``). Unknown keys are rejected, as in the published schema, so a misspelt field fails a
test here rather than a merge downstream. Only the parts a probe can fill are modelled; the
stack description (``scenario.stack``) and observability sections are left to the harness that
deployed the stack.

A probe's figures arrive as ``ProbeFigures`` (plain per-request lists), so this module depends
on no result type; ``ProbeFigures.from_records`` fills one from request records with the
definitions of ``tokenwatt.metrics.latency`` (docs/methodology.md):

* TTFT, request latency (E2E): per request, seconds.
* TPOT: per request, (E2E − TTFT) ÷ (output tokens − 1); requests of one token have none.
* ITL: every gap between consecutive streamed content chunks, pooled over requests.
* NTPOT: per request, latency ÷ output tokens (the first token included).
* Throughput: totals over the probe's measurement window (only a ``mean``; a rate over one
  window has no distribution).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokenwatt import __version__
from tokenwatt.metrics.latency import counted_records, e2e_s, tpot_s, ttft_s
from tokenwatt.metrics.stats import interpolated_quantile
from tokenwatt.records import RequestRecord

__all__ = [
    "BR_VERSION",
    "PERCENTILES",
    "BenchmarkReportV02",
    "ProbeFigures",
    "to_br02",
    "write_br02",
]

BR_VERSION = "0.2"
# BR0.2 percentile keys and the percentile each one names.
PERCENTILES: dict[str, float] = {
    "p0p1": 0.1,
    "p1": 1,
    "p5": 5,
    "p10": 10,
    "p25": 25,
    "p50": 50,
    "p75": 75,
    "p90": 90,
    "p95": 95,
    "p99": 99,
    "p99p9": 99.9,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Statistics(_Strict):
    """A property's distribution: units, mean and (optionally) the percentile set."""

    units: str
    mean: float
    mode: float | None = None
    stddev: float | None = Field(None, ge=0)
    min: float | None = None
    p0p1: float | None = None
    p1: float | None = None
    p5: float | None = None
    p10: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p99p9: float | None = None
    max: float | None = None


class CountStats(Statistics):
    units: Literal["count", "pixels"]


class TimeStats(Statistics):
    units: Literal["ms", "s"]


class PerTokenStats(Statistics):
    units: Literal["ms/token", "s/token"]


class TokenRateStats(Statistics):
    units: Literal["tokens/s"]


class RequestRateStats(Statistics):
    units: Literal["queries/s"]


class AggregateRequests(_Strict):
    total: int = Field(ge=0)
    failures: int | None = Field(None, ge=0)
    incomplete: int | None = Field(None, ge=0)
    input_length: CountStats | None = None
    output_length: CountStats | None = None
    request_size: Statistics | None = None  # v0.2.1: encoded request bytes, read back only
    multimodal: Any | None = None  # v0.2.1: per-modality payloads (TokenWatt sends text only)


class AggregateLatency(_Strict):
    time_to_first_token: TimeStats | None = None
    normalized_time_per_output_token: PerTokenStats | None = None
    time_per_output_token: PerTokenStats | None = None
    inter_token_latency: PerTokenStats | None = None
    request_latency: TimeStats | None = None


class AggregateThroughput(_Strict):
    input_token_rate: TokenRateStats | None = None
    output_token_rate: TokenRateStats | None = None
    total_token_rate: TokenRateStats | None = None
    request_rate: RequestRateStats | None = None
    # v0.2.1: media rates (images/s, videos/s, audios/s), read back, never written here
    image_rate: Statistics | None = None
    video_rate: Statistics | None = None
    audio_rate: Statistics | None = None


class Aggregate(_Strict):
    requests: AggregateRequests | None = None
    latency: AggregateLatency | None = None
    throughput: AggregateThroughput | None = None


class RequestPerformance(_Strict):
    aggregate: Aggregate | None = None
    time_series: Any | None = None  # read back, not written by TokenWatt


class Results(_Strict):
    """The official sections; TokenWatt models the request figures it writes field by field
    and carries the others (sessions, observability, health) as documents: their layout is
    checked against the official schemas in the tests (``tests/fixtures/llm-d``)."""

    request_performance: RequestPerformance | None = None
    session_performance: dict[str, Any] | None = None
    observability: dict[str, Any] | None = None
    profiling: Any | None = None
    component_health: list[dict[str, Any]] | None = None


class RunTime(_Strict):
    start: datetime | None = None
    end: datetime | None = None
    duration: str | None = Field(None, pattern=r"^PT\d+(\.\d+)?S$")  # ISO 8601 seconds


class Run(_Strict):
    uid: str = Field(min_length=1)  # this report alone
    eid: str | None = Field(None, min_length=1)  # every report of one experiment (one run)
    cid: str | None = None
    pid: str | None = None
    time: RunTime | None = None
    user: str | None = None
    description: str | None = None
    keywords: list[str] | None = None


class SequenceLength(_Strict):
    distribution: Literal["fixed", "gaussian", "uniform", "other"]
    value: float = Field(ge=0)
    std_dev: float | None = Field(None, ge=0)
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=1)


class LoadMetadata(_Strict):
    schema_version: str = "0.0.1"
    cfg_id: str | None = None
    description: str | None = None


class LoadStandardized(_Strict):
    tool: str
    tool_version: str
    parallelism: int = Field(1, ge=1)
    source: Literal["random", "sampled", "unknown"]
    stage: int = Field(0, ge=0)
    input_seq_len: SequenceLength
    output_seq_len: SequenceLength | None = None
    prefix: dict[str, Any] | None = None
    multi_turn: dict[str, Any] | None = None
    rate_qps: float | None = Field(None, gt=0)  # requests per second (sessions are not queries)
    concurrency: int | float | None = Field(None, ge=1)  # an integer, or .inf


class LoadNative(_Strict):
    args: dict[str, Any] | None = None
    envars: dict[str, Any] | None = None
    config: Any | None = None


class Load(_Strict):
    metadata: LoadMetadata
    standardized: LoadStandardized
    native: LoadNative


class Scenario(_Strict):
    stack: list[dict[str, Any]] | None = None  # components, official kinds generic/inference_engine
    load: Load | None = None


class BenchmarkReportV02(_Strict):
    """A BR0.2 or BR0.2.1 report: 0.2.1 adds multimodal figures only, so one model reads both."""

    version: Literal["0.2", "0.2.1"]
    run: Run
    scenario: Scenario | None = None
    results: Results

    @model_validator(mode="after")
    def _time_order(self) -> BenchmarkReportV02:
        t = self.run.time
        if t is not None and t.start and t.end is not None and t.end < t.start:
            raise ValueError("run.time.end is before run.time.start")
        return self


@dataclass(frozen=True, slots=True)
class ProbeFigures:
    """What a probe measured, as plain per-request lists (completed requests only)."""

    start: datetime  # UTC, the measurement window's start
    duration_s: float  # the measurement window
    input_tokens: Sequence[int]
    output_tokens: Sequence[int]
    ttft_s: Sequence[float]
    latency_s: Sequence[float]  # end to end, per request
    tpot_s: Sequence[float] = ()  # per request with two or more output tokens
    itl_s: Sequence[float] = ()  # every inter-token gap, pooled
    failures: int = 0
    incomplete: int = 0
    rate_rps: float | None = None  # offered rate (open loop)
    concurrency: int | None = None  # closed loop
    stage: int = 0  # the probe's number in the run
    source: Literal["random", "sampled"] = "random"  # synthetic prompts or a dataset/trace
    output_tokens_per_s: float | None = None  # T from result.json (tokens inside the window)

    @classmethod
    def from_records(
        cls,
        records: Sequence[RequestRecord],
        *,
        window_start_ns: int,
        window_end_ns: int,
        start: datetime,
        **kw: Any,
    ) -> ProbeFigures:
        """A probe's figures from its records: those scheduled in the window, as the metrics
        count them; ``start`` is the window's start as a UTC date-time; ``kw`` sets the rest
        (rate_rps, concurrency, stage, source)."""
        counted = counted_records(records, window_start_ns, window_end_ns)
        done = [r for r in counted if r.ok and ttft_s(r) is not None and e2e_s(r) is not None]
        gaps = [(b - a) / 1e9 for r in done for a, b in itertools.pairwise(r.chunk_ns)]
        return cls(
            start=start,
            duration_s=(window_end_ns - window_start_ns) / 1e9,
            input_tokens=[r.prompt_tokens or r.prompt_tokens_client for r in done],
            output_tokens=[r.output_tokens for r in done],
            ttft_s=[v for r in done if (v := ttft_s(r)) is not None],
            latency_s=[v for r in done if (v := e2e_s(r)) is not None],
            tpot_s=[v for r in done if (v := tpot_s(r)) is not None],
            itl_s=gaps,
            failures=sum(1 for r in counted if r.failed),
            # cancelled by the client (not a server failure) or ok without timings
            incomplete=sum(1 for r in counted if r.cancelled or (r.ok and r not in done)),
            **kw,
        )


def _stats(values: Sequence[float] | np.ndarray, units: str) -> dict[str, Any] | None:
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return None
    xs = sorted(a.tolist())  # the result's quantile rule (metrics.stats), not numpy's own
    out: dict[str, Any] = {"units": units, "mean": float(a.mean()), "stddev": float(a.std())}
    out["min"] = float(a.min())
    out.update(
        {k: interpolated_quantile(xs, pct / 100, presorted=True) for k, pct in PERCENTILES.items()}
    )
    out["max"] = float(a.max())
    return out


def _rate(total: float, duration_s: float, units: str) -> dict[str, Any]:
    return {"units": units, "mean": total / duration_s}


def _aggregate(f: ProbeFigures) -> dict[str, Any]:
    n_in = np.asarray(f.input_tokens, dtype=float)
    n_out = np.asarray(f.output_tokens, dtype=float)
    lat = np.asarray(f.latency_s, dtype=float)
    ttft = np.asarray(f.ttft_s, dtype=float)
    ntpot = lat[n_out > 0] / n_out[n_out > 0]
    d = f.duration_s
    # T: tokens received inside the window (the figure result.json defines), where known; the
    # fallback counts every output token of the completed counted requests
    out_rate = f.output_tokens_per_s if f.output_tokens_per_s is not None else n_out.sum() / d
    return {
        "requests": {
            "total": len(n_out) + f.failures + f.incomplete,
            "failures": f.failures,
            "incomplete": f.incomplete,
            "input_length": _stats(n_in, "count"),
            "output_length": _stats(n_out, "count"),
        },
        "latency": {
            "time_to_first_token": _stats(ttft, "s"),
            "time_per_output_token": _stats(f.tpot_s, "s/token"),
            "inter_token_latency": _stats(f.itl_s, "s/token"),
            "normalized_time_per_output_token": _stats(ntpot, "s/token"),
            "request_latency": _stats(lat, "s"),
        },
        "throughput": {
            "input_token_rate": _rate(n_in.sum(), d, "tokens/s"),
            "output_token_rate": {"units": "tokens/s", "mean": float(out_rate)},
            "total_token_rate": {"units": "tokens/s", "mean": float(n_in.sum() / d + out_rate)},
            "request_rate": _rate(len(n_out), d, "queries/s"),
        },
    }


def _length(values: Sequence[int]) -> dict[str, Any]:
    a = np.asarray(values, dtype=float)
    if a.size and a.min() == a.max():
        return {"distribution": "fixed", "value": float(a[0])}
    mean = float(a.mean()) if a.size else 1.0
    return {"distribution": "other", "value": max(mean, 1.0)}


def to_br02(
    f: ProbeFigures,
    *,
    eid: str,
    uid: str | None = None,
    config: Any | None = None,
    sections: dict[str, Any] | None = None,
) -> BenchmarkReportV02:
    """The BR0.2 partial for one probe; ``eid`` names the run (shared by its probes), ``uid``
    this report (random when omitted), ``config`` goes to ``scenario.load.native.config``;
    ``sections`` may hold ``stack``, ``session_performance`` and ``observability``
    (``report.br02_sections`` builds them from a result)."""
    if not (f.duration_s > 0):
        raise ValueError(f"duration_s must be > 0, got {f.duration_s}")
    n = {len(f.input_tokens), len(f.output_tokens), len(f.ttft_s), len(f.latency_s)}
    if len(n) != 1:
        raise ValueError("input_tokens, output_tokens, ttft_s and latency_s differ in length")
    start = f.start if f.start.tzinfo is not None else f.start.replace(tzinfo=UTC)
    load = {
        "metadata": {"description": f"tokenwatt probe {f.stage}"},
        "standardized": {
            "tool": "tokenwatt",
            "tool_version": __version__,
            "source": f.source,
            "stage": f.stage,
            "input_seq_len": _length(f.input_tokens),
            "output_seq_len": _length(f.output_tokens),
            "rate_qps": f.rate_rps,
            "concurrency": f.concurrency,
        },
        "native": {"config": config},
    }
    doc: dict[str, Any] = {
        "version": BR_VERSION,
        "run": {
            "uid": uid or uuid.uuid4().hex,
            "eid": eid,
            "time": {
                "start": start,
                "end": start + timedelta(seconds=f.duration_s),
                "duration": f"PT{f.duration_s:.6f}S",
            },
        },
        "scenario": {"load": load},
        "results": {"request_performance": {"aggregate": _aggregate(f)}},
    }
    extra = sections or {}
    if extra.get("stack"):
        doc["scenario"]["stack"] = extra["stack"]
    for key in ("session_performance", "observability"):
        if extra.get(key):
            doc["results"][key] = extra[key]
    return BenchmarkReportV02.model_validate(doc)


def write_br02(path: Path, report: BenchmarkReportV02) -> None:
    """Write a report as YAML (``.yaml``/``.yml``, as llm-d-benchmark stores them) or JSON."""
    data = report.model_dump(mode="json", exclude_none=True)
    if path.suffix in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    else:
        path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
