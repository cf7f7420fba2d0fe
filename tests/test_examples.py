"""Every example spec loads, names a model and accelerator that resolve, and builds what it
needs: the simulator's configuration, or a URL the client accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.geometry import load_geometry
from tokenwatt.load.target import resolve_accelerator, sim_config
from tokenwatt.spec import load_spec
from tokenwatt.traffic.workload import resolve_prompt_format

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"sim-moe-h100.yaml", "vllm-h100x8.yaml", "llamacpp.yaml"} <= names
    assert "mlperf-interactive.yaml" in names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads_and_resolves(path: Path) -> None:
    spec = load_spec(path)
    m = spec.model
    geometry = load_geometry(
        m.source, weight_dtype=m.weight_dtype, kv_dtype=m.kv_dtype, overrides=m.overrides or None
    )
    assert geometry.dense_weight_bytes > 0
    acc = resolve_accelerator(spec.hardware)
    assert acc.bandwidth_bytes_per_s > 0
    resolve_prompt_format(spec)  # no contradiction between api, prompt format and dataset
    if spec.endpoint.is_sim:
        cfg = sim_config(spec)
        assert cfg.geometry.name == geometry.name
        assert cfg.replicas == spec.hardware.replicas
    else:
        assert spec.endpoint.url.startswith("http://127.0.0.1")


def test_example_specifics() -> None:
    by_name = {p.name: load_spec(p) for p in EXAMPLES}
    moe = by_name["sim-moe-h100.yaml"]
    assert load_geometry(moe.model.source).is_moe
    vllm = by_name["vllm-h100x8.yaml"]
    assert vllm.endpoint.api_key_env == "VLLM_API_KEY"
    assert resolve_prompt_format(vllm) == "token_ids"
    assert (vllm.hardware.gpus, vllm.hardware.replicas) == (8, 2)
    assert resolve_prompt_format(by_name["llamacpp.yaml"]) == "text"
    mlperf = by_name["mlperf-interactive.yaml"].slo
    assert (mlperf.ttft_ms, mlperf.tpot_ms, mlperf.percentile) == (500, 30, 0.99)
