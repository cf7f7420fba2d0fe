"""Latency objectives: percentile constraints (MLPerf style) or per-request attainment."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, model_validator

from tokenwatt.spec._base import MAX_MS, Section

# MLPerf Inference LLM latency constraints (loadgen/mlperf.conf), milliseconds.
SLO_PRESETS: dict[str, dict[str, float]] = {
    "mlperf-llama2-70b-server": {"ttft_ms": 2000, "tpot_ms": 200},
    "mlperf-llama2-70b-interactive": {"ttft_ms": 450, "tpot_ms": 40},
    "mlperf-llama3.1-8b-server": {"ttft_ms": 2000, "tpot_ms": 100},
    "mlperf-llama3.1-8b-interactive": {"ttft_ms": 500, "tpot_ms": 30},
    "mlperf-deepseek-r1-server": {"ttft_ms": 2000, "tpot_ms": 80},
    "mlperf-gpt-oss-120b-server": {"ttft_ms": 3000, "tpot_ms": 80},
}


class SLO(Section):
    """Default: MLPerf's llama2-70b server constraints, p99 TTFT ≤ 2 s and p99 TPOT ≤ 200 ms."""

    kind: Literal["percentile", "attainment"] = Field(
        "percentile",
        description="percentile: the q-quantile of TTFT and of TPOT each meet their limit; "
        "attainment: at least `attainment` of requests meet every limit",
    )
    preset: str | None = Field(None, description=f"one of {', '.join(SLO_PRESETS)}")
    ttft_ms: float | None = Field(
        None, gt=0, le=MAX_MS, description="time-to-first-token limit, ms"
    )
    tpot_ms: float | None = Field(
        None, gt=0, le=MAX_MS, description="time-per-output-token limit, ms"
    )
    e2e_ms: float | None = Field(
        None, gt=0, le=MAX_MS, description="optional end-to-end latency limit, ms"
    )
    percentile: float = Field(0.99, gt=0, lt=1, description="q for kind=percentile (0.99 = p99)")
    attainment: float = Field(
        0.9, gt=0, le=1, description="fraction of requests that must meet every limit"
    )
    max_error_rate: float = Field(
        0.05,
        ge=0,
        le=1,
        description="error budget: a probe whose requests fail with connection or server "
        "errors (connect, reset, http_status, stream_error, truncated, protocol) more often "
        "than this is an error probe: the bench stops, no boundary is called from it",
    )
    accuracy_min: float | None = Field(
        None,
        gt=0,
        le=1,
        description="accuracy floor: a probe whose graded answers (the `graded:` slice) are "
        "right less often than this fails the SLO",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") is not None:
            name = str(data["preset"]).lower()
            if name not in SLO_PRESETS:
                raise ValueError(
                    f"unknown preset {data['preset']!r}; known: {', '.join(SLO_PRESETS)}"
                )
            data = {**SLO_PRESETS[name], **data, "preset": name}
        return data

    @model_validator(mode="after")
    def _defaults(self) -> Self:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            object.__setattr__(self, "ttft_ms", 2000.0)
            object.__setattr__(self, "tpot_ms", 200.0)
        return self
