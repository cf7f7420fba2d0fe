"""``tokenwatt mbu``: the derivation as a calculator, checked against the hand calculation of
docs/methodology.md ("`tokenwatt mbu`: a published row by hand")."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tokenwatt import cli
from tokenwatt.geometry import load_geometry

PRESET = Path(__file__).resolve().parents[1] / "src/tokenwatt/geometry/presets/Llama-3.1-70B.json"
ROW = [
    "llama-3.1-70b",
    "--weights",
    "fp8",
    "--hardware",
    "h100-sxm",
    "--gpus",
    "2",
    "--concurrency",
    "4",
    "--tpot-ms",
    "17.41",
    "--input-tokens",
    "1024",
    "--output-tokens",
    "1024",
]


def _mbu(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    monkeypatch.setattr(sys, "argv", ["tokenwatt", "mbu", *args, "--json"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr()
    assert ended.value.code == 0, out.err
    return json.loads(out.out)


def _hand(ttft_s: float = 0.0) -> float:
    """The methodology's hand calculation, from config.json and the datasheet."""
    cfg = json.loads(PRESET.read_text())
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2
    assert kv_per_token == 327_680  # K and V, 80 layers, 8 heads of 128, bf16
    # W: a dense model reads every weight once per step, whatever B; FP8 = 1 byte each
    w = load_geometry("llama-3.1-70b", weight_dtype="fp8").dense_weight_bytes
    c, n, length, tpot = 4, 1024, 1024, 17.41e-3
    t = c * n / (ttft_s + (n - 1) * tpot)  # closed loop: C requests of n tokens per E2E
    context = length + (n - 1) / 2  # token i reads L + i cached tokens
    bytes_per_s = w / tpot + t * context * kv_per_token
    return bytes_per_s / (2 * 3.35e12)


def test_published_row_reproduces_the_hand_calculation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _mbu(monkeypatch, capsys, *ROW)
    assert data["mbu"] == pytest.approx(_hand(), rel=1e-12)
    assert round(data["mbu"], 4) == 0.6223  # the figure printed in the methodology
    assert data["mbu_decode_only"] == data["mbu"]  # dense, closed loop: one figure
    assert data["used"]["output_tokens_per_s"] == pytest.approx(229.98, abs=0.005)
    said = " ".join(data["assumptions"])
    assert "τ taken as TPOT" in said and "TTFT not given, taken as 0" in said
    assert "closed loop" in said and "fixed lengths" in said
    assert data["given"]["concurrency"] == 4 and data["hardware"]["gpus"] == 2


