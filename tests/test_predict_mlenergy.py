"""ML.ENERGY leaderboard files as published rows, checked against the raw file's figures, and
the score's rule that nothing scored is fitted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tokenwatt.hardware import get_accelerator
from tokenwatt.predict import PredictError, Target, calibrate, points_from_rows, predict_points
from tokenwatt.predict.mlenergy import read_mlenergy, to_row

FIXTURES = Path(__file__).parent / "fixtures" / "public" / "mlenergy"
LLAMA_8B = FIXTURES / "meta-llama__Llama-3.1-8B-Instruct__lm-arena-chat.json"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_reader_keeps_the_published_figures() -> None:
    model_id, configs = read_mlenergy(LLAMA_8B)
    assert model_id == "meta-llama/Llama-3.1-8B-Instruct"
    raw = json.loads(LLAMA_8B.read_text())["configurations"]
    assert len(configs) == len(raw) == 20
    (c,) = [c for c in configs if c.gpu_model == "H100" and c.max_num_seqs == 128]
    assert c.median_itl_ms == pytest.approx(16.482017002999783)
    row = to_row(c, "llama-3.1-8b", 1024.0)
    assert row.hardware == "h100-sxm" and row.gpus == 1 and row.replicas == 1
    assert row.batch == pytest.approx(127.62)
    assert row.tpot_ms == pytest.approx(16.482017002999783)
    assert row.power_w == pytest.approx(669.2439022030471)
    # energy per token published beside the power: the two agree (tokens/J = T ÷ P)
    assert c.energy_per_token_joules == pytest.approx(
        c.avg_power_watts / c.output_throughput_tokens_per_sec, rel=1e-9
    )
    (point,) = points_from_rows([row])
    assert point.power_w_per_gpu == pytest.approx(669.2439022030471)
    assert point.prefill_flops_per_step == pytest.approx(
        2 * 8_030_261_248 * 127.62 * 1024 / c.avg_output_len, rel=1e-3
    )


def test_reader_refuses_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"configurations": [{"gpu_model": "H100"}]}')
    with pytest.raises(PredictError, match=r"not an ML\.ENERGY leaderboard file"):
        read_mlenergy(bad)
    with pytest.raises(PredictError, match=r"not an ML\.ENERGY"):
        read_mlenergy(tmp_path / "missing.json")


def test_the_score_fits_on_h100_rows_only() -> None:
    """The hardware score's calibration is the same with every B200 row removed."""
    import predict_score

    _, configs = read_mlenergy(LLAMA_8B)
    h100_only = [c for c in configs if c.gpu_model == "H100"]
    a = predict_score._hardware("f", "llama-3.1-8b", configs)
    assert a, "the sample has H100 ↔ B200 pairs"
    pts = predict_score._points("llama-3.1-8b", h100_only)
    cal = calibrate(pts)
    # every scored B200 point is predicted from that calibration: rebuild one by hand
    b200 = next(c for c in configs if c.gpu_model == "B200" and c.max_num_seqs == a[0].seqs)
    src = [p for p, c in zip(pts, h100_only, strict=True) if c.max_num_seqs == a[0].seqs]
    (pred,) = predict_points(
        cal, src[:1], Target(get_accelerator("b200")), source=get_accelerator("h100-sxm")
    )
    assert a[0].tpot_err == pytest.approx(pred.tpot_s * 1e3 / b200.median_itl_ms - 1, rel=1e-12)


