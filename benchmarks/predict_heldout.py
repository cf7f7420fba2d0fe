"""Held-out evidence for ``tokenwatt predict``: ML.ENERGY files the score never reads.

Usage: python benchmarks/predict_heldout.py [--data DIR]

DIR holds the ML.ENERGY leaderboard files (``public/data/models`` of ``ml-energy/leaderboard``;
default: the four held-out files kept in tests/fixtures/public/mlenergy-heldout).
``predict_score.py`` scores nine of them; this script reads only the Qwen3-14B and Qwen3-32B
files (chat and GPQA), which no score uses, to test explanations of the score's fast bias on
data outside the scored table:

* the same hardware transfer as the score (calibrate on H100 rows, predict each B200 row at the
  same ``max_num_seqs``): does the bias appear here too, and how does it grow with the batch;
* an achieved-bandwidth share of the B200 relative to the H100 (rated bandwidth × s): one s
  shared by the chat files, each file its own floor and efficiency, by least squares on
  relative error over a grid of s (the fitted s and how much it lowers the residuals);
* a per-sequence host cost c (seconds per sequence per step, the same on both hosts): τ =
  floor + c × B + x ÷ efficiency fitted over both GPUs of the chat files;
* a max-form step, x = max(weight read, all GEMM FLOPs incl. the decode tokens') + KV read,
  against the summed step the simulator prices, by the same hardware rule on the chat files;
* the mean context of a generated token from each configuration's published output-length
  histogram (input + Σ n(n−1)/2 ÷ Σ n) against input + mean output ÷ 2;
* the step split into a part that grows with the batch and one that does not: τ = a + b × B
  by least squares over the caps up to 64 (both GPUs hold them) per file and GPU. b carries
  the KV read and the prompts (∝ B); a the weights and the floor. The B200's b against the
  H100's b × the bandwidth ratio says whether the per-sequence (KV) part moved as rated
  bandwidth says; a(GPQA) − a(chat) on one GPU is the per-step cost the long reasoning
  outputs add that does not grow with the batch; power per GPU as a share of TDP beside it
  (a step the GPU spends waiting draws little);
* the transfer errors the interval states (``predict.transfer``): the log error
  ln(measured ÷ predicted) of TPOT and of power per GPU of every held-out transfer by the
  score's rules, per kind
  (``load``: the lower half of one GPU count's caps to the upper half, on each GPU model;
  ``accelerator``: H100 ×g → B200 ×g at the same cap; ``accelerator+tp``: H100 ×g → B200 ×g',
  g' ≠ g) and regime (long output: a mean output of ``LONG_OUTPUT_TOKENS`` or more), and the
  root mean square of each cell with its number of points;
* KV capacity at high caps: the sequences whose KV fits at once, (GPUs × memory × 0.9 (vLLM's
  default) − weights) ÷ (KV bytes per token × the histogram context), against the cap and the
  published batch, beside the load transfer's error at that cap;
* a KV read efficiency apart from the rest, where the source's own context varies: on the H100,
  b of GPQA minus b of chat (same model, context about 1,600 against 5,500–6,100 tokens)
  against the rated per-sequence time (KV read + prompt compute) of each: the efficiency of the
  part that grows with the context, beside each task's own b-efficiency.

The two geometries are the Qwen3-8B preset with the published sizes of the larger models
(hidden 5,120; intermediate 17,408 / 25,600; 40 / 64 layers and query heads; 8 KV heads):
14.77 B and 32.76 B parameters, as published (14.8 B, 32.8 B).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from predict_score import INPUT_TOKENS

from tokenwatt.geometry import geometry_from_config
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.predict import (
    Prediction,
    StepPoint,
    Target,
    calibrate,
    points_from_rows,
    predict_points,
)
from tokenwatt.predict.calibrate import _fit_step
from tokenwatt.predict.mlenergy import MlEnergyConfig, read_mlenergy, to_row
from tokenwatt.predict.points import PredictError
from tokenwatt.predict.transfer import LONG_OUTPUT_TOKENS

HELDOUT_FIXTURES = Path(__file__).resolve().parents[1] / "tests/fixtures/public/mlenergy-heldout"
PRESET = Path(__file__).resolve().parents[1] / "src/tokenwatt/geometry/presets/Qwen3-8B.json"
SIZES = {  # layers, query heads, intermediate (hidden 5,120, 8 KV heads, head_dim 128)
    "qwen3-14b": (40, 40, 17408),
    "qwen3-32b": (64, 64, 25600),
}
FILES = {
    "Qwen__Qwen3-14B__lm-arena-chat": "qwen3-14b",
    "Qwen__Qwen3-32B__lm-arena-chat": "qwen3-32b",
    "Qwen__Qwen3-14B__gpqa": "qwen3-14b",
    "Qwen__Qwen3-32B__gpqa": "qwen3-32b",
}


def _geometry(name: str) -> ModelGeometry:
    layers, heads, inter = SIZES[name]
    cfg = json.loads(PRESET.read_text())
    cfg.update(hidden_size=5120, num_hidden_layers=layers, num_attention_heads=heads,
               intermediate_size=inter, max_window_layers=layers)  # fmt: skip
    return geometry_from_config(cfg, name=name)


def _points(model: str, rows: list[MlEnergyConfig]) -> list[StepPoint]:
    geom = _geometry(model)
    return points_from_rows([to_row(c, model, INPUT_TOKENS) for c in rows], lambda _: geom)


def _groups(configs: list[MlEnergyConfig], gpu: str) -> dict[int, list[MlEnergyConfig]]:
    out: dict[int, list[MlEnergyConfig]] = {}
    for c in configs:
        if c.gpu_model == gpu:
            out.setdefault(c.num_gpus, []).append(c)
    return out


def _transfer(stem: str, model: str, configs: list[MlEnergyConfig]) -> list[float]:
    """The score's hardware rule on a held-out file: signed TPOT errors, printed per cap."""
    hg, bg = _groups(configs, "H100"), _groups(configs, "B200")
    h_rows = hg[max(hg, key=lambda g: len(hg[g]))]
    errs = []
    for b_gpus, b_rows in sorted(bg.items()):
        for b, pred in _b200_predictions(model, h_rows, b_rows, b_gpus):
            errs.append(pred.tpot_s * 1e3 / b.median_itl_ms - 1.0)
            print(f"  {stem}: B200 x{b_gpus} seqs {b.max_num_seqs:5d}  {errs[-1]:+.1%}")
    return errs


