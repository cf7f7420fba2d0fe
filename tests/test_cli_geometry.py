"""`tokenwatt geometry` and `tokenwatt hardware` as a user runs them: real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
        check=False,
    )


def run_json(*args: str) -> Any:
    proc = run(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_deepseek_v3_json_total_within_a_tenth_of_a_percent() -> None:
    data = run_json("geometry", "deepseek-v3")
    assert abs(data["total_params"] - 671.0e9) / 671.0e9 < 0.001
    assert data["mtp_params"] == 11_610_068_224
    assert data["kv_bytes_per_token_full_context"] == 61 * 576 * 2
    assert "per_batch" not in data


def test_json_fields_are_the_geometry_field_names_with_integers() -> None:
    data = run_json("geometry", "qwen3-30b-a3b", "--batch", "1,8,64")
    for key in (
        "total_params", "active_params", "mtp_params", "embedding_params", "lm_head_params",
        "layers", "moe_layers", "experts", "experts_per_token", "shared_experts",
        "expert_params", "dense_weight_bytes", "expert_bytes", "kv_bytes_per_token_full_context",
    ):  # fmt: skip
        assert type(data[key]) is int, key
    assert data["tied_embeddings"] is False
    assert (data["weight_dtype"], data["kv_dtype"]) == ("bf16", "bf16")
    assert data["kv_bytes_per_token_full_context"] == 96 * 1024
    assert data["expert_params"] == 4_718_592
    assert data["kv_groups"] == [
        {"kind": "full", "layers": 48, "bytes_per_token": 98_304, "window": None}
    ]
    rows = data["per_batch"]
    assert [r["batch"] for r in rows] == [1, 8, 64]
    assert rows[0]["expected_unique_experts"] == pytest.approx(8.0)
    assert rows[2]["expected_unique_experts"] == pytest.approx(128 * (1 - (1 - 1 / 16) ** 64))
    for r in rows:
        assert type(r["weight_bytes_per_step"]) is int
        expect = data["dense_weight_bytes"] + 48 * r["expected_unique_experts"] * 9_437_184
        assert r["weight_bytes_per_step"] == round(expect)


@pytest.mark.parametrize(
    ("model", "total", "active", "rel"),
    [
        ("llama-3.1-8b", 8.03e9, None, 0.001),
        ("mixtral-8x7b", 46.7e9, 12.9e9, 0.002),
        ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),  # card rounds 3.35B down to 3.3B
        ("gpt-oss-20b", 20.9e9, None, 0.001),
    ],
)
def test_published_counts_through_the_cli(
    model: str, total: float, active: float | None, rel: float
) -> None:
    data = run_json("geometry", model)
    assert data["total_params"] == pytest.approx(total, rel=rel)
    if active is not None:
        assert data["active_params"] == pytest.approx(active, rel=rel)


def test_flags_reach_the_library() -> None:
    data = run_json(
        "geometry", "qwen3-30b-a3b", "--weights", "fp8", "--kv-dtype", "fp8",
        "--set", "layers=24", "--set", "name=half",
    )  # fmt: skip
    assert (data["weight_dtype"], data["kv_dtype"], data["layers"]) == ("fp8", "fp8", 24)
    assert data["name"] == "half"
    # 24 full-attention layers × 2 × 4 KV heads × 128 × 1 B (fp8)
    assert data["kv_bytes_per_token_full_context"] == 24 * 1024
    assert data["kv_bytes_per_token_all_layers"] == 24 * 1024  # no windowed layers
    fp8 = run_json("geometry", "qwen3-30b-a3b-fp8")
    assert data["expert_bytes"] == fp8["expert_bytes"]


def test_json_kv_per_token_of_gpt_oss() -> None:
    data = run_json("geometry", "gpt-oss-20b")
    # one layer: 2 × 8 KV heads × 64 × 2 B = 2,048 B; 12 full + 12 sliding (window 128) layers
    assert data["kv_bytes_per_token_full_context"] == 12 * 2048
    assert data["kv_bytes_per_token_all_layers"] == 24 * 2048


def test_table_output_is_readable() -> None:
    proc = run("geometry", "gpt-oss-20b", "--batch", "1,64")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in ("20.915 B", "mxfp4", "24.00 KiB", "window 128", "32 routed, top-4", "W(B)"):
        assert text in out, text


def test_config_path_argument(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 100, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), "utf-8")
    data = run_json("geometry", str(path))
    per_layer = 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    assert data["total_params"] == 2 * per_layer + 64 + 100 * 64
    assert data["kv_bytes_per_token_full_context"] == 2 * 2 * 2 * 16 * 2


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["geometry", "no-such-model"], "unknown model 'no-such-model'"),
        (["geometry", "qwen3-30b-a3b", "--set", "layers=0"], "layers=0"),
        (["geometry", "qwen3-30b-a3b", "--set", "oops"], "--set needs FIELD=VALUE"),
        (["geometry", "qwen3-30b-a3b", "--set", "flux=1"], "unknown override 'flux'"),
        (["geometry", "qwen3-30b-a3b", "--batch", "0,8"], "--batch takes positive"),
        (["geometry", "qwen3-30b-a3b", "--weights", "fp5"], "unknown weight dtype 'fp5'"),
        (["geometry", "qwen3-30b-a3b", "--kv-dtype", "mxfp4"], "kv dtype 'mxfp4' is not"),
        (["hardware", "tpu-v99"], "unknown accelerator 'tpu-v99'"),
    ],
)
def test_errors_are_one_line_exit_2(args: list[str], fragment: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert fragment in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{oops", "not valid JSON"),
        ('{"model_type": "llama"}', "has no hidden_size"),
        ('{"model_type": "llama", "hidden_size": 0}', "hidden_size must be ≥ 1"),
        ('{"model_type": "llama", "hidden_size": "big"}', "hidden_size must be an integer"),
        (
            '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, '
            '"vocab_size": 128256, "num_attention_heads": 32, "num_key_value_heads": 64, '
            '"intermediate_size": 14336}',
            "num_key_value_heads 64 does not divide num_attention_heads 32",
        ),
        (
            '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, '
            '"vocab_size": 128256, "num_attention_heads": 9223372036854775808}',
            "num_attention_heads 9223372036854775808 is beyond any real model",
        ),
        (
            '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, '
            '"vocab_size": 1e40, "num_attention_heads": 32}',
            "vocab_size 1e+40 is beyond any real model",
        ),
        ('{"model_type": "rwkv", "hidden_size": 768}', "model_type 'rwkv' is an attention-free"),
    ],
)
def test_bad_config_files_exit_2(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content, "utf-8")
    proc = run("geometry", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert fragment in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_hardware_list_and_one() -> None:
    proc = run("hardware")
    assert proc.returncode == 0, proc.stderr
    for name in ("h100-sxm", "h200", "b200", "mi300x", "gaudi3", "tpu-v6e", "l4"):
        assert name in proc.stdout
    one = run_json("hardware", "H100-SXM")
    assert one["name"] == "h100-sxm"
    assert one["bandwidth_bytes_per_s"] == 3.35e12
    assert one["source"]
    everything = run_json("hardware")
    assert {a["name"] for a in everything} >= {"a100-80gb", "mi355x", "tpu-v5p"}
    shown = run("hardware", "mi300x")
    assert shown.returncode == 0
    assert "5.300 TB/s" in shown.stdout
