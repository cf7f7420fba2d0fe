"""Hand-built geometries and configs shared by the simulator tests (no parser involved)."""

from __future__ import annotations

from typing import Any

from tokenwatt.geometry.model import KVGroup, ModelGeometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.sim import SimConfig

H100 = get_accelerator("h100-sxm")  # 3.35e12 B/s, 989.4e12 BF16 FLOP/s, 700 W


def geometry(
    *,
    name: str = "toy",
    dense_weight_bytes: int = 1_000_000_000,
    active_params: int = 500_000_000,
    groups: tuple[KVGroup, ...] = (KVGroup("full", 16, 65536),),
    moe_layers: int = 0,
    experts: int = 0,
    experts_per_token: int = 0,
    expert_bytes: int = 0,
) -> ModelGeometry:
    return ModelGeometry(
        name=name,
        model_type="test",
        total_params=active_params,
        active_params=active_params,
        mtp_params=0,
        embedding_params=0,
        lm_head_params=0,
        tied_embeddings=False,
        layers=16,
        moe_layers=moe_layers,
        experts=experts,
        experts_per_token=experts_per_token,
        shared_experts=0,
        expert_params=expert_bytes // 2,
        weight_dtype="bf16",
        kv_dtype="bf16",
        dense_weight_bytes=dense_weight_bytes,
        expert_bytes=expert_bytes,
        kv_bytes_per_token_full_context=sum(g.bytes_per_token for g in groups),
        kv_groups=groups,
    )


def config(geom: ModelGeometry | None = None, **kw: Any) -> SimConfig:
    base: dict[str, Any] = {
        "geometry": geom or geometry(),
        "accelerator": H100,
        "max_model_len": 4096,
        "kv_cache_gib": 4e9 / 2**30,
        "prefill_cost": False,
    }
    base.update(kw)
    return SimConfig(**base)


def test_hand_built_geometry_is_self_consistent() -> None:
    g = geometry(groups=(KVGroup("full", 8, 1000), KVGroup("sliding", 8, 500, window=4)))
    assert g.kv_bytes_per_token_full_context == 1500
    assert g.kv_bytes_read(10) == 10 * 1000 + 4 * 500