def _b200_predictions(model: str, fit: list[MlEnergyConfig], scored: list[MlEnergyConfig],
                      gpus: int) -> Iterator[tuple[MlEnergyConfig, Prediction]]:  # fmt: skip
    """Each B200 row with its prediction by the score's hardware rule from the H100 row with
    the same cap (rows without one are skipped), on a calibration over ``fit``."""
    h100, b200 = get_accelerator("h100-sxm"), get_accelerator("b200")
    cal = calibrate(_points(model, fit))
    target = Target(b200, gpus_per_replica=gpus)
    for row in scored:
        src = [c for c in fit if c.max_num_seqs == row.max_num_seqs]
        if src:
            (pred,) = predict_points(cal, _points(model, src[:1]), target, source=h100)
            yield row, pred


def _both(model: str, configs: list[MlEnergyConfig]) -> list[tuple[str, StepPoint]]:
    out = []
    for gpu in ("H100", "B200"):
        for rows in _groups(configs, gpu).values():
            out += [(gpu, p) for p in _points(model, rows)]
    return out


def _share_sse(files: list[list[tuple[str, StepPoint]]], share: float) -> float:
    total = 0.0
    for pts in files:
        xs = np.array([p.rated_s / (share if g == "B200" else 1.0) for g, p in pts])
        taus = np.array([p.step_s for _, p in pts])
        floor, inv = _fit_step(xs, taus, with_floor=True)
        if floor < 0:
            floor, inv = _fit_step(xs, taus, with_floor=False)
        total += float(np.sum(((floor + xs * inv) / taus - 1.0) ** 2))
    return total


