"""``tokenwatt predict``: its two inputs (a result folder, a CSV of published rows), its
refusals (one line, exit 2) and the shape of ``--json``, against the simulator's truth and a
hand calculation."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from test_predict import BATCHES, EFFICIENCY, OUTPUT, PROMPT, sim_run
from tokenwatt import cli
from tokenwatt.hardware import get_accelerator

RESULT = Path(__file__).parent / "fixtures" / "report" / "probe-v2"
# a short replay and an SLO the simulated B200 crosses at a low rate keep the replays quick
QUICK = ("--replay-requests", "60", "--slo-ttft-ms", "100", "--slo-tpot-ms", "7.5")
FIELDS = ["model", "hardware", "gpus", "batch", "tpot_ms", "input_tokens", "output_tokens",
          "power_w", "prompt_tokens_per_step"]  # fmt: skip


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["tokenwatt", "predict", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr()
    return int(ended.value.code or 0), out.out, out.err


def _rows_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _sim_rows() -> list[dict[str, Any]]:
    rows = []
    for b in BATCHES:
        p = sim_run("llama-3.1-8b", "h100-sxm", b).point
        assert p.power_w_per_gpu is not None
        rows.append({
            "model": "llama-3.1-8b", "hardware": "h100-sxm", "gpus": 1, "batch": b,
            "tpot_ms": p.step_s * 1e3, "input_tokens": PROMPT, "output_tokens": OUTPUT,
            "power_w": p.power_w_per_gpu,
            "prompt_tokens_per_step": 0,  # the closed batch's prompts all ran before decode
        })  # fmt: skip
    return rows


def test_published_rows_predict_the_b200_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _rows_csv(tmp_path / "rows.csv", _sim_rows())
    rc, out, err = _run(monkeypatch, capsys, str(path), "--to", "b200", "--json", *QUICK)
    assert rc == 0, err
    data = json.loads(out)
    assert data["kind"] == "PREDICTED"
    assert data["target"]["accelerator"] == "b200"
    assert data["calibration"]["efficiency"] == pytest.approx(EFFICIENCY, rel=0.02)
    assert data["transfer_error"] == pytest.approx(0.11)  # short outputs, another accelerator
    assert data["assumptions"] == []  # no TP change: nothing held fixed to say
    assert len(data["points"]) == len(BATCHES)
    for point, b in zip(data["points"], BATCHES, strict=True):
        truth = sim_run("llama-3.1-8b", "b200", b)
        pred = point["predicted"]
        assert set(pred) >= {"tpot_ms", "interval", "output_tokens_per_s", "tokens_per_joule"}
        assert pred["tpot_ms"] == pytest.approx(truth.point.step_s * 1e3, rel=0.03)
        lo, hi = pred["interval"]["tpot_ms"]
        assert lo < truth.point.step_s * 1e3 < hi
        assert pred["tokens_per_joule"] == pytest.approx(truth.tokens_per_joule, rel=0.03)
        assert pred["interval"]["level"] == 0.95
        # 96-token outputs moved to another accelerator: the short-output held-out figures
        assert pred["interval"]["transfer_error"] == pytest.approx(0.11)
        assert pred["interval"]["power_transfer_error"] == pytest.approx(0.37)


def test_result_folder_single_point_by_hand(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One probe: floor 0, so τ' = τ × x'/x, x = bytes ÷ bandwidth + prompt FLOPs ÷ peak,
    every figure read from the fixture's own MBU inputs."""
    raw = json.loads((RESULT / "result.json").read_text())
    i = raw["probes"][0]["mbu_detail"]["inputs"]
    mixed = i["mixed_steps"]
    nbytes = i["weight_bytes_per_step"] + i["kv_bytes_per_s"] / i["steps_per_s_per_replica"]
    flops = (
        2
        * raw["geometry"]["active_params"]
        * mixed["prompts_per_step"]
        * (mixed["uncached_prompt_tokens"])
    )
    h100, b200 = get_accelerator("h100-sxm"), get_accelerator("b200")
    x_src = nbytes / h100.bandwidth_bytes_per_s + flops / h100.bf16_dense_flops
    x_dst = nbytes / b200.bandwidth_bytes_per_s + flops / b200.bf16_dense_flops
    rc, out, err = _run(monkeypatch, capsys, str(RESULT), "--to", "b200", "--json")
    assert rc == 0, err
    data = json.loads(out)
    (point,) = data["points"]
    measured = point["measured"]["tpot_ms"]
    assert measured == pytest.approx(i["itl_token_weighted_s"] * 1e3, rel=1e-9)
    assert point["predicted"]["tpot_ms"] == pytest.approx(measured * x_dst / x_src, rel=1e-9)
    assert data["calibration"]["floor_ms"] == 0.0
    assert any("floor is taken as 0" in n for n in data["calibration"]["notes"])
    # the fixture's energy is marked invalid: no tokens/J is predicted from it
    assert point["predicted"]["tokens_per_joule"] is None


