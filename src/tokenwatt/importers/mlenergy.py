"""ML.ENERGY Benchmark results (``ml-energy/leaderboard``, ``public/data/models/*.json``): one
run per configuration of one model on one task.

Each configuration gives T (``output_throughput_tokens_per_sec``), the pooled ITL's median and
tail (``median_itl_ms``, ``p90/95/99_itl_ms``; no mean), the engine's own mean running batch
(``avg_batch_size``), mean GPU power and energy per token over the same steady window
(NVML's energy counter, GPUs only), the mean output length, and the closed loop's size
(``max_num_seqs``). Its definitions against TokenWatt's:

* τ: only the median ITL is published; the median of a right-skewed gap distribution is below
  its mean, so B = T·τ/R reads low (flagged ``tau_from_median_itl``);
* lengths: no prompt lengths at all, the mean output length only: the KV term counts outputs
  alone (prompt length 0), a lower bound (flagged);
* energy: the source's own mean power; tokens/J = T ÷ that power, its energy per token
  inverted;
* no latency percentiles per request, no failures, no run date: the SLO is not judged on TTFT
  or TPOT (said in the verdict), goodput is not measured.
"""

from __future__ import annotations

from typing import Any

from tokenwatt.importers.base import ImportedRun, ImportFileError, number
from tokenwatt.result import Latency

__all__ = ["looks_like", "read"]

NOTES = [
    "ML.ENERGY publishes the median ITL, not its mean: τ is the median, B reads low",
    "ML.ENERGY publishes no prompt lengths: KV counted from the outputs alone (a lower bound)",
    "ML.ENERGY's energy is its own: NVML's energy counter over a steady window, GPUs only",
]


def looks_like(doc: Any) -> bool:
    configs = doc.get("configurations") if isinstance(doc, dict) else None
    return (
        isinstance(configs, list)
        and bool(configs)
        and isinstance(configs[0], dict)
        and "energy_per_token_joules" in configs[0]
        and "output_throughput_tokens_per_sec" in configs[0]
    )


def _run(c: dict[str, Any], model: str | None) -> ImportedRun:
    tput = number(c, "output_throughput_tokens_per_sec")
    median_ms = number(c, "median_itl_ms")
    if tput is None or median_ms is None:
        raise ImportFileError(
            "ML.ENERGY file: a configuration lacks output_throughput_tokens_per_sec or "
            "median_itl_ms"
        )
    itl = {f"p{q}": v / 1e3 for q in (90, 95, 99) if (v := number(c, f"p{q}_itl_ms")) is not None}
    return ImportedRun(
        tool="ML.ENERGY Benchmark",
        tool_version=None,
        source_format="mlenergy-leaderboard",
        output_tokens_per_s=tput,
        duration_s=0.0,  # not published
        ttft_s=Latency(count=0),
        tpot_s=Latency(count=0),
        itl_s=Latency(count=0, p50=median_ms / 1e3, **itl),
        e2e_s=Latency(count=0),
        requests_ok=0,
        model=model,
        concurrency=int(c["max_num_seqs"]) if "max_num_seqs" in c else None,
        mean_input_tokens=0.0,
        mean_output_tokens=number(c, "avg_output_len"),
        median_itl_s=median_ms / 1e3,
        mean_power_w=number(c, "avg_power_watts"),
        engine_batch=number(c, "avg_batch_size"),
        node=(_catalog_name(str(c.get("gpu_model"))), int(c.get("num_gpus") or 1)),
        notes=list(NOTES),
    )


# ML.ENERGY's GPU names, each the one part its benchmark ran on (its v3 runs: H100 SXM 80 GB
# and B200); the bare "H100" has several memory variants in the catalog, so it is named here.
_GPU_NAMES = {"H100": "h100-sxm", "B200": "b200"}


def _catalog_name(gpu_model: str) -> str:
    """The catalog's name for a GPU ML.ENERGY names; an unknown one is kept as written."""
    return _GPU_NAMES.get(gpu_model.upper(), gpu_model)


def read(doc: Any) -> list[ImportedRun]:
    """One run per configuration, in the file's order."""
    model = doc.get("model_id")
    return [_run(c, model) for c in doc["configurations"]]