def _host_cost(files: list[list[tuple[str, StepPoint]]]) -> tuple[float, float, float]:
    """(floor_s, c_s per sequence, efficiency) over every point, weighted 1/τ."""
    a = np.array([[1.0, p.batch, p.rated_s] for pts in files for _, p in pts])
    taus = np.array([p.step_s for pts in files for _, p in pts])
    coef, *_ = np.linalg.lstsq(a / taus[:, None], np.ones_like(taus), rcond=None)
    return float(coef[0]), float(coef[1]), 1.0 / float(coef[2])


def _x(gpu: str, p: StepPoint, active: float, form: str) -> float:
    """The step's rated time on ``gpu`` (the point's GPU count), summed or max-form."""
    acc = get_accelerator("b200" if gpu == "B200" else "h100-sxm")
    g = p.gpus_per_replica
    weights = p.weight_bytes_per_step / (g * acc.bandwidth_bytes_per_s)
    kv = p.kv_bytes_per_step / (g * acc.bandwidth_bytes_per_s)
    prompt = p.prefill_flops_per_step / (g * acc.bf16_dense_flops)
    if form == "sum":
        return weights + kv + prompt
    return max(weights, prompt + 2.0 * active * p.batch / (g * acc.bf16_dense_flops)) + kv


def _form_errors(model: str, configs: list[MlEnergyConfig], form: str) -> list[float]:
    """Calibrate τ = floor + x ÷ eff on the H100 rows, predict each B200 row at its cap."""
    active = _geometry(model).active_params
    hg, bg = _groups(configs, "H100"), _groups(configs, "B200")
    h = _points(model, hg[max(hg, key=lambda g: len(hg[g]))])
    xs = np.array([_x("H100", p, active, form) for p in h])
    floor, inv = _fit_step(xs, np.array([p.step_s for p in h]), with_floor=True)
    if floor < 0:
        floor, inv = _fit_step(xs, np.array([p.step_s for p in h]), with_floor=False)
    errs = []
    for b_gpus, rows in bg.items():
        for b, bp in zip(rows, _points(model, rows), strict=True):
            src = [p for p in h if p.concurrency == float(b.max_num_seqs)]
            if src:
                moved = dataclasses.replace(src[0], gpus_per_replica=b_gpus)
                errs.append((floor + _x("B200", moved, active, form) * inv) / bp.step_s - 1.0)
    return errs


def _context_ratio(configs: list[MlEnergyConfig]) -> tuple[float, float]:
    """(smallest, largest) histogram context ÷ (input + mean output ÷ 2) over a file."""
    ratios = [
        (INPUT_TOKENS + c.output_length_distribution.context_offset_tokens())
        / (INPUT_TOKENS + c.avg_output_len / 2.0)
        for c in configs
        if c.output_length_distribution is not None
    ]
    return min(ratios), max(ratios)


def _split(configs: list[MlEnergyConfig], gpu: str) -> tuple[int, float, float]:
    """(GPUs, a_s, b_s per sequence): τ = a + b × B over the caps up to 64 of one GPU count
    (the count with most rows)."""
    groups = _groups(configs, gpu)
    gpus = max(groups, key=lambda g: len(groups[g]))
    rows = [c for c in groups[gpus] if c.max_num_seqs <= 64]
    slope, intercept = np.polyfit([c.avg_batch_size for c in rows],
                                  [c.median_itl_ms / 1e3 for c in rows], 1)  # fmt: skip
    return gpus, float(intercept), float(slope)