def test_terminal_output_is_marked_predicted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = _run(monkeypatch, capsys, str(RESULT), "--to", "h200")
    assert rc == 0
    assert "PREDICTED on NVIDIA H200" in out
    assert "calibration: efficiency" in out
    # the fixture's probe predates the per-probe run record: nothing to replay, and it says so
    assert "PREDICTED serving" not in out
    assert "not replayed (probe 1)" in " ".join(out.split())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--to", "zz-9000"], "unknown accelerator 'zz-9000'"),
        (["--to", "b200", "--source-missing"], "No such option"),
    ],
)
def test_refusals_on_the_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    args: list[str], needle: str,
) -> None:  # fmt: skip
    rc, out, err = _run(monkeypatch, capsys, str(RESULT), *args)
    assert rc == 2
    assert needle in err
    assert "Traceback" not in err + out


def test_refusals_on_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _run(monkeypatch, capsys, str(tmp_path / "nope"), "--to", "b200")
    assert rc == 2
    assert "no such file or folder" in err
    rows = _sim_rows()[:2]
    for r in rows:
        del r["tpot_ms"]
    rc, _, err = _run(monkeypatch, capsys, str(_rows_csv(tmp_path / "a.csv", rows)), "--to", "b200")
    assert rc == 2
    assert "tpot_ms" in err and len(err.strip().splitlines()) == 1
    rows = _sim_rows()[:2]
    rows[1]["model"] = "qwen3-8b"
    rc, _, err = _run(monkeypatch, capsys, str(_rows_csv(tmp_path / "b.csv", rows)), "--to", "b200")
    assert rc == 2
    assert "one model on one accelerator" in err
    rows = _sim_rows()[:1]
    del rows[0]["batch"]  # no batch, throughput or concurrency: B cannot be had
    rc, _, err = _run(monkeypatch, capsys, str(_rows_csv(tmp_path / "d.csv", rows)), "--to", "b200")
    assert rc == 2
    assert "row 2: give batch, output_tokens_per_s or concurrency" in err
    rows = _sim_rows()[:1]
    rows[0]["tpot_ms"] = "-3"
    rc, _, err = _run(monkeypatch, capsys, str(_rows_csv(tmp_path / "c.csv", rows)), "--to", "b200")
    assert rc == 2
    assert "line 2: tpot_ms" in err


def test_json_names_the_served_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stable names for the replayed figures; $/Mtok is the price over the predicted goodput."""
    path = _rows_csv(tmp_path / "rows.csv", _sim_rows()[:2])
    rc, out, err = _run(
        monkeypatch, capsys, str(path), "--to", "b200", "--json", "--price-per-gpu-hour", "4",
        *QUICK,
    )  # fmt: skip
    assert rc == 0, err
    data = json.loads(out)
    assert data["price_per_gpu_hour"] == 4.0
    assert data["slo"]["ttft_ms"] == 100 and data["slo"]["tpot_ms"] == 7.5
    names = ("ttft_ms", "ttft_p99_ms", "boundary_rps", "goodput_tok_s", "usd_per_mtok")
    for point in data["points"]:
        pred = point["predicted"]
        assert pred["replay_rate_rps"] > 0 and isinstance(pred["slo_passed"], bool)
        assert pred["slo_passed"]  # TPOT 6.6 ms against 7.5 ms on the simulated B200
        for name in names:
            lo, hi = pred["interval"][name]
            assert lo <= pred[name] and (hi is None or pred[name] <= hi), name
        # the slow end of the interval (TPOT 8.1 ms) misses the TPOT limit: no good token,
        # so the boundary's and goodput's low ends are 0 and the cost's high end unbounded
        assert pred["interval"]["goodput_tok_s"][0] == 0.0
        assert pred["interval"]["usd_per_mtok"][1] is None
        assert pred["boundary_rps"] > pred["replay_rate_rps"]
        assert pred["usd_per_mtok"] == pytest.approx(4 / 3600 / pred["goodput_tok_s"] * 1e6)


def test_without_a_price_no_cost_is_made_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _rows_csv(tmp_path / "rows.csv", _sim_rows()[:1])
    rc, out, err = _run(monkeypatch, capsys, str(path), "--to", "b200", "--json", *QUICK)
    assert rc == 0, err
    (point,) = json.loads(out)["points"]
    assert point["predicted"]["usd_per_mtok"] is None
    assert point["predicted"]["interval"]["usd_per_mtok"] is None
    assert point["predicted"]["ttft_ms"] > 0


def test_a_weight_dtype_change_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fitted efficiency belongs to the source's kernels: FP8 weights on the target are
    refused by name; the source's own dtype in another spelling passes; an unknown one is
    named."""
    from tokenwatt.result import load_result

    geometry = load_result(RESULT).geometry
    assert geometry is not None and geometry.weight_dtype == "bf16"
    rc, out, err = _run(monkeypatch, capsys, str(RESULT), "--to", "b200",
                        "--to-weight-dtype", "fp8", "--json")  # fmt: skip
    assert rc == 2
    assert len(err.strip().splitlines()) == 1
    assert "--to-weight-dtype fp8: the source ran bf16 weights" in err
    assert "not modelled" in err and "Traceback" not in err + out
    rc, out, err = _run(monkeypatch, capsys, str(RESULT), "--to", "b200",
                        "--to-weight-dtype", "bfloat16", "--json", *QUICK)  # fmt: skip
    assert rc == 0, err
    assert json.loads(out)["kind"] == "PREDICTED"
    rc, _, err = _run(monkeypatch, capsys, str(RESULT), "--to", "b200",
                      "--to-weight-dtype", "fp7")  # fmt: skip
    assert rc == 2
    assert "unknown --to-weight-dtype 'fp7'" in err


