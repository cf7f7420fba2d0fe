"""The BR0.2 sections beyond request figures, from what a TokenWatt result measured.

llm-d's Benchmark Report has places for the stack that served (``scenario.stack``), the
conversations (``results.session_performance``) and the engine's own state and power
(``results.observability``). TokenWatt measures all of them, so a report that left them out
hid figures a reader of the llm-d dashboards would look for. Each section is built only from
fields the result holds; a figure not measured is left out, never written as 0.

Layouts follow the official v0.2 models (llm-d-benchmark,
``llmdbenchmark/analysis/benchmark_report/schema_v0_2.py`` and ``schema_v0_2_components.py``):
one ``inference_engine`` component labelled ``engine``; its observability under the same
label (KV-cache usage as a fraction, running and waiting requests as counts, preemptions as the
window's count, mean power in Watts).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tokenwatt import __version__
from tokenwatt.result import BenchResult, ProbeSummary

__all__ = ["ENGINE_LABEL", "br02_sections", "request_rate_qps"]

ENGINE_LABEL = "engine"


def request_rate_qps(p: ProbeSummary) -> float | None:
    """BR0.2's ``rate_qps`` is requests per second: the offered rate when the probe stated one
    in requests; in a session run (rate in sessions or turns) the window's requests ÷ window."""
    if p.rate_rps is None:
        return None
    if p.rate_unit == "requests":
        return p.rate_rps
    if p.requests_counted and p.window_s > 0:
        return p.requests_counted / p.window_s
    return None


def _cfg_id(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _stack(result: BenchResult, engine_name: str | None) -> list[dict[str, Any]]:
    hw = result.spec.hardware
    sim = result.simulated
    tool = "tokenwatt-sim" if sim else (engine_name or "unknown")
    model = (result.target.model if result.target else None) or result.model_name
    native = {
        "hardware": hw.model_dump(mode="json"),
        "model": result.spec.model.model_dump(mode="json"),
    }
    return [
        {
            "metadata": {"label": ENGINE_LABEL, "cfg_id": _cfg_id(native)},
            "standardized": {
                "kind": "inference_engine",
                "tool": tool,
                "tool_version": __version__ if sim else "unknown",
                "role": "replica",
                "replicas": hw.replicas,
                "model": {"name": model},
                "accelerator": {
                    "model": result.accelerator_name,
                    "count": result.gpus,
                    "parallelism": {"tp": max(1, result.gpus // hw.replicas), "dp": hw.replicas},
                },
            },
            "native": {"config": native},
        }
    ]


def _stat(units: str, mean: float | None, maximum: float | None = None) -> dict[str, Any] | None:
    if mean is None:
        return None
    out: dict[str, Any] = {"units": units, "mean": float(mean)}
    if maximum is not None:
        out["max"] = float(maximum)
    return out


def _observability(p: ProbeSummary) -> dict[str, Any] | None:
    power = p.energy.mean_power_w if p.energy is not None and p.energy.valid else None
    figures = {"power_consumption": _stat("Watts", power)}
    e = p.engine
    if e is not None and e.unavailable is None:
        figures |= {
            "kv_cache_usage": _stat("fraction", e.kv_usage_mean, e.kv_usage_max),
            "running_requests": _stat("count", e.running_mean),
            "waiting_requests": _stat("count", e.waiting_mean),
            "preemptions": _stat("count", e.preemptions),
        }
    aggregate = {k: v for k, v in figures.items() if v is not None}
    if not aggregate:
        return None
    return {"components": [{"component_label": ENGINE_LABEL, "aggregate": aggregate}]}


def _sessions(p: ProbeSummary) -> dict[str, Any] | None:
    s = p.sessions
    if s is None:
        return None
    sessions: dict[str, Any] = {
        "total": s.sessions_started,
        "succeeded": s.sessions_completed,
        "failed": max(0, s.sessions_started - s.sessions_completed),
    }
    if s.turns_per_session_mean is not None:
        sessions["events_per_session"] = _stat("count", s.turns_per_session_mean)
    return {"sessions": sessions}


def br02_sections(result: BenchResult, p: ProbeSummary) -> dict[str, Any]:
    """``stack``, ``session_performance`` and ``observability`` for one probe's report."""
    engine = p.engine.engine if p.engine is not None else None
    return {
        "stack": _stack(result, engine),
        "session_performance": _sessions(p),
        "observability": _observability(p),
    }