def _per_step_terms(data: Path) -> None:
    bw = {g: get_accelerator(n).bandwidth_bytes_per_s for g, n in (("H100", "h100-sxm"),
                                                                    ("B200", "b200"))}  # fmt: skip
    fits: dict[tuple[str, str], tuple[int, float, float]] = {}
    for stem in FILES:
        configs = read_mlenergy(data / f"{stem}.json")[1]
        lo, hi = _context_ratio(configs)
        print(f"{stem}: histogram context ÷ (input + output/2) = {lo:.2f}–{hi:.2f}")
        for gpu in ("H100", "B200"):
            fits[stem, gpu] = g, a, b = _split(configs, gpu)
            tdp = get_accelerator("b200" if gpu == "B200" else "h100-sxm").tdp_w
            share = [c.avg_power_watts / (g * tdp) for c in configs
                     if c.gpu_model == gpu and c.num_gpus == g and c.max_num_seqs <= 64
                     and c.avg_power_watts]  # fmt: skip
            print(f"  {gpu} x{g}: tau = {a * 1e3:.2f} ms + {b * 1e6:.1f} us x B (caps <= 64); "
                  f"power per GPU {min(share):.0%}–{max(share):.0%} of TDP")  # fmt: skip
        (hg, _, hb), (bg, _, bb) = fits[stem, "H100"], fits[stem, "B200"]
        rated = hb * hg * bw["H100"] / (bg * bw["B200"])
        print(f"  B200 per-sequence slope {bb * 1e6:.1f} us against {rated * 1e6:.1f} us the "
              f"H100's slope x the bandwidth ratio says ({bb / rated - 1.0:+.0%})")  # fmt: skip
    for model in ("Qwen3-14B", "Qwen3-32B"):
        for gpu in ("H100", "B200"):
            extra = (
                fits[f"Qwen__{model}__gpqa", gpu][1] - fits[f"Qwen__{model}__lm-arena-chat", gpu][1]
            )
            print(f"{model} {gpu}: per-step term GPQA minus chat {extra * 1e3:+.1f} ms")


def _per_sequence_rated_s(model: str, rows: list[MlEnergyConfig], gpus: int) -> float:
    """Rated seconds one sequence adds to a step: its KV read at the histogram context and its
    share of prompt compute (input ÷ output prompt tokens per step), on ``gpus`` H100s."""
    acc, geom = get_accelerator("h100-sxm"), _geometry(model)
    out: list[float] = []
    for c in rows:
        hist = c.output_length_distribution
        assert hist is not None, "the held-out files publish their histograms"
        kv = geom.kv_bytes_read(round(INPUT_TOKENS + hist.context_offset_tokens()))
        prompt = 2.0 * geom.active_params * INPUT_TOKENS / c.avg_output_len
        out.append(kv / acc.bandwidth_bytes_per_s + prompt / acc.bf16_dense_flops)
    return statistics.mean(out) / gpus


def _kv_efficiency(data: Path) -> None:
    for name, model in (("Qwen3-14B", "qwen3-14b"), ("Qwen3-32B", "qwen3-32b")):
        got = {}
        for task in ("lm-arena-chat", "gpqa"):
            configs = read_mlenergy(data / f"Qwen__{name}__{task}.json")[1]
            gpus, _, slope = _split(configs, "H100")
            rows = [c for c in _groups(configs, "H100")[gpus] if c.max_num_seqs <= 64]
            got[task] = slope, _per_sequence_rated_s(model, rows, gpus)
        (b_chat, x_chat), (b_long, x_long) = got["lm-arena-chat"], got["gpqa"]
        print(f"{name} H100: per-sequence efficiency chat {x_chat / b_chat:.2f}, GPQA "
              f"{x_long / b_long:.2f}, the part that grows with the context "
              f"{(x_long - x_chat) / (b_long - b_chat):.2f}")  # fmt: skip


Errors = list[tuple[float, float | None]]  # (τ, power per GPU): ln(measured ÷ predicted)


def _pair(row: MlEnergyConfig, pred: Prediction) -> tuple[float, float | None]:
    power = None
    if row.avg_power_watts and pred.power_w_per_gpu:
        power = float(np.log(row.avg_power_watts / row.num_gpus / pred.power_w_per_gpu))
    return float(np.log(row.median_itl_ms / (pred.tpot_s * 1e3))), power


def _log_errors(model: str, fit: list[MlEnergyConfig], scored: list[MlEnergyConfig],
                gpus: int) -> Errors:  # fmt: skip
    """Log errors of each B200 row, predicted by the score's hardware rule from the H100 row
    with the same cap (rows without one are skipped)."""
    return [_pair(row, pred) for row, pred in _b200_predictions(model, fit, scored, gpus)]