def test_a_tensor_parallel_change_is_stated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--to-gpus 2 from a one-GPU source: the JSON and the terminal say that the bytes split
    and the all-reduce is not modelled."""
    rc, out, err = _run(monkeypatch, capsys, str(RESULT), "--to", "b200", "--to-gpus", "2",
                        "--json", *QUICK)  # fmt: skip
    assert rc == 0, err
    said, long = json.loads(out)["assumptions"]
    assert said.startswith("tensor parallel 1 -> 2 GPUs per replica")
    # the fixture records no output length: taken as long, and said so
    assert long.startswith("long outputs (a mean of 2,048 tokens or more, or not known)")
    assert "all-reduce" in said and "not modelled" in said
    rc, out, err = _run(monkeypatch, capsys, str(RESULT), "--to", "b200", "--to-gpus", "2",
                        *QUICK)  # fmt: skip
    assert rc == 0, err
    assert "note: tensor parallel 1 -> 2" in " ".join(out.split())


def test_another_vendor_is_stated_with_the_scored_direction(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An H100 source to an MI300X: the JSON and the terminal say that the kernels change and
    which way the one public cross-vendor score found the prediction off; the other direction
    says it was not scored; the same vendor says nothing of vendors."""
    from tokenwatt.predict.transfer import assumptions

    rc, out, err = _run(monkeypatch, capsys, str(RESULT), "--to", "mi300x", "--json", *QUICK)
    assert rc == 0, err
    said, long = json.loads(out)["assumptions"]
    assert said.startswith("another vendor (nvidia -> amd)")
    assert "the prediction read fast" in long
    assert "read fast" in said and "37-40 %" in said
    rc, out, err = _run(monkeypatch, capsys, str(RESULT), "--to", "mi300x", *QUICK)
    assert rc == 0, err
    assert "note: another vendor (nvidia -> amd)" in " ".join(out.split())
    h100, mi300x = get_accelerator("h100-sxm"), get_accelerator("mi300x")
    (back,) = assumptions([], None, mi300x, h100)
    assert back.endswith("no public pair in this direction was scored")
    assert assumptions([], None, h100, get_accelerator("b200")) == []


def test_long_outputs_moved_are_stated_with_the_held_out_direction() -> None:
    """A point of 4,000 output tokens moved to another accelerator gets the long-output line
    (the held-out direction, and where it did not hold); 96 tokens, or the same accelerator,
    do not."""
    import dataclasses

    from tokenwatt.predict.transfer import LONG_OUTPUT_SEEN, assumptions

    point = dataclasses.replace(sim_run("llama-3.1-8b", "h100-sxm", 8).point, output_tokens=OUTPUT)
    long = dataclasses.replace(point, output_tokens=4000.0)
    h100, b200 = get_accelerator("h100-sxm"), get_accelerator("b200")
    (said,) = assumptions([point, long], None, h100, b200)
    assert said.endswith(LONG_OUTPUT_SEEN) and "1.4-4 times slower" in said
    assert assumptions([point], None, h100, b200) == []
    assert assumptions([long], None, h100, h100) == []
