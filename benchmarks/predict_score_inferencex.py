"""Score ``tokenwatt predict`` on InferenceX's cross-accelerator pairs, beside the bandwidth ratio.

Usage: python benchmarks/predict_score_inferencex.py [--data FILE ...] [--pair SRC:DST ...] [--json]

FILE is an InferenceX benchmarks JSON list (the InferenceX app's API rows; the default is the
two trimmed samples in tests/fixtures/public/inferencex, read as one: a row that repeats an
earlier one exactly is read once). A pair is two rows that share model, framework, weight
precision, parallelism, nominal lengths and the night they ran
(``predict.inferencex.pair_key``), one on the source accelerator and one on the target (the
InferenceX hardware keys; default ``h200:b200``). Per pair group: calibrate on the source rows
only (every concurrency of that night), predict each target row whose concurrency the source
rows also hold from the source row at that concurrency, and compare TPOT (median TPOT) and
output throughput with the target's. Every calibration prints the rows it was fitted on and
the rows it scored. The predictor, its constants and its interval rule are
``predict.transfer``'s, as the ML.ENERGY score uses them (``predict_score.py``); nothing here
is fitted to a scored row. No power is published, so no tokens/J is scored.

Baseline: the bandwidth ratio (τ × source bandwidth ÷ target bandwidth, the same GPU count;
throughput inversely).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from predict_score import Scored, Split, _inside, _inside_tput, _print, _summary

from tokenwatt.hardware import get_accelerator
from tokenwatt.predict import Target, calibrate, points_from_rows, predict_points
from tokenwatt.predict.inferencex import (
    HARDWARE,
    MODEL_WEIGHTS,
    InferenceXRow,
    pair_key,
    read_inferencex,
    to_row,
)
from tokenwatt.predict.transfer import LONG_OUTPUT_TOKENS

_SAMPLES = Path(__file__).resolve().parents[1] / "tests/fixtures/public/inferencex"
FIXTURE = _SAMPLES / "benchmarks-history-dsr1-fp8-h200-b200.json"
# SGLang rows of the AMD, H200/AMD and B200/B300 pairs (its source and trimming: the README)
CROSS_FIXTURE = _SAMPLES / "benchmarks-history-dsr1-fp8-sglang-cross.json"
DEFAULT_PAIR = ("h200", "b200")


def _name(rows: list[InferenceXRow]) -> str:
    r = rows[0]
    return (
        f"{r.framework} {r.model} {r.precision} tp{r.decode_tp} ep{r.decode_ep} "
        f"{r.isl}/{r.osl} {r.date}"
    )


def _concs(gpu: str, rows: list[InferenceXRow]) -> str:
    return f"{gpu} x{rows[0].decode_tp} conc {sorted(r.conc for r in rows)}" if rows else gpu


def read_rows(paths: list[Path]) -> list[InferenceXRow]:
    """Every row of the files in order; a row equal to one already read is read once (the
    samples overlap where one night's rows serve two pairs)."""
    rows: list[InferenceXRow] = []
    seen: set[str] = set()
    for path in paths:
        for r in read_inferencex(path):
            if (k := r.model_dump_json()) not in seen:
                seen.add(k)
                rows.append(r)
    return rows


def pair_groups(
    rows: list[InferenceXRow], pair: tuple[str, str] = DEFAULT_PAIR
) -> list[tuple[list[InferenceXRow], list[InferenceXRow]]]:
    """(source rows, target rows) per pair key holding both accelerators, in key order; rows
    of models or weight precisions the reader has no geometry for, speculative, disaggregated
    or multi-node runs are left out (a file holds many; ``to_row`` refuses them one by one)."""
    source, target = pair
    groups: dict[tuple[object, ...], dict[str, list[InferenceXRow]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        plain = r.spec_method == "none" and not r.disagg and not r.is_multinode
        if r.hardware in pair and plain and MODEL_WEIGHTS.get(r.model) == r.precision:
            groups[pair_key(r)][r.hardware].append(r)
    return [
        (sorted(g[source], key=lambda r: r.conc), sorted(g[target], key=lambda r: r.conc))
        for _, g in sorted(groups.items(), key=lambda kv: str(kv[0]))
        if g[source] and g[target]
    ]


def score_group(
    src_rows: list[InferenceXRow], dst_rows: list[InferenceXRow], splits: list[Split]
) -> list[Scored]:
    """Fit on ``src_rows`` only; score each target row whose concurrency the source holds."""
    src_acc = get_accelerator(HARDWARE[src_rows[0].hardware])
    dst_acc = get_accelerator(HARDWARE[dst_rows[0].hardware])
    cal = calibrate(points_from_rows([to_row(r) for r in src_rows]))
    by_conc = {r.conc: r for r in src_rows}
    scored_rows = [r for r in dst_rows if r.conc in by_conc]
    name = _name(src_rows)
    splits.append(
        Split(
            "hardware", name, _concs(src_rows[0].hardware.upper(), src_rows),
            _concs(dst_rows[0].hardware.upper(), scored_rows),
        )
    )  # fmt: skip
    bw = src_acc.bandwidth_bytes_per_s / dst_acc.bandwidth_bytes_per_s
    out = []
    for b in scored_rows:
        s = by_conc[b.conc]
        (point,) = points_from_rows([to_row(s)])
        target = Target(dst_acc, gpus_per_replica=b.decode_tp)
        (pred,) = predict_points(cal, [point], target, source=src_acc)
        meas_ms, src_ms = b.metrics.median_tpot * 1e3, s.metrics.median_tpot * 1e3
        meas_t = (b.metrics.output_tput_per_gpu or 0.0) * b.decode_tp
        src_t = (s.metrics.output_tput_per_gpu or 0.0) * s.decode_tp
        out.append(
            Scored(
                "hardware", name, b.conc,
                pred.tpot_s * 1e3 / meas_ms - 1.0,
                pred.output_tokens_per_s / meas_t - 1.0 if meas_t else float("nan"),
                None,
                src_ms * bw / meas_ms - 1.0,
                src_t / bw / meas_t - 1.0 if meas_t else float("nan"),
                None,
                _inside(pred, meas_ms),
                None,
                _inside_tput(pred, meas_t),
                pred.tpot_interval_s.high / pred.tpot_s,
                b.osl >= LONG_OUTPUT_TOKENS,
            )
        )  # fmt: skip
    return out


def score(
    rows: list[InferenceXRow], pair: tuple[str, str] = DEFAULT_PAIR
) -> tuple[list[Scored], list[Split]]:
    splits: list[Split] = []
    scored: list[Scored] = []
    for src_rows, dst_rows in pair_groups(rows, pair):
        scored += score_group(src_rows, dst_rows, splits)
    return scored, splits


def _by_setup(scored: list[Scored]) -> None:
    """Median |TPOT error| per framework and workload (a reading, nothing fitted to it)."""
    groups: dict[str, list[Scored]] = defaultdict(list)
    for r in scored:
        framework, _, _, _, _, lengths, _ = r.file.split(" ")
        groups[f"{framework} {lengths}"].append(r)
    print("\nby framework and isl/osl: points, TPOT median |error|, median signed, ratio median")
    for k, sub in sorted(groups.items()):
        print(f"  {k}: {len(sub)}, {statistics.median(abs(r.tpot_err) for r in sub):.1%}, "
              f"{statistics.median(r.tpot_err for r in sub):+.1%}, "
              f"{statistics.median(abs(r.base_tpot_err) for r in sub):.1%}")  # fmt: skip


def latest_nights(scored: list[Scored]) -> list[Scored]:
    """The points of each setup's (framework, parallelism, lengths) latest scored night."""
    latest: dict[str, str] = {}
    for r in scored:
        setup, night = r.file.rsplit(" ", 1)
        latest[setup] = max(latest.get(setup, night), night)
    return [r for r in scored if r.file.rsplit(" ", 1)[1] == latest[r.file.rsplit(" ", 1)[0]]]


def _pair(text: str) -> tuple[str, str]:
    source, sep, target = text.partition(":")
    if not sep or source not in HARDWARE or target not in HARDWARE or source == target:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give SRC:DST, two of {sorted(HARDWARE)} (e.g. mi300x:mi355x)"
        )
    return source, target


def _report(rows: list[InferenceXRow], pair: tuple[str, str]) -> None:
    scored, splits = score(rows, pair)
    src, dst = (h.upper() for h in pair)
    print(f"\n=== {src} → {dst} ===")
    print("fitted on → scored (no scored row is in its own fit):")
    for x in splits:
        print(f"  {x.file}: {x.fitted} → {x.scored}")
    if not scored:
        print("  no pair in the data")
        return
    _print(f"{src} → {dst} (fit on {src} only)", _summary(scored))
    _by_setup(scored)
    _print(
        "the latest night of each setup only (the nights repeat one setup)",
        _summary(latest_nights(scored)),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, nargs="+", default=[FIXTURE, CROSS_FIXTURE])
    ap.add_argument("--pair", type=_pair, action="append", help="SRC:DST (repeatable)")
    ap.add_argument("--json", action="store_true", help="every scored point as JSON")
    args = ap.parse_args()
    rows = read_rows(args.data)
    pairs = args.pair or [DEFAULT_PAIR]
    if args.json:
        out = {}
        for pair in pairs:
            scored, splits = score(rows, pair)
            out[":".join(pair)] = {"hardware": _summary(scored),
                                   "splits": [asdict(x) for x in splits],
                                   "points": [asdict(r) for r in scored]}  # fmt: skip
        print(json.dumps(out if args.pair else out[":".join(DEFAULT_PAIR)], indent=1))
        return
    for pair in pairs:
        _report(rows, pair)


if __name__ == "__main__":
    main()