def _transfer_evidence(data: Path) -> dict[tuple[str, bool], Errors]:
    """Every held-out transfer's log errors, by kind and long-output regime."""
    cells: dict[tuple[str, bool], Errors] = {}
    for stem, model in FILES.items():
        configs = read_mlenergy(data / f"{stem}.json")[1]
        long = statistics.mean(c.avg_output_len for c in configs) >= LONG_OUTPUT_TOKENS
        hg, bg = _groups(configs, "H100"), _groups(configs, "B200")
        for g, rows in hg.items():
            for g2, brows in bg.items():
                kind = "accelerator" if g == g2 else "accelerator+tp"
                cells.setdefault((kind, long), []).extend(_log_errors(model, rows, brows, g2))
        for gpu, groups in (("h100-sxm", hg), ("b200", bg)):
            for rows in groups.values():
                caps = sorted({c.max_num_seqs for c in rows})
                if len(caps) < 4:
                    continue
                low = [c for c in rows if c.max_num_seqs in set(caps[: len(caps) // 2])]
                high = [c for c in rows if c not in low]
                cells.setdefault(("load", long), []).extend(_load_log_errors(model, low, high, gpu))
    return cells


def _load_log_errors(model: str, low: list[MlEnergyConfig], high: list[MlEnergyConfig],
                     gpu: str) -> Errors:  # fmt: skip
    """Log errors of the upper caps from a fit on the lower caps, same GPU."""
    acc = get_accelerator(gpu)
    try:
        cal = calibrate(_points(model, low))
    except PredictError as exc:  # the caps' steps do not grow with their bytes: no prediction
        print(f"  load {model} {gpu} caps {[c.max_num_seqs for c in low]}: not fitted ({exc})")
        return []
    preds = predict_points(cal, _points(model, high), Target(acc), source=acc)
    return [_pair(r, p) for r, p in zip(high, preds, strict=True)]


def _rms_line(name: str, e: list[float]) -> str:
    rms = float(np.sqrt(np.mean(np.square(e))))
    return (f"  {name:30s} n = {len(e):2d}  RMS {rms:.3f}  median {statistics.median(e):+.3f}  "
            f"range {min(e):+.3f} .. {max(e):+.3f}")  # fmt: skip


def _print_transfer_evidence(data: Path) -> None:
    """Each cell, then the pools the interval states (``predict.transfer``): for TPOT, load over
    both regimes and another accelerator (with or without a TP change) per regime; for power
    per GPU (the power law carried to the target), load and another accelerator, each over
    both regimes (the regimes' errors differ in sign, not in size)."""
    cells = _transfer_evidence(data)
    load = {"LOAD (both regimes)": [("load", False), ("load", True)]}
    hw = [("accelerator", False), ("accelerator+tp", False)]
    hw_long = [("accelerator", True), ("accelerator+tp", True)]
    tpot = {**load, "ACCELERATOR, short output": hw, "ACCELERATOR, long output": hw_long}
    power = {**load, "ACCELERATOR (both regimes)": hw + hw_long}
    for i, (what, pools) in enumerate((("TPOT", tpot), ("power per GPU", power))):
        print(f"transfer errors (held-out; log {what} error ln(measured / predicted)):")
        for (kind, long), pairs in sorted(cells.items()):
            e = [x for x in (p[i] for p in pairs) if x is not None]
            if e:
                print(_rms_line(f"{kind}, {'long' if long else 'short'} output", e))
        for name, keys in pools.items():
            e = [x for k in keys for x in (p[i] for p in cells.get(k, [])) if x is not None]
            print(_rms_line(name, e))


GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of GPU memory for weights and KV cache


def _kv_capacity_seqs(model: str, c: MlEnergyConfig) -> float:
    """Sequences whose KV fits at once: (GPUs × memory × 0.9 − weights) ÷ (KV bytes per token
    × the mean context a sequence holds over its life, the histogram context)."""
    geom, acc = _geometry(model), get_accelerator("b200" if c.gpu_model == "B200" else "h100-sxm")
    assert acc.memory_bytes is not None and c.output_length_distribution is not None
    free = c.num_gpus * acc.memory_bytes * GPU_MEMORY_UTILIZATION - geom.stored_weight_bytes
    context = INPUT_TOKENS + c.output_length_distribution.context_offset_tokens()
    return free / (geom.kv_bytes_per_token_full_context * context)


def _kv_capacity(data: Path) -> None:
    """Where the published batch falls short of the cap, against the KV capacity, beside the
    load transfer's log TPOT error there (the score's rule)."""
    errors: dict[tuple[str, str, int, int], float] = {}
    for stem, model in FILES.items():
        configs = read_mlenergy(data / f"{stem}.json")[1]
        for gpu, name in (("h100-sxm", "H100"), ("b200", "B200")):
            for g, rows in _groups(configs, name).items():
                caps = sorted({c.max_num_seqs for c in rows})
                if len(caps) < 4:
                    continue
                low = [c for c in rows if c.max_num_seqs in set(caps[: len(caps) // 2])]
                high = [c for c in rows if c not in low]
                for c, (e, _) in zip(high, _load_log_errors(model, low, high, gpu), strict=False):
                    errors[stem, name, g, c.max_num_seqs] = e
        for c in sorted(configs, key=lambda c: (c.gpu_model, c.num_gpus, c.max_num_seqs)):
            fits = _kv_capacity_seqs(model, c)
            short = c.avg_batch_size < 0.95 * c.max_num_seqs
            if short or fits < c.max_num_seqs:
                e = errors.get((stem, c.gpu_model, c.num_gpus, c.max_num_seqs))
                print(f"  {stem} {c.gpu_model} x{c.num_gpus} cap {c.max_num_seqs}: batch "
                      f"{c.avg_batch_size:.0f}, KV holds {fits:.0f}; load log error "
                      f"{'-' if e is None else f'{e:+.3f}'}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=HELDOUT_FIXTURES)
    args = ap.parse_args()
    chat, errs = [], {}
    for stem, model in FILES.items():
        _, configs = read_mlenergy(args.data / f"{stem}.json")
        errs[stem] = _transfer(stem, model, configs)
        if "chat" in stem:
            chat.append(_both(model, configs))
    for stem, e in errs.items():
        print(f"{stem}: {len(e)} points, median signed TPOT error {statistics.median(e):+.1%}")
    grid = np.round(np.arange(0.5, 1.3001, 0.01), 2)
    sse = [_share_sse(chat, s) for s in grid]
    best = int(np.argmin(sse))
    print(f"B200 achieved-bandwidth share (chat files): s = {grid[best]:.2f}; relative SSE "
          f"{sse[best]:.3f} against {_share_sse(chat, 1.0):.3f} at s = 1")  # fmt: skip
    for form in ("sum", "max"):
        e: list[float] = []
        for st, m in FILES.items():
            if "chat" in st:
                e += _form_errors(m, read_mlenergy(args.data / f"{st}.json")[1], form)
        mid, mid_abs = statistics.median(e), statistics.median(abs(x) for x in e)
        print(f"{form}-form step (chat files, {len(e)} points): median signed TPOT error "
              f"{mid:+.1%}, median |error| {mid_abs:.1%}")  # fmt: skip
    floor, c, eff = _host_cost(chat)
    print(f"per-sequence host cost (chat files, both GPUs): c = {c * 1e6:.2f} us per sequence "
          f"per step (floor {floor * 1e3:.2f} ms, efficiency {eff:.3f})")  # fmt: skip
    _per_step_terms(args.data)
    _kv_efficiency(args.data)
    _print_transfer_evidence(args.data)
    print(
        "KV capacity (configurations whose batch falls 5 % short of the cap or whose cap "
        "exceeds what the KV cache holds):"
    )
    _kv_capacity(args.data)


if __name__ == "__main__":
    main()
