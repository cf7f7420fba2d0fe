"""The InferenceX reader against its raw rows, its refusals, and the score's split for any
pair of accelerators: fitted on the source's rows only, never on a row it scores."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tokenwatt.hardware import get_accelerator
from tokenwatt.predict import PredictError, Target, calibrate, points_from_rows, predict_points
from tokenwatt.predict.inferencex import HARDWARE, pair_key, read_inferencex, to_row

FIXTURE = (
    Path(__file__).parent / "fixtures/public/inferencex/benchmarks-history-dsr1-fp8-h200-b200.json"
)
CROSS = FIXTURE.with_name("benchmarks-history-dsr1-fp8-sglang-cross.json")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _row(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "model": "dsr1", "hardware": "h200", "framework": "sglang", "precision": "fp8",
        "spec_method": "none", "disagg": False, "is_multinode": False, "decode_tp": 8,
        "decode_ep": 1, "decode_dp_attention": False, "isl": 1024, "osl": 1024, "conc": 4,
        "date": "2025-12-31", "metrics": {"median_tpot": 0.01, "output_tput_per_gpu": 50.0},
    }  # fmt: skip
    base.update(kw)
    return base


def test_reader_gives_the_raw_file_figures() -> None:
    """Two rows checked by hand against the file's lines 2 and 175 (the first row, and the
    SGLang H200 8192/1024 row at 64 requests on 2025-12-31)."""
    rows = read_inferencex(FIXTURE)
    assert len(rows) == 203
    first = to_row(rows[0])  # trt b200, tp8 ep8, 1024/1024, conc 4, 2025-12-10
    assert (first.model, first.hardware, first.gpus) == ("deepseek-r1", "b200", 8)
    assert first.tpot_ms == pytest.approx(14.63445153967418)  # median_tpot 0.01463445153967418 s
    assert first.output_tokens_per_s == pytest.approx(8 * 32.77688913738007)
    assert (first.input_tokens, first.output_tokens, first.concurrency) == (1024, 1024, 4)
    (h200,) = [
        r for r in rows
        if (r.framework, r.hardware, r.isl, r.conc) == ("sglang", "h200", 8192, 64)
        and r.date == "2025-12-31"
    ]  # fmt: skip
    row = to_row(h200)
    assert row.tpot_ms == pytest.approx(53.41308335238376)
    assert row.output_tokens_per_s == pytest.approx(8 * 142.87595946223317)
    # the engine's batch as the row gives it: T·τ = 1,143 tok/s × 53.4 ms ≈ 61 of 64 requests
    assert row.batch_per_replica() == pytest.approx(8 * 142.87595946223317 * 0.05341308335238376)


def test_gpus_are_the_tensor_parallel_degree_not_num_decode_gpu() -> None:
    """TensorRT-LLM rows state num_decode_gpu 64 (tp 8 × ep 8) for one node of 8 GPUs; their
    throughput per GPU is per 8: T·τ lands at the concurrency, not at an eighth of it."""
    rows = [r for r in read_inferencex(FIXTURE) if r.decode_ep == 8]
    assert rows
    raw = json.loads(FIXTURE.read_text("utf-8"))
    assert {r["num_decode_gpu"] for r in raw if r["decode_ep"] == 8} == {64}
    for r in rows:
        p = to_row(r)
        assert p.gpus == 8
        assert 0.85 * r.conc <= p.batch_per_replica() <= 1.02 * r.conc


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{}", r"a JSON list of 1 to"),
        ("[]", r"a JSON list of 1 to"),
        ("not json", r"not an InferenceX benchmarks file"),
        (json.dumps([_row(), _row(metrics={"output_tput_per_gpu": 5.0})]),
         r"row 1: metrics\.median_tpot: Field required"),
        (json.dumps([_row(conc=0)]), r"row 0: conc: Input should be greater than or equal to 1"),
        (json.dumps([_row(metrics={"median_tpot": -1.0})]),
         r"row 0: metrics\.median_tpot: Input should be greater than 0"),
        (json.dumps([_row(decode_tp="eight")]), r"row 0: decode_tp: "),
    ],
)  # fmt: skip
def test_a_malformed_file_is_refused_in_one_line(tmp_path: Path, data: str, message: str) -> None:
    bad = tmp_path / "rows.json"
    bad.write_text(data)
    with pytest.raises(PredictError, match=message) as info:
        read_inferencex(bad)
    assert "\n" not in str(info.value) and str(bad) in str(info.value)


def test_rows_the_geometry_cannot_stand_for_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    cases = [
        (_row(precision="fp4"), r"dsr1 fp4: the geometry reads fp8 weights"),
        (_row(hardware="gaudi3"), r"hardware 'gaudi3' is not one of"),
        (_row(model="gptoss"), r"model 'gptoss' is not one of"),
        (_row(spec_method="mtp"), r"speculative runs are not"),
        (_row(disagg=True), r"disaggregated"),
    ]
    for raw, message in cases:
        path.write_text(json.dumps([raw]))
        (row,) = read_inferencex(path)
        with pytest.raises(PredictError, match=message):
            to_row(row)
    with pytest.raises(PredictError, match="not an InferenceX"):
        read_inferencex(tmp_path / "missing.json")


def test_the_score_fits_on_h200_rows_only_and_never_on_a_scored_row() -> None:
    import predict_score_inferencex as score

    rows = read_inferencex(FIXTURE)
    groups = score.pair_groups(rows)
    assert len(groups) == 37
    seen: set[int] = set()
    for src, dst in groups:
        assert {r.hardware for r in src} == {"h200"} and {r.hardware for r in dst} == {"b200"}
        assert len({pair_key(r) for r in src + dst}) == 1
        ids = {id(r) for r in src} | {id(r) for r in dst}
        assert not ids & seen, "a row in two groups"
        seen |= ids
        assert not {id(r) for r in src} & {id(r) for r in dst}
    # rebuild one scored point from a calibration on that night's H200 rows alone
    src, dst = groups[0]
    splits: list[object] = []
    points = score.score_group(src, dst, splits)  # type: ignore[arg-type]
    cal = calibrate(points_from_rows([to_row(r) for r in src]))
    b = dst[-1]
    (s,) = [r for r in src if r.conc == b.conc]
    (pred,) = predict_points(
        cal, points_from_rows([to_row(s)]), Target(get_accelerator("b200"), gpus_per_replica=8),
        source=get_accelerator("h200"),
    )  # fmt: skip
    assert points[-1].seqs == b.conc
    assert points[-1].tpot_err == pytest.approx(pred.tpot_s / b.metrics.median_tpot - 1, rel=1e-12)
    # the bandwidth-ratio baseline by hand: τ(H200) × 4.8 ÷ 7.7 against τ(B200)
    hand = s.metrics.median_tpot * 4.8e12 / 7.7e12 / b.metrics.median_tpot - 1
    assert points[-1].base_tpot_err == pytest.approx(hand, rel=1e-12)
    # a file of H200 rows alone gives nothing to score: no point is scored without its pair
    assert score.pair_groups([r for r in rows if r.hardware == "h200"]) == []


def test_the_score_pairs_only_rows_it_can_read(tmp_path: Path) -> None:
    """An H200/B200 pair of FP4 weights, of MTP or of another model is left out, not refused;
    the FP8 pair of the same night is kept."""
    import predict_score_inferencex as score

    raw = [
        _row(hardware=hw, precision=prec, spec_method=spec, model=model)
        for hw in ("h200", "b200")
        for prec, spec, model in (
            ("fp8", "none", "dsr1"), ("fp4", "none", "dsr1"), ("fp8", "mtp", "dsr1"),
            ("fp8", "none", "gptoss"),
        )
    ]  # fmt: skip
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(raw))
    groups = score.pair_groups(read_inferencex(path))
    assert [(len(s), len(d)) for s, d in groups] == [(1, 1)]
    kept = {(r.precision, r.spec_method, r.model) for r in groups[0][0] + groups[0][1]}
    assert kept == {("fp8", "none", "dsr1")}


def test_the_two_samples_read_as_one_leave_the_h200_b200_score_as_it_was() -> None:
    """The second sample repeats some H200 and B200 rows (their nights serve other pairs too):
    read together they are read once, and the H200 → B200 score is the first sample's."""
    import predict_score_inferencex as score

    both = score.read_rows([FIXTURE, CROSS])
    assert len(both) < len(read_inferencex(FIXTURE)) + len(read_inferencex(CROSS))
    assert len({r.model_dump_json() for r in both}) == len(both)
    alone, _ = score.score(read_inferencex(FIXTURE))
    merged, _ = score.score(both)
    assert len(merged) == 89
    assert [(r.file, r.seqs, r.tpot_err) for r in merged] == [
        (r.file, r.seqs, r.tpot_err) for r in alone
    ]


