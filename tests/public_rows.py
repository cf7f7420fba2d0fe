"""The real-hardware validation rows: public measurements TokenWatt did not make
(tests/fixtures/public/README.md), each put through ``metrics.published.mbu_from_figures``
exactly as ``tokenwatt mbu`` would, beside the figures the source itself logged.

Shared by ``benchmarks/real_hardware_table.py`` (prints the table of docs/validation.md) and
``tests/test_real_hardware.py`` (checks its invariants). Nothing here is tuned to the table:
every input is the source's own figure or a stated assumption (``Row.assumed``).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.published import MbuEstimate, PublishedFigures, mbu_from_figures
from tokenwatt.power.logs import log_energy, read_power_log
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


# The artifact of arXiv 2503.08311 (vLLM on one H100 64 GB): folder <model>_<max-num-seqs>
MEMORY_GAP = PUBLIC / "memory_gap"
MEMORY_GAP_RUNS = ("opt-1.3b_128", "opt-1.3b_512")
CONFIGS = Path(__file__).parent / "fixtures" / "configs"
DMON_FILE = "metrics_gpu_device_nvidia_smi_dom_0_server_0.csv"


def engine_span(folder: Path) -> tuple[float, float, float]:
    """The engine's generating span on the artifact's logger clock (first /metrics sample with
    generated tokens, first at the final count) and its mean running batch over that span
    (the samples are a second apart)."""
    with (folder / "metrics_engine_server_0.csv").open() as f:
        rows = [
            (float(r["time [s]"]), float(r["generation_tokens_total"]),
             float(r["num_requests_running"]))
            for r in csv.DictReader(f)
        ]  # fmt: skip
    final = rows[-1][1]
    a = next(t for t, gen, _ in rows if gen > 0)
    b = next(t for t, gen, _ in rows if gen == final)
    running = [n for t, _, n in rows if a <= t <= b]
    return a, b, sum(running) / len(running)


def _memory_gap_row(name: str) -> Row:
    folder = MEMORY_GAP / name
    doc = json.loads(next(folder.glob("openai-*.json")).read_text())
    seqs = int(name.rsplit("_", 1)[1])
    acc = get_accelerator("h100-sxm-64gb")
    n = doc["completed"]
    figures = PublishedFigures(
        output_tokens_per_s=doc["output_throughput"],
        pooled_itl_s=doc["mean_itl_ms"] / 1e3,
        tpot_s=doc["mean_tpot_ms"] / 1e3,
        concurrency=seqs,  # 2,000 prompts sent at once: the engine holds max-num-seqs
        input_tokens=doc["total_input_tokens"] / n,
        output_tokens=doc["total_output_tokens"] / n,
        lengths_are_means=True,
    )
    est = mbu_from_figures(
        load_geometry(CONFIGS / "opt-1.3b.json"), figures,
        bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s, gpus=1, replicas=1,
    )  # fmt: skip
    a, b, b_engine = engine_span(folder)
    report, _ = log_energy(read_power_log(folder / DMON_FILE), round(a * 1e9), round(b * 1e9))
    power_w = report.primary.mean_power_w if report.primary else None
    return Row(
        source="Memory Gap (arXiv 2503.08311)", gpu=acc.display_name, gpus=1, replicas=1,
        model="facebook/opt-1.3b", point=f"max_num_seqs {seqs}, 2,000 ShareGPT prompts at once",
        est=est, b_engine=b_engine, slot_limit=seqs,
        tokens_per_joule=doc["output_throughput"] / power_w if power_w else None,
        assumed=[
            "closed loop at max_num_seqs (every prompt sent at t = 0)",
            "power: nvidia-smi dmon over the engine's generating span (no energy of its own)",
        ],
    )  # fmt: skip


def all_rows() -> list[Row]:
    """Every public row, sources in order."""
    rows = [r for name, preset in MLENERGY_MODELS.items() for r in _mlenergy_rows(name, preset)]
    rows += [_mlperf_row(run) for run in MLPERF_RUNS]
    return rows + [_memory_gap_row(name) for name in MEMORY_GAP_RUNS]


def shown(rows: list[Row]) -> list[Row]:
    """The rows the validation record prints: ML.ENERGY at ``SHOWN_SEQS``, every other row."""
    return [
        r
        for r in rows
        if not r.source.startswith("ML.ENERGY") or (r.slot_limit in SHOWN_SEQS and r.gpus <= 4)
    ]
