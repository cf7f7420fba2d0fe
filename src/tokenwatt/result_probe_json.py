"""An old ``probe.json`` read as a result: ``tokenwatt probe`` wrote it beside ``result.json``
before schema version 3, and alone where the model's config.json could not be read (a remote
endpoint: no geometry, no MBU). Version 3 writes ``result.json`` only; this turns such a file
into the dict ``result.load_result`` validates, so ``report`` and ``compare`` still read it.

Imports nothing of tokenwatt: ``result`` imports it, and the shape here is only the old file's.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

__all__ = ["PROBE_JSON", "probe_json_to_result"]

PROBE_JSON = "probe.json"

_UNKNOWN = "unknown (not recorded in probe.json)"


def _detail(data: dict[str, Any], keys: Collection[str]) -> dict[str, Any] | None:
    """The probe's run record (``keys``: its fields) from the old file's ``probe``, ``window``
    and ``metrics``."""
    probe, window, metrics = data.get("probe"), data.get("window"), data.get("metrics")
    if not (isinstance(probe, dict) and isinstance(window, dict) and isinstance(metrics, dict)):
        return None
    out: dict[str, Any] = {
        "arrival": probe.get("arrival"),
        "prompt_format": probe.get("prompt_format"),
        "max_requests": probe.get("max_requests"),
        "error_stopped": bool(window.get("error_stopped", False)),
        "clock": data.get("clock"),
        "connections": data.get("client") or {},
    }
    for part in (window, metrics):
        out.update({k: v for k, v in part.items() if k in keys and k not in out})
    return out


def _machine(data: dict[str, Any]) -> dict[str, Any]:
    """The old file kept only the client's clock facts; the rest of the machine is unknown."""
    clock = data.get("clock") or {}
    metrics = data.get("metrics") or {}
    offset_ns = clock.get("realtime_minus_monotonic_ns")
    return {
        "hostname": _UNKNOWN,
        "os": _UNKNOWN,
        "python": _UNKNOWN,
        "cpu_count": None,
        "clock": "time.perf_counter_ns",
        "timestamp_source": str(metrics.get("timestamp_source", "user")),
        "realtime_minus_monotonic_s": offset_ns / 1e9 if isinstance(offset_ns, int) else 0.0,
    }


def probe_json_to_result(
    data: dict[str, Any], slo: dict[str, Any], detail_keys: Collection[str]
) -> dict[str, Any]:
    """The result dict (schema version 3) of an old probe file; ``slo`` is its spec's SLO as
    ``SloSettings`` fields (the caller resolves the spec), ``detail_keys`` the fields of the
    probe's run record (``ProbeDetail``)."""
    spec = data.get("spec") or {}
    hardware = spec.get("hardware") or {}
    summary = dict(data.get("summary") or {})
    detail = _detail(data, detail_keys)
    if detail is not None and "run" not in summary:
        summary["run"] = detail
    return {
        "schema_version": 3,
        "tool_version": data.get("tokenwatt_version", "unknown"),
        "name": spec.get("name", "probe"),
        "spec": spec,
        "geometry": None,
        "accelerator": None,
        "gpus": hardware.get("gpus", 1),
        "replicas": hardware.get("replicas", 1),
        "slo": slo,
        "machine": _machine(data),
        "started_at": data.get("created_utc"),
        "probes": [summary],
        "target": data.get("target"),
        "interrupted": bool(data.get("interrupted", False)),
        "warnings": list(data.get("warnings") or []),
        "mbu_unavailable": data.get("mbu_unavailable"),
    }
