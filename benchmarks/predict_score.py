"""Score ``tokenwatt predict`` on ML.ENERGY's H100 ↔ B200 pairs, beside the bandwidth ratio.

Usage: python benchmarks/predict_score.py [--data DIR] [--json]

DIR holds ML.ENERGY leaderboard files (``public/data/models/*.json`` of the GitHub repository
``ml-energy/leaderboard``); the default is the trimmed sample in
tests/fixtures/public/mlenergy. Two scores, each fitted on rows it never scores:

* hardware transfer: per model and task, calibrate on the H100 rows only (every batch cap of
  one H100 GPU count), predict each B200 configuration at the same ``max_num_seqs`` from the
  H100 row with that cap, and compare TPOT (median ITL), output throughput and tokens/J with
  the B200's measured figures;
* load transfer: per model, task and H100 GPU count with four or more caps, calibrate on the
  lower half of the caps and predict the upper half on the same GPUs.

Every calibration prints the rows it was fitted on and the rows it scored (``fitted → scored``
lines). The interval is ``predict.transfer``'s rule (out-of-sample fit error from
leave-one-out on the fitted rows, widened by the load and hardware distance), fixed in code
before this score was run with it.

Baselines: for hardware, the bandwidth ratio (τ × source bandwidth ÷ target bandwidth, GPUs
counted; throughput inversely; power scaled by the TDP ratio); for load, constant MBU from
the highest fitted cap (τ scaled by the bytes per step). Stated, not fitted: the mean input
length (``INPUT_TOKENS``, the files do not give it) and the transfer error of
``predict.transfer``. Read, not fitted: each configuration's output-length histogram, for the
mean context of a generated token (``predict.mlenergy``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from tokenwatt.hardware import get_accelerator
from tokenwatt.predict import (
    Prediction,
    StepPoint,
    Target,
    calibrate,
    points_from_rows,
    predict_points,
)
from tokenwatt.predict.mlenergy import MlEnergyConfig, read_mlenergy, to_row
from tokenwatt.predict.transfer import LONG_OUTPUT_TOKENS

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "public" / "mlenergy"
INPUT_TOKENS = 1024.0  # stated: ML.ENERGY's files give no prompt length
# leaderboard file stem → the geometry tokenwatt reads (same architecture and dtype)
MODELS = {
    "meta-llama__Llama-3.1-8B-Instruct__lm-arena-chat": "llama-3.1-8b",
    "meta-llama__Llama-3.1-70B-Instruct__lm-arena-chat": "llama-3.1-70b",
    "meta-llama__Llama-3.3-70B-Instruct__lm-arena-chat": "llama-3.1-70b",
    "Qwen__Qwen3-8B__lm-arena-chat": "qwen3-8b",
    "Qwen__Qwen3-8B__gpqa": "qwen3-8b",
    "Qwen__Qwen3-30B-A3B-Instruct-2507__lm-arena-chat": "qwen3-30b-a3b",
    "Qwen__Qwen3-30B-A3B-Thinking-2507__gpqa": "qwen3-30b-a3b",
    "Qwen__Qwen3-Coder-30B-A3B-Instruct__sourcegraph-fim": "qwen3-30b-a3b",
    "openai__gpt-oss-20b__gpqa": "gpt-oss-20b",
}


@dataclass(frozen=True)
class Split:
    """One calibration: the rows it was fitted on and the rows it scored."""

    kind: str
    file: str
    fitted: str
    scored: str


SPLITS: list[Split] = []


def _caps(gpu: str, gpus: int, rows: list[MlEnergyConfig]) -> str:
    return f"{gpu} x{gpus} max_num_seqs {sorted(c.max_num_seqs for c in rows)}"


@dataclass(frozen=True)
class Scored:
    """One scored point: relative errors (predicted ÷ measured − 1) and interval hits."""

    kind: str  # "hardware" or "load"
    file: str
    seqs: int
    tpot_err: float
    tput_err: float
    tpj_err: float | None
    base_tpot_err: float
    base_tput_err: float
    base_tpj_err: float | None
    tpot_in_interval: bool
    tpj_in_interval: bool | None
    tput_in_interval: bool
    tpot_high_ratio: float  # the interval's high end ÷ the prediction (its width, as a factor)
    long_output: bool  # the scored row's mean output reaches predict.transfer's threshold


def _points(model: str, configs: list[MlEnergyConfig]) -> list[StepPoint]:
    return points_from_rows([to_row(c, model, INPUT_TOKENS) for c in configs])


def _by_gpus(configs: list[MlEnergyConfig], gpu: str) -> dict[int, list[MlEnergyConfig]]:
    out: dict[int, list[MlEnergyConfig]] = defaultdict(list)
    for c in configs:
        if c.gpu_model == gpu:
            out[c.num_gpus].append(c)
    return out


def _tpj(c: MlEnergyConfig) -> float | None:
    return (
        None
        if c.avg_power_watts is None
        else c.output_throughput_tokens_per_sec / c.avg_power_watts
    )


def _inside(pred: Prediction, measured_ms: float) -> bool:
    return pred.tpot_interval_s.low * 1e3 <= measured_ms <= pred.tpot_interval_s.high * 1e3


def _inside_tput(pred: Prediction, measured: float) -> bool:
    iv = pred.output_tokens_per_s_interval
    return iv.low <= measured <= iv.high


def _err(pred: float | None, meas: float | None) -> float | None:
    return None if pred is None or meas is None else pred / meas - 1.0


def _hardware(stem: str, model: str, configs: list[MlEnergyConfig]) -> list[Scored]:
    h100_groups, b200_groups = _by_gpus(configs, "H100"), _by_gpus(configs, "B200")
    if not h100_groups or not b200_groups:
        return []
    h100, b200 = get_accelerator("h100-sxm"), get_accelerator("b200")
    out = []
    for b_gpus, b_rows in sorted(b200_groups.items()):
        h_gpus = (
            b_gpus if b_gpus in h100_groups else max(h100_groups, key=lambda g: len(h100_groups[g]))
        )
        h_rows = h100_groups[h_gpus]
        cal = calibrate(_points(model, h_rows))  # H100 rows only
        scored_rows = [b for b in b_rows if any(c.max_num_seqs == b.max_num_seqs for c in h_rows)]
        SPLITS.append(
            Split(
                "hardware", stem, _caps("H100", h_gpus, h_rows), _caps("B200", b_gpus, scored_rows)
            )
        )
        for b in b_rows:
            src = [c for c in h_rows if c.max_num_seqs == b.max_num_seqs]
            if not src:
                continue
            s = src[0]
            (point,) = _points(model, [s])
            (pred,) = predict_points(
                cal, [point], Target(b200, gpus_per_replica=b_gpus), source=h100
            )
            bw = (h_gpus * h100.bandwidth_bytes_per_s) / (b_gpus * b200.bandwidth_bytes_per_s)
            base_tput = s.output_throughput_tokens_per_sec / bw
            base_tpj = None
            if s.avg_power_watts and h100.tdp_w and b200.tdp_w:
                base_power = s.avg_power_watts * (b_gpus * b200.tdp_w) / (h_gpus * h100.tdp_w)
                base_tpj = base_tput / base_power
            meas_tpj = _tpj(b)
            iv = pred.tokens_per_joule_interval
            out.append(
                Scored(
                    "hardware", stem, b.max_num_seqs,
                    pred.tpot_s * 1e3 / b.median_itl_ms - 1.0,
                    pred.output_tokens_per_s / b.output_throughput_tokens_per_sec - 1.0,
                    _err(pred.tokens_per_joule, meas_tpj),
                    s.median_itl_ms * bw / b.median_itl_ms - 1.0,
                    base_tput / b.output_throughput_tokens_per_sec - 1.0,
                    _err(base_tpj, meas_tpj),
                    _inside(pred, b.median_itl_ms),
                    None if iv is None or meas_tpj is None else iv.low <= meas_tpj <= iv.high,
                    _inside_tput(pred, b.output_throughput_tokens_per_sec),
                    pred.tpot_interval_s.high / pred.tpot_s,
                    b.avg_output_len >= LONG_OUTPUT_TOKENS,
                )
            )  # fmt: skip
    return out


def _load(stem: str, model: str, configs: list[MlEnergyConfig]) -> list[Scored]:
    h100 = get_accelerator("h100-sxm")
    out = []
    for gpus, rows in sorted(_by_gpus(configs, "H100").items()):
        caps = sorted({c.max_num_seqs for c in rows})
        if len(caps) < 4:
            continue
        low_caps = set(caps[: len(caps) // 2])
        low = [c for c in rows if c.max_num_seqs in low_caps]
        high = [c for c in rows if c.max_num_seqs not in low_caps]
        SPLITS.append(Split("load", stem, _caps("H100", gpus, low), _caps("H100", gpus, high)))
        low_points = _points(model, low)
        cal = calibrate(low_points)
        anchor = max(low_points, key=lambda p: p.batch)
        for c, point in zip(high, _points(model, high), strict=True):
            (pred,) = predict_points(cal, [point], Target(h100), source=h100)
            base_tau = anchor.step_s * point.bytes_per_step / anchor.bytes_per_step
            base_tput = point.batch / base_tau * anchor.decode_share
            meas_tpj = _tpj(c)
            iv = pred.tokens_per_joule_interval
            out.append(
                Scored(
                    "load", stem, c.max_num_seqs,
                    pred.tpot_s * 1e3 / c.median_itl_ms - 1.0,
                    pred.output_tokens_per_s / c.output_throughput_tokens_per_sec - 1.0,
                    _err(pred.tokens_per_joule, meas_tpj),
                    base_tau * 1e3 / c.median_itl_ms - 1.0,
                    base_tput / c.output_throughput_tokens_per_sec - 1.0,
                    None,
                    _inside(pred, c.median_itl_ms),
                    None if iv is None or meas_tpj is None else iv.low <= meas_tpj <= iv.high,
                    _inside_tput(pred, c.output_throughput_tokens_per_sec),
                    pred.tpot_interval_s.high / pred.tpot_s,
                    c.avg_output_len >= LONG_OUTPUT_TOKENS,
                )
            )  # fmt: skip
    return out


def _summary(rows: list[Scored]) -> dict[str, object]:
    def stat(values: list[float | None]) -> dict[str, float | None]:
        v = [abs(x) for x in values if x is not None]
        return {
            "median_abs": statistics.median(v) if v else None,
            "worst_abs": max(v) if v else None,
            "n": float(len(v)),
        }

    tpj_hits = [r.tpj_in_interval for r in rows if r.tpj_in_interval is not None]
    return {
        "points": len(rows),
        "tpot": stat([r.tpot_err for r in rows]),
        "throughput": stat([r.tput_err for r in rows]),
        "tokens_per_joule": stat([r.tpj_err for r in rows]),
        "baseline_tpot": stat([r.base_tpot_err for r in rows]),
        "baseline_throughput": stat([r.base_tput_err for r in rows]),
        "baseline_tokens_per_joule": stat([r.base_tpj_err for r in rows]),
        "median_signed_tpot": statistics.median(r.tpot_err for r in rows) if rows else None,
        "tpot_interval_coverage": sum(r.tpot_in_interval for r in rows) / len(rows)
        if rows
        else None,
        "tokens_per_joule_interval_coverage": sum(tpj_hits) / len(tpj_hits) if tpj_hits else None,
        "throughput_interval_coverage": sum(r.tput_in_interval for r in rows) / len(rows)
        if rows
        else None,
        "by_regime": {
            name: {
                "points": len(sub),
                "tpot_median_abs": statistics.median(abs(r.tpot_err) for r in sub),
                "tpot_interval_coverage": sum(r.tpot_in_interval for r in sub) / len(sub),
                "median_high_ratio": statistics.median(r.tpot_high_ratio for r in sub),
            }
            for name, sub in (
                ("short output", [r for r in rows if not r.long_output]),
                ("long output", [r for r in rows if r.long_output]),
            )
            if sub
        },
    }


def _pct(x: object) -> str:
    return "—" if not isinstance(x, float) else f"{x:.1%}"


def _print(kind: str, s: dict[str, object]) -> None:
    print(f"\n{kind}: {s['points']} scored points")
    print("| figure | median abs error | worst abs error | baseline median | baseline worst |")
    print("|---|---|---|---|---|")
    for name, base in (("tpot", "baseline_tpot"), ("throughput", "baseline_throughput"),
                       ("tokens_per_joule", "baseline_tokens_per_joule")):  # fmt: skip
        a, b = s[name], s[base]
        assert isinstance(a, dict) and isinstance(b, dict)
        print(f"| {name} | {_pct(a['median_abs'])} | {_pct(a['worst_abs'])} | "
              f"{_pct(b['median_abs'])} | {_pct(b['worst_abs'])} |")  # fmt: skip
    print(f"median signed TPOT error {_pct(s['median_signed_tpot'])}; 95 % interval holds the "
          f"measured TPOT in {_pct(s['tpot_interval_coverage'])}, throughput in "
          f"{_pct(s['throughput_interval_coverage'])}, tokens/J in "
          f"{_pct(s['tokens_per_joule_interval_coverage'])}")  # fmt: skip
    regimes = s["by_regime"]
    assert isinstance(regimes, dict)
    for name, r in regimes.items():
        print(f"  {name}: {r['points']} points, TPOT median abs error "
              f"{_pct(r['tpot_median_abs'])}, interval holds {_pct(r['tpot_interval_coverage'])}"
              f", median interval x{1 / r['median_high_ratio']:.2f} .. "
              f"x{r['median_high_ratio']:.2f} of the prediction")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=FIXTURES)
    ap.add_argument("--json", action="store_true", help="every scored point as JSON")
    args = ap.parse_args()
    scored: list[Scored] = []
    for stem, model in MODELS.items():
        path = args.data / f"{stem}.json"
        if not path.exists():
            continue
        _, configs = read_mlenergy(path)
        scored += _hardware(stem, model, configs) + _load(stem, model, configs)
    hw = [r for r in scored if r.kind == "hardware"]
    load = [r for r in scored if r.kind == "load"]
    if args.json:
        print(json.dumps({"hardware": _summary(hw), "load": _summary(load),
                          "splits": [asdict(x) for x in SPLITS],
                          "points": [asdict(r) for r in scored]}, indent=1))  # fmt: skip
        return
    print("fitted on → scored (no scored row is in its own fit):")
    for x in SPLITS:
        print(f"  {x.kind:8s} {x.file}: {x.fitted} → {x.scored}")
    _print("H100 → B200 (fit on H100 only)", _summary(hw))
    _print("low → high concurrency, same H100s", _summary(load))


if __name__ == "__main__":
    main()