@pytest.mark.parametrize(
    ("pair", "rated_ratio"),
    [(("mi300x", "mi325x"), 5.3 / 6.0), (("h200", "mi355x"), 4.8 / 8.0),
     (("b200", "b300"), 1.0)],
)  # fmt: skip
def test_any_pair_fits_on_its_source_rows_only(pair: tuple[str, str], rated_ratio: float) -> None:
    """MI300X → MI325X, H200 → MI355X, B200 → B300: every group holds one night's source rows
    and that night's target rows; one point is rebuilt from a calibration on the source rows
    alone, and the bandwidth-ratio baseline is the rated ratio by hand."""
    import predict_score_inferencex as score

    groups = score.pair_groups(score.read_rows([CROSS]), pair)
    assert groups
    for src, dst in groups:
        assert {r.hardware for r in src} == {pair[0]} and {r.hardware for r in dst} == {pair[1]}
        assert len({pair_key(r) for r in src + dst}) == 1
    src, dst = groups[-1]
    points = score.score_group(src, dst, [])
    b = [r for r in dst if r.conc in {s.conc for s in src}][-1]
    (s,) = [r for r in src if r.conc == b.conc]
    (pred,) = predict_points(
        calibrate(points_from_rows([to_row(r) for r in src])), points_from_rows([to_row(s)]),
        Target(get_accelerator(HARDWARE[pair[1]]), gpus_per_replica=b.decode_tp),
        source=get_accelerator(HARDWARE[pair[0]]),
    )  # fmt: skip
    assert points[-1].seqs == b.conc
    assert points[-1].tpot_err == pytest.approx(pred.tpot_s / b.metrics.median_tpot - 1, rel=1e-12)
    hand = s.metrics.median_tpot * rated_ratio / b.metrics.median_tpot - 1
    assert points[-1].base_tpot_err == pytest.approx(hand, rel=1e-12)


