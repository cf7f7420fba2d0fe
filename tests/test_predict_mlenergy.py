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