def test_context_of_a_generated_token_weighs_long_outputs_by_length() -> None:
    """Requests of 3 tokens (eleven of them) and of 11 tokens (three): the KV the row's steps
    read is the geometry's own per-request sum over those requests, per generated token."""
    from tokenwatt.geometry import load_geometry
    from tokenwatt.predict import PublishedRow
    from tokenwatt.predict.mlenergy import LengthHistogram

    hist = LengthHistogram(bins=[2, 4, 10, 12], counts=[11, 0, 3])  # midpoints 3, 7, 11
    # hand: tokens 11·3 + 3·11 = 66; earlier-token pairs 11·3 + 3·55 = 198; 198 ÷ 66 = 3
    assert hist.context_offset_tokens() == pytest.approx(3.0, rel=1e-12)
    geom = load_geometry("llama-3.1-8b")
    lengths = [3] * 11 + [11] * 3
    truth = sum(geom.kv_bytes_read_sum(1024, n) for n in lengths) / sum(lengths)
    row = PublishedRow(
        model="llama-3.1-8b", hardware="h100-sxm", gpus=1, tpot_ms=10.0, input_tokens=1024,
        output_tokens=66 / 14, batch=8, context_tokens=1024 + hist.context_offset_tokens(),
    )  # fmt: skip
    (point,) = points_from_rows([row])
    assert point.kv_bytes_per_step == pytest.approx(8 * truth, rel=1e-12)
    # the mean-length rule, input + output ÷ 2, reads fewer bytes than those requests did
    (mean_rule,) = points_from_rows([row.model_copy(update={"context_tokens": None})])
    assert mean_rule.kv_bytes_per_step < 0.9995 * point.kv_bytes_per_step


def test_reader_takes_the_published_length_histogram() -> None:
    """Each configuration's histogram mean is its published mean output length within half a
    bin; the row's context is input + Σ n(n−1)/2 ÷ Σ n over the histogram."""
    _, configs = read_mlenergy(LLAMA_8B)
    for c in configs:
        h = c.output_length_distribution
        assert h is not None
        mids = [(a + b) / 2 for a, b in zip(h.bins, h.bins[1:], strict=False)]
        mean = sum(k * m for k, m in zip(h.counts, mids, strict=True)) / sum(h.counts)
        assert abs(mean - c.avg_output_len) <= (h.bins[1] - h.bins[0]) / 2
        pairs = sum(k * m * (m - 1) / 2 for k, m in zip(h.counts, mids, strict=True))
        row = to_row(c, "llama-3.1-8b", 1024.0)
        assert row.context_tokens == pytest.approx(1024 + pairs / (mean * sum(h.counts)))
        # lengths vary, so the per-token context exceeds input + mean output ÷ 2
        assert row.context_tokens > 1024 + c.avg_output_len / 2


def test_reader_refuses_a_broken_histogram(tmp_path: Path) -> None:
    doc = json.loads(LLAMA_8B.read_text())
    doc["configurations"][0]["output_length_distribution"] = {"bins": [1, 2], "counts": [1, 1]}
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(PredictError, match=r"output_length_distribution.*one longer") as err:
        read_mlenergy(bad)
    assert "\n" not in str(err.value)
    doc["configurations"][0]["output_length_distribution"] = {"bins": [4, 2], "counts": [1]}
    bad.write_text(json.dumps(doc))
    with pytest.raises(PredictError, match=r"increasing"):
        read_mlenergy(bad)


def test_a_rows_csv_carries_the_context_column(tmp_path: Path) -> None:
    """``context_tokens`` in a CSV of published rows sets the KV context; a bad value is
    refused in one line naming the line and the column."""
    from tokenwatt.geometry import load_geometry
    from tokenwatt.predict import read_rows_csv

    path = tmp_path / "rows.csv"
    head = "model,hardware,gpus,batch,tpot_ms,input_tokens,output_tokens,context_tokens\n"
    path.write_text(head + "llama-3.1-8b,h100-sxm,1,16,12.5,1000,600,1450\n")
    (point,) = points_from_rows(read_rows_csv(path))
    kv = load_geometry("llama-3.1-8b").kv_bytes_read(1450)
    assert point.kv_bytes_per_step == pytest.approx(16 * kv, rel=1e-12)
    path.write_text(head + "llama-3.1-8b,h100-sxm,1,16,12.5,1000,600,-5\n")
    with pytest.raises(PredictError, match=r"line 2: context_tokens") as err:
        read_rows_csv(path)
    assert "\n" not in str(err.value)