def test_a_pair_is_named_by_two_known_accelerators() -> None:
    import argparse

    import predict_score_inferencex as score

    assert score._pair("mi300x:mi355x") == ("mi300x", "mi355x")
    for bad in ("mi300x", "mi300x:mi300x", "h200:gaudi3"):
        with pytest.raises(argparse.ArgumentTypeError, match="give SRC:DST"):
            score._pair(bad)


def test_the_stated_scores_are_the_samples() -> None:
    """The figures ``predict.transfer`` prints beside a prediction come from these rows:
    H200 → AMD (111 points, median signed TPOT error −37…−40 %, 89–95 % inside the interval)
    and the H200 → B200 long-output points' median |error| (8 %)."""
    import statistics

    import predict_score_inferencex as score

    from tokenwatt.predict.transfer import LONG_OUTPUT_SEEN, OTHER_VENDOR_SCORED

    rows = score.read_rows([FIXTURE, CROSS])
    per_pair = [score.score(rows, ("h200", t))[0] for t in ("mi300x", "mi325x", "mi355x")]
    assert sum(len(p) for p in per_pair) == 111
    medians = [statistics.median(r.tpot_err for r in p) for p in per_pair]
    assert [round(-m * 100) for m in (max(medians), min(medians))] == [37, 40]
    held = [sum(r.tpot_in_interval for r in p) / len(p) for p in per_pair]
    assert [round(h * 100) for h in (min(held), max(held))] == [89, 95]
    assert "111 points" in OTHER_VENDOR_SCORED and "37-40 % below" in OTHER_VENDOR_SCORED
    assert "89-95 %" in OTHER_VENDOR_SCORED
    long = [abs(r.tpot_err) for r in score.score(rows)[0] if r.long_output]
    assert round(statistics.median(long) * 100) == 8
    assert "median error 8 %" in LONG_OUTPUT_SEEN