def test_a_given_ttft_lowers_t(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _mbu(monkeypatch, capsys, *ROW, "--ttft-ms", "250")
    assert data["mbu"] == pytest.approx(_hand(0.25), rel=1e-12)
    assert data["mbu"] < _hand()
    assert not any("TTFT not given" in a for a in data["assumptions"])


def test_open_loop_without_idle_gives_decode_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["llama-3.1-8b", "--hardware", "h100-sxm", "--output-tokens-per-s", "2000"]
    args += ["--itl-ms", "20", "--input-tokens", "512", "--output-tokens", "256"]
    data = _mbu(monkeypatch, capsys, *args)
    assert data["mbu"] is None and data["mbu_decode_only"] is not None
    assert any("only the decode-only" in a for a in data["assumptions"])
    assert data["used"]["request_rate_rps"] == pytest.approx(2000 / 256)
    assert data["detail"]["inputs"]["batch_per_replica"] == pytest.approx(40.0)


def test_moe_open_loop_with_idle_gives_headline_and_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["qwen3-30b-a3b", "--hardware", "h100-sxm", "--output-tokens-per-s", "400"]
    args += ["--itl-ms", "12", "--input-tokens", "2048", "--output-tokens", "128"]
    data = _mbu(monkeypatch, capsys, *args, "--idle-fraction", "0.1")
    assert data["mbu"] is not None and data["mbu"] >= data["mbu_decode_only"]
    assert any(f.startswith("small_batch") for f in data["flags"])
    assert any(f.startswith("moe_uniform_routing_upper_bound") for f in data["flags"])


def test_an_impossible_row_is_refused_not_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    row = [a if a != "2" else "1" for a in ROW]  # the same row claimed on one GPU
    row[row.index("17.41")] = "5"
    data = _mbu(monkeypatch, capsys, *row)
    assert data["mbu"] is None and data["mbu_decode_only"] is None
    assert data["notes"][0].startswith("MBU refused")


LENGTHS = ["--input-tokens", "9", "--output-tokens", "9"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hardware", "h100-sxm", "--concurrency", "4"], "--itl-ms"),
        (["--hardware", "h100-sxm", "--tpot-ms", "20"], "--input-tokens and --output-tokens"),
        (
            ["--hardware", "h100-sxm", "--tpot-ms", "20", *LENGTHS],
            "--output-tokens-per-s",
        ),
        (["--tpot-ms", "20"], "--hardware NAME"),
        (["--hardware", "h100-sxm", "--gpus", "0"], "--gpus"),
        (
            ["--hardware", "h100-sxm", "--tpot-ms", "-1", "--concurrency", "2"],
            "--tpot-ms must be > 0",
        ),
    ],
)
def test_missing_inputs_are_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setattr(sys, "argv", ["tokenwatt", "mbu", "llama-3.1-8b", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    err = capsys.readouterr().err
    assert ended.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_terminal_view_prints_inputs_and_assumptions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["tokenwatt", "mbu", *ROW])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr().out
    assert ended.value.code == 0
    assert "62.2%" in out and "229.98" in out and "assumed: τ taken as TPOT" in out


def test_requests_file_gives_the_probe_s_own_context(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--requests takes the exact lengths of a TokenWatt run: with that probe's T and τ the
    calculator reads the same mean context and KV bytes the probe derived."""
    from tokenwatt.result import load_result

    folder = Path(__file__).parent / "fixtures" / "peers" / "tokenwatt_sim_probe"
    p = load_result(folder).probes[0]
    assert p.mbu_detail is not None and p.itl_token_weighted_s is not None
    args = ["llama-3.1-8b", "--hardware", "h100-sxm", "--requests", str(folder / "requests.jsonl")]
    args += ["--output-tokens-per-s", str(p.output_tokens_per_s)]
    args += ["--itl-ms", str(p.itl_token_weighted_s * 1e3)]
    data = _mbu(monkeypatch, capsys, *args)
    d = data["detail"]["inputs"]
    assert d["mean_context_per_token"] == pytest.approx(p.mean_context_per_token, rel=1e-12)
    assert d["kv_bytes_per_s"] == pytest.approx(p.mbu_detail.inputs.kv_bytes_per_s, rel=1e-9)
    assert data["used"]["mean_output_tokens"] == 64


BASE = ["--hardware", "h100-sxm", "--concurrency", "4", "--tpot-ms", "17", *LENGTHS]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--concurrency", "1e308"),
        ("--tpot-ms", "inf"),
        ("--input-tokens", "1e300"),
        ("--output-tokens", "1e300"),
        ("--ttft-ms", "1e300"),
        ("--output-tokens-per-s", "1e300"),
        ("--max-output-tokens", "1e300"),
    ],
)
def test_overflowing_figures_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    args = list(BASE)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    monkeypatch.setattr(sys, "argv", ["tokenwatt", "mbu", "llama-3.1-8b", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    err = capsys.readouterr().err
    assert ended.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{flag} must be a finite number up to" in err


def test_every_output_names_its_dtypes_lengths_and_regime(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["tokenwatt", "mbu", *ROW])
    with pytest.raises(SystemExit):
        cli.main()
    out = capsys.readouterr().out
    # FP8 weights were given; the KV dtype was not: said, with the flag that changes it
    assert "dtypes: weights fp8 (given), KV bf16 (not given" in out and "--kv-dtype" in out
    assert "lengths: fixed (1024 → 1024 tokens, every request)" in out
    assert "regime: closed loop at concurrency 4" in out
    data = _mbu(monkeypatch, capsys, *ROW, "--kv-dtype", "fp8")
    assert data["assumed"]["kv_dtype"] == "fp8" and data["assumed"]["kv_dtype_given"]
    assert data["assumed"]["regime"].startswith("closed loop")
    assert data["assumed"]["tau_from"] == "tpot_fixed"


def test_mean_lengths_make_a_flagged_band_with_the_maxima_on_top(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = _mbu(monkeypatch, capsys, *ROW)
    band = _mbu(
        monkeypatch, capsys, *ROW, "--max-input-tokens", "2048", "--max-output-tokens", "2048"
    )
    # the band's lower end is the fixed-length figure, flagged as a lower bound
    assert band["mbu"] == pytest.approx(fixed["mbu"], rel=1e-12)
    assert any(f.startswith("kv_lengths_from_means: lower bound") for f in band["flags"])
    assert any(f.startswith("tau_from_tpot: reads high") for f in band["flags"])
    # the top: KV at one request of 2048 → 2048 (context 2048 + 2047/2), by hand
    i = fixed["detail"]["inputs"]
    kv_per_cached = i["kv_bytes_per_output_token"] / i["mean_context_per_token"]
    extra = i["output_tokens_per_s"] * (2048 + 2047 / 2 - 1535.5) * kv_per_cached
    upper = fixed["mbu"] + extra / i["node_bandwidth_bytes_per_s"]
    assert band["detail"]["mbu_lengths_upper_bound"] == pytest.approx(upper, rel=1e-9)
