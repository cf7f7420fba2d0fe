"""The names the simulator answers to, over real HTTP on loopback: a preset served under its own
name also answers to its Hugging Face ids and aliases (what a user passes to ``bench``), a
model it does not simulate gets vLLM's 404, and ``--served-model-name`` serves that name alone."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.sim import RunningSim, SimConfig, start_sim_thread
from tokenwatt.sim.names import accepts_model, served_names


def _config(served: str = "") -> SimConfig:
    return SimConfig(
        geometry=load_geometry("llama-3.1-8b"),
        accelerator=get_accelerator("h100-sxm"),
        output_len="fixed:2",
        served_model_name=served,
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with start_sim_thread(_config()) as running:
        yield running


def _complete(sim: RunningSim, model: str) -> tuple[int, Any]:
    body = json.dumps({"model": model, "prompt": "a b c", "max_tokens": 2}).encode()
    req = urllib.request.Request(
        sim.url + "/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _models(sim: RunningSim) -> list[dict[str, Any]]:
    with urllib.request.urlopen(sim.url + "/models", timeout=20) as resp:
        data: list[dict[str, Any]] = json.loads(resp.read())["data"]
    return data


def test_models_list_the_hf_ids_after_the_served_name(sim: RunningSim) -> None:
    cards = _models(sim)
    ids = [c["id"] for c in cards]
    assert ids[0] == "Llama-3.1-8B"  # a client naming no model takes the first
    assert "meta-llama/Llama-3.1-8B-Instruct" in ids and "llama-3.1-8b" in ids
    assert {c["owned_by"] for c in cards} == {"tokenwatt-sim"}
    assert {c["root"] for c in cards} == {"Llama-3.1-8B"}


@pytest.mark.parametrize(
    "name",
    ["meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", "Meta-Llama-3.1-8B-Instruct",
     "someorg/llama-3.1-8b-instruct", "Llama-3.1-8B"],
)  # fmt: skip
def test_a_name_of_the_same_preset_is_served(sim: RunningSim, name: str) -> None:
    status, body = _complete(sim, name)
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("name", ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-70B-Instruct", "x"])
def test_another_model_is_refused_as_vllm_refuses_it(sim: RunningSim, name: str) -> None:
    status, body = _complete(sim, name)
    assert status == 404
    assert name in body["error"]["message"]


def test_an_explicit_served_name_is_the_only_name() -> None:
    cfg = _config("my-llama")
    assert served_names(cfg.served_model_name, cfg.geometry) == ("my-llama",)
    assert not accepts_model("meta-llama/Llama-3.1-8B-Instruct", "my-llama", cfg.geometry)
    with start_sim_thread(cfg) as running:
        assert [c["id"] for c in _models(running)] == ["my-llama"]
        assert _complete(running, "llama-3.1-8b")[0] == 404
        assert _complete(running, "my-llama")[0] == 200


def test_a_config_file_model_gets_no_preset_names(tmp_path: Any) -> None:
    """A config.json that happens to be named like a preset is not the preset."""
    src = load_geometry("llama-3.1-8b")
    cfg_dir = tmp_path / "Llama-3.1-8B"
    cfg_dir.mkdir()
    from importlib.resources import files

    text = (files("tokenwatt.geometry") / "presets" / "Llama-3.1-8B.json").read_text("utf-8")
    (cfg_dir / "config.json").write_text(text, "utf-8")
    g = load_geometry(str(cfg_dir))
    assert g.name == src.name and not g.source.startswith("preset")
    assert served_names(g.name, g) == (g.name,)
    assert not accepts_model("meta-llama/Llama-3.1-8B-Instruct", g.name, g)
