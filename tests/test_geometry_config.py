"""Finding config.json (file, folder, HF cache, preset) and refusing bad ones in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.errors import GeometryError, TokenwattError
from tokenwatt.geometry import geometry_from_config, list_presets, load_geometry
from tokenwatt.geometry.config import hf_cache_dir

PRESETS = Path(__file__).resolve().parents[1] / "src" / "tokenwatt" / "geometry" / "presets"


def _preset_json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PRESETS / f"{name}.json").read_text("utf-8"))
    return data


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), "utf-8")
    return path


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub"


def test_presets_listed_and_case_insensitive() -> None:
    names = list_presets()
    for want in (
        "qwen3-30b-a3b",
        "llama-3.1-8b",
        "deepseek-v3",
        "gpt-oss-20b",
        "mixtral-8x7b-v0.1",
    ):
        assert want in names
    a = load_geometry("Qwen3-30B-A3B")
    b = load_geometry("qwen3_30b_a3b")
    assert a.total_params == b.total_params == 30_532_122_624
    assert a.name == "Qwen3-30B-A3B"
    assert (
        load_geometry("mixtral-8x7b").total_params
        == load_geometry("MIXTRAL-8x7B-v0.1").total_params
    )
    assert load_geometry("DeepSeek-R1").total_params == 671_026_419_200


def test_config_file_and_folder(tmp_path: Path) -> None:
    data = _preset_json("Llama-3.1-8B")
    cfg = _write(tmp_path / "my-llama" / "config.json", data)
    by_file = load_geometry(cfg)
    by_folder = load_geometry(str(tmp_path / "my-llama"))
    assert by_file.total_params == by_folder.total_params == 8_030_261_248
    assert by_file.name == by_folder.name == "my-llama"
    other = _write(tmp_path / "odd-name.json", data)
    assert load_geometry(other).name == "odd-name"


def test_hf_cache_lookup(hf_home: Path) -> None:
    repo = hf_home / "models--acme--tiny-llama"
    snap = "0123456789abcdef"
    data = _preset_json("Llama-3.1-8B") | {"num_hidden_layers": 2}
    _write(repo / "snapshots" / snap / "config.json", data)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(snap)
    assert hf_cache_dir() == hf_home
    g = load_geometry("acme/tiny-llama")
    assert g.layers == 2
    assert g.name == "acme/tiny-llama"
    assert snap in g.source


def test_hf_cache_without_refs_takes_a_snapshot(hf_home: Path) -> None:
    _write(
        hf_home / "models--acme--m" / "snapshots" / "abc" / "config.json",
        _preset_json("Qwen3-8B"),
    )
    assert load_geometry("acme/m").total_params == 8_190_735_360


def test_hf_hub_cache_env_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "ignored"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hf_cache_dir() == tmp_path / "cache"


def test_repo_id_not_cached_falls_back_to_bundled_preset(hf_home: Path) -> None:
    g = load_geometry("Qwen/Qwen3-30B-A3B")
    assert g.total_params == 30_532_122_624
    assert "not in the local HF cache" in g.source


def test_repo_id_unknown_everywhere(hf_home: Path) -> None:
    with pytest.raises(GeometryError, match="not in the local Hugging Face cache"):
        load_geometry("acme/does-not-exist")


def test_unknown_name_suggests_presets() -> None:
    with pytest.raises(GeometryError, match="did you mean qwen3-30b-a3b"):
        load_geometry("qwen3-30b-a3")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ("", "not valid JSON"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, "utf-8")
    with pytest.raises(GeometryError, match=match) as info:
        load_geometry(path)
    assert "\n" not in str(info.value)


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(GeometryError, match=r"has no config\.json"):
        load_geometry(tmp_path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(GeometryError, match="not UTF-8"):
        load_geometry(path)


BASE = _preset_json("Llama-3.1-8B")


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("num_hidden_layers", "config.json has no num_hidden_layers; set it with --set layers=N"),
        ("hidden_size", "has no hidden_size; set it with --set config.hidden_size=N"),
        ("vocab_size", "has no vocab_size"),
        ("num_attention_heads", "has no num_attention_heads"),
        ("intermediate_size", "has no intermediate_size"),
    ],
)
def test_missing_key_names_it_and_the_override(key: str, match: str) -> None:
    cfg = {k: v for k, v in BASE.items() if k != key}
    with pytest.raises(GeometryError, match=match):
        geometry_from_config(cfg, name="x")


def test_missing_key_fixed_by_the_named_override() -> None:
    cfg = {k: v for k, v in BASE.items() if k not in ("num_hidden_layers", "hidden_size")}
    g = geometry_from_config(cfg, name="x", overrides={"layers": 32, "config.hidden_size": "4096"})
    assert g.total_params == 8_030_261_248


def test_moe_without_top_k_names_the_override() -> None:
    cfg = _preset_json("Qwen3-30B-A3B")
    del cfg["num_experts_per_tok"]
    with pytest.raises(GeometryError, match="set it with --set experts_per_token=N"):
        geometry_from_config(cfg, name="x")
    assert geometry_from_config(
        cfg, name="x", overrides={"experts_per_token": 8}
    ).active_params == (3_353_032_704)


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"num_hidden_layers": 0}, "num_hidden_layers must be ≥ 1, got 0"),
        ({"hidden_size": -4096}, "hidden_size must be ≥ 1"),
        ({"hidden_size": "4096"}, "hidden_size must be an integer"),
        ({"hidden_size": 4096.5}, "hidden_size must be an integer"),
        ({"num_hidden_layers": True}, "num_hidden_layers must be an integer"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false"),
        ({"torch_dtype": "float7"}, "unknown torch_dtype"),
        ({"torch_dtype": 16}, "torch_dtype must be a string"),
        ({"model_type": 3}, "model_type must be a string"),
        ({"quantization_config": "fp8"}, "quantization_config must be an object"),
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "not supported"),
        ({"text_config": [1]}, "text_config must be an object"),
        ({"num_key_value_heads": 0}, "must be ≥ 1"),
        ({"hidden_size": 4095}, "not a multiple of num_attention_heads"),
    ],
)
def test_bad_values_fail_in_one_line(patch: dict[str, Any], match: str) -> None:
    with pytest.raises(GeometryError, match=match) as info:
        geometry_from_config({**BASE, **patch}, name="x")
    assert "\n" not in str(info.value)
    assert isinstance(info.value, TokenwattError)


def test_moe_inconsistent_top_k() -> None:
    cfg = _preset_json("Mixtral-8x7B-v0.1") | {"num_experts_per_tok": 9}
    with pytest.raises(GeometryError, match="9 experts per token but only 8 experts"):
        geometry_from_config(cfg, name="x")


def test_layer_types_length_mismatch() -> None:
    cfg = _preset_json("gpt-oss-20b") | {"num_hidden_layers": 23}
    with pytest.raises(GeometryError, match="layer_types lists 24 layers but the model has 23"):
        geometry_from_config(cfg, name="x")


def test_unknown_layer_type() -> None:
    cfg = _preset_json("gpt-oss-20b")
    cfg["layer_types"] = ["dilated_attention"] * 24
    with pytest.raises(GeometryError, match=r"'dilated_attention'.*--set kv_groups"):
        geometry_from_config(cfg, name="x")
    cfg["layer_types"] = ["linear_attention"] * 24  # a state-holding layer: refused as hybrid
    with pytest.raises(GeometryError, match="linear_attention layers: a hybrid"):
        geometry_from_config(cfg, name="x")


def test_not_a_mapping() -> None:
    with pytest.raises(GeometryError, match="must be a JSON object"):
        geometry_from_config([1, 2], name="x")  # type: ignore[arg-type]


def test_empty_source() -> None:
    with pytest.raises(GeometryError, match="no model given"):
        load_geometry("  ")


def test_implausible_layer_counts_fail_fast() -> None:
    with pytest.raises(GeometryError, match="implausible"):
        geometry_from_config({**BASE, "num_hidden_layers": 10**9}, name="x")
    with pytest.raises(GeometryError, match="implausible"):
        geometry_from_config({**BASE, "num_nextn_predict_layers": 10**9}, name="x")


def test_dtype_auto_counts_as_bf16_with_a_note() -> None:
    g = geometry_from_config({**BASE, "torch_dtype": "auto"}, name="x")
    assert g.weight_dtype == "bf16"
    assert any("torch_dtype" in n for n in g.notes)
