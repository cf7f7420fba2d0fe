"""The real-hardware validation rows: public measurements TokenWatt did not make
(tests/fixtures/public/README.md), each put through ``metrics.published.mbu_from_figures``
exactly as ``tokenwatt mbu`` would, beside the figures the source itself logged.

Shared by ``benchmarks/real_hardware_table.py`` (prints the table of docs/methodology.md) and
``tests/test_real_hardware.py`` (checks its invariants). Nothing here is tuned to the table:
every input is the source's own figure or a stated assumption (``Row.assumed``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.published import MbuEstimate, PublishedFigures, mbu_from_figures
from tokenwatt.report.mbu_text import raised_flags

PUBLIC = Path(__file__).parent / "fixtures" / "public"

# ML.ENERGY's gpu_model -> the catalog's accelerator (its H100 is the SXM 80 GB part)
MLENERGY_GPUS = {"H100": "h100-sxm", "B200": "b200"}
# ML.ENERGY's model files kept here -> the geometry preset of the same architecture
MLENERGY_MODELS = {
    "meta-llama__Llama-3.1-8B-Instruct__lm-arena-chat.json": "llama-3.1-8b",
    "meta-llama__Llama-3.1-70B-Instruct__lm-arena-chat.json": "llama-3.1-70b",
    "Qwen__Qwen3-30B-A3B-Instruct-2507__lm-arena-chat.json": "qwen3-30b-a3b",
}
# the batch sizes shown per model and GPU (the table keeps a few; the test checks every one)
SHOWN_SEQS = (8, 64, 256)


@dataclass
class Row:
    """One public measurement and what TokenWatt derives from it."""

    source: str
    gpu: str
    gpus: int
    replicas: int
    model: str
    point: str  # the load point as the source names it
    est: MbuEstimate
    b_engine: float | None = None  # the engine's own mean running batch, where logged
    slot_limit: float | None = None  # max_num_seqs / concurrency, where known
    tokens_per_joule: float | None = None  # T ÷ the source's mean power
    source_tokens_per_joule: float | None = None  # 1 ÷ the source's energy per token
    counter_dram_bytes_per_s: float | None = None  # hardware counter, where logged
    assumed: list[str] = field(default_factory=list)

    @property
    def mbu(self) -> float | None:
        m = self.est.mbu
        return m.mbu if m.mbu is not None else m.mbu_decode_only

    @property
    def b_client(self) -> float | None:
        return self.est.mbu.inputs.batch_per_replica

    @property
    def flags(self) -> list[str]:
        return [f.split(":", 1)[0] for f in raised_flags(self.est.mbu)]


_PAR = {"TP": "tensor_parallel", "EP": "expert_parallel", "DP": "data_parallel"}


def _point(c: dict[str, Any]) -> str:
    """The configuration as the source names it: max_num_seqs, parallelism, batched tokens."""
    par = c["parallelization"]
    parts = [f"max_num_seqs {c['max_num_seqs']}"]
    parts += [f"{k} {par[v]}" for k, v in _PAR.items() if par.get(v, 1) != 1]
    if c.get("max_num_batched_tokens"):
        parts.append(f"max_num_batched_tokens {c['max_num_batched_tokens']}")
    return ", ".join(parts)


def _mlenergy_rows(name: str, preset: str) -> list[Row]:
    doc = json.loads((PUBLIC / "mlenergy" / name).read_text())
    geometry = load_geometry(preset)
    rows = []
    for c in doc["configurations"]:
        acc = get_accelerator(MLENERGY_GPUS[c["gpu_model"]])
        par = c["parallelization"]
        replicas = int(par["data_parallel"])
        figures = PublishedFigures(
            output_tokens_per_s=c["output_throughput_tokens_per_sec"],
            median_itl_s=c["median_itl_ms"] / 1e3,  # the source gives the median, no mean
            concurrency=c["max_num_seqs"],
            input_tokens=0.0,  # prompt lengths are not in the file: KV from outputs only
            output_tokens=c["avg_output_len"],
            lengths_are_means=True,
        )
        est = mbu_from_figures(
            geometry, figures, bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s,
            gpus=int(c["num_gpus"]), replicas=replicas,
        )  # fmt: skip
        rows.append(
            Row(
                source="ML.ENERGY v3",
                gpu=acc.display_name,
                gpus=int(c["num_gpus"]),
                replicas=replicas,
                model=doc["model_id"],
                point=_point(c),
                est=est,
                b_engine=c["avg_batch_size"] / replicas,
                slot_limit=c["max_num_seqs"],
                tokens_per_joule=c["output_throughput_tokens_per_sec"] / c["avg_power_watts"],
                source_tokens_per_joule=1 / c["energy_per_token_joules"],
                assumed=[
                    "prompt lengths unpublished: KV from outputs only, MBU a lower bound",
                ],
            )
        )
    return rows


def _summary_number(text: str, label: str) -> float:
    """A value from an MLPerf ``mlperf_log_summary.txt`` line ``label : value``."""
    m = re.search(rf"^{re.escape(label)}\s*:\s*([0-9.]+)\s*$", text, re.M)
    if m is None:
        raise ValueError(f"no {label!r} in the summary")
    return float(m.group(1))


@dataclass(frozen=True)
class MlperfRun:
    file: str
    source: str
    accelerator: str
    gpus: int
    replicas: int
    weights: str
    kv: str
    assumed: tuple[str, ...]


MLPERF_RUNS = (
    MlperfRun(
        "v4.1_NVIDIA_B200-SXM-180GBx1_TRT_llama2-70b-99.9_Server_mlperf_log_summary.txt",
        "MLPerf Inference v4.1 (NVIDIA)", "b200", 1, 1, "nvfp4", "fp8",
        ("weights FP4 and KV FP8, as NVIDIA described its first Blackwell submission",),
    ),
    MlperfRun(
        "v5.0_AMD_MI325Xx8_llama2-70b_Server_summary.txt",
        "MLPerf Inference v5.0 (AMD)", "mi325x", 8, 8, "fp8", "fp8",
        ("8 data-parallel replicas (AMD's data_parallel_size=8); weights FP8 (AMD's "
         "quantized checkpoint), KV FP8 assumed",),
    ),
)  # fmt: skip


def _mlperf_row(run: MlperfRun) -> Row:
    text = (PUBLIC / "mlperf" / run.file).read_text()
    t = _summary_number(text, "Completed tokens per second")
    samples = _summary_number(text, "Completed samples per second")
    tpot_s = _summary_number(text, "Mean Time to Output Token (ns)") / 1e9
    acc = get_accelerator(run.accelerator)
    # Llama 2 70B: Llama 3.1 70B's layers with Llama 2's 32,000-token vocabulary
    geometry = load_geometry(
        "llama-3.1-70b", weight_dtype=run.weights, kv_dtype=run.kv,
        overrides={"config.vocab_size": 32000},
    )  # fmt: skip
    figures = PublishedFigures(
        output_tokens_per_s=t,
        tpot_s=tpot_s,
        request_rate_rps=samples,
        input_tokens=0.0,  # not in the summary: KV from outputs only
        output_tokens=t / samples,
        lengths_are_means=True,
    )
    est = mbu_from_figures(
        geometry, figures, bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s,
        gpus=run.gpus, replicas=run.replicas,
    )  # fmt: skip
    return Row(
        source=run.source, gpu=acc.display_name, gpus=run.gpus, replicas=run.replicas,
        model="Llama 2 70B", point=f"Server, {samples:g} samples/s", est=est,
        assumed=[*run.assumed, "prompt lengths not in the summary: KV from outputs only"],
    )  # fmt: skip


def all_rows() -> list[Row]:
    """Every public row, sources in order."""
    rows = [r for name, preset in MLENERGY_MODELS.items() for r in _mlenergy_rows(name, preset)]
    return rows + [_mlperf_row(run) for run in MLPERF_RUNS]


def shown(rows: list[Row]) -> list[Row]:
    """The rows the methodology prints: ML.ENERGY at ``SHOWN_SEQS``, every MLPerf row."""
    return [r for r in rows if r.slot_limit is None or (r.slot_limit in SHOWN_SEQS and r.gpus <= 4)]
