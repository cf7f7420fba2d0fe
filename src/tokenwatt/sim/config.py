"""Everything that defines one simulated node, checked once, with the derived constants.

A ``SimConfig`` is plain data so that it can travel to a child process as JSON
(``to_dict``/``from_dict``); ``SimConfig.derive()`` turns it into the numbers the engine
uses on every step (KV blocks, seconds per byte, seconds per prefill token, power).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from tokenwatt.errors import SpecError
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator

__all__ = ["BLOCK_SIZE", "Derived", "OutputLength", "SimConfig", "parse_output_len"]

BLOCK_SIZE = 16  # tokens per KV block, as in vLLM
KV_MEMORY_FRACTION = 0.9  # share of HBM the engine may use (vLLM's gpu_memory_utilization)


@dataclass(frozen=True, slots=True)
class OutputLength:
    """How long a request runs when ``ignore_eos`` is false (always capped by max_tokens).

    ``max``: until max_tokens; ``fixed``: a; ``uniform``: integer uniform in [a, b];
    ``geometric``: geometric with mean a (at least 1 token), like an EOS that is equally
    likely after every token.
    """

    kind: str
    a: float = 0.0
    b: float = 0.0


def parse_output_len(text: str) -> OutputLength:
    """``max`` | ``fixed:N`` | ``uniform:A:B`` | ``geometric:MEAN``."""
    parts = text.strip().split(":")
    try:
        if parts == ["max"]:
            return OutputLength("max")
        if parts[0] == "fixed" and len(parts) == 2 and int(parts[1]) >= 1:
            return OutputLength("fixed", float(int(parts[1])))
        if parts[0] == "uniform" and len(parts) == 3:
            a, b = int(parts[1]), int(parts[2])
            if 1 <= a <= b:
                return OutputLength("uniform", float(a), float(b))
        if parts[0] == "geometric" and len(parts) == 2 and float(parts[1]) >= 1:
            return OutputLength("geometric", float(parts[1]))
    except ValueError:
        pass
    raise SpecError(
        f"sim output_len {text!r} is invalid; use max, fixed:N, uniform:A:B or geometric:MEAN"
    )


def parse_routing(text: str) -> float | None:
    """``uniform`` → None; ``zipf:S`` → S (> 0)."""
    if text == "uniform":
        return None
    if text.startswith("zipf:"):
        try:
            s = float(text.split(":", 1)[1])
        except ValueError:
            s = -1.0
        if s > 0 and math.isfinite(s):
            return s
    raise SpecError(f"sim routing {text!r} is invalid; use uniform or zipf:S with S > 0")


@dataclass(slots=True)
class SimConfig:
    """One simulated node: R replicas of an engine serving ``geometry`` on ``accelerator``.

    ``kv_cache_blocks`` (16 tokens each) or ``kv_cache_bytes`` is per replica; neither derives it
    as accelerator memory ×
    gpus_per_replica × 0.9 − all weight bytes (an error, not a clamp, when that is not
    positive: the model does not fit). Power per GPU is ``idle_w`` (default
    ``idle_power_fraction`` × TDP) plus the rest of TDP in proportion to how busy the
    roofline resource of the moment is (see docs/methodology.md).
    """

    geometry: ModelGeometry
    accelerator: Accelerator
    gpus_per_replica: int = 1
    replicas: int = 1
    efficiency: float = 0.5
    prefill_efficiency: float = 0.5
    prefill_cost: bool = True
    step_overhead_s: float = 0.0
    routing: str = "uniform"
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    kv_cache_bytes: float | None = None
    kv_cache_blocks: int | None = None  # overrides kv_cache_bytes: vLLM's num_gpu_blocks
    max_model_len: int = 32768
    seed: int = 0
    served_model_name: str = ""
    idle_power_fraction: float = 0.15
    idle_w: float | None = None
    tdp_w: float | None = None
    truth_log: str | Path | None = None
    output_len: str = "geometric:256"
    # wire-format knobs for testing clients (off by default)
    tokens_per_chunk: int = 1
    keepalive_interval_s: float | None = None
    error_after_tokens: int | None = None
    stall_after_tokens: int | None = None
    # timing of the real-time driver
    spin_s: float = 0.0015

    def __post_init__(self) -> None:
        if not self.served_model_name:
            self.served_model_name = self.geometry.name
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, name: str, fix: str) -> None:
            if not ok:
                raise SpecError(f"sim {name} is invalid: {fix}")

        need(self.gpus_per_replica >= 1, "gpus_per_replica", "give an integer >= 1")
        need(self.replicas >= 1, "replicas", "give an integer >= 1")
        need(0 < self.efficiency <= 1, "efficiency", "give a fraction in (0, 1]")
        need(0 < self.prefill_efficiency <= 1, "prefill_efficiency", "give a fraction in (0, 1]")
        need(self.step_overhead_s >= 0, "step_overhead_s", "give seconds >= 0")
        need(self.max_num_seqs >= 1, "max_num_seqs", "give an integer >= 1")
        need(self.max_batched_tokens >= 1, "max_batched_tokens", "give an integer >= 1")
        need(self.max_model_len >= 2, "max_model_len", "give an integer >= 2")
        need(
            self.kv_cache_bytes is None or self.kv_cache_bytes > 0,
            "kv_cache_bytes",
            "give a positive size or leave it unset",
        )
        need(
            self.kv_cache_blocks is None or self.kv_cache_blocks >= 1,
            "kv_cache_blocks",
            "give a block count >= 1 or leave it unset",
        )
        need(0 <= self.idle_power_fraction <= 1, "idle_power_fraction", "give a fraction in [0, 1]")
        need(self.idle_w is None or self.idle_w >= 0, "idle_w", "give watts >= 0")
        need(self.tdp_w is None or self.tdp_w > 0, "tdp_w", "give watts > 0")
        need(self.tokens_per_chunk >= 1, "tokens_per_chunk", "give an integer >= 1")
        need(
            self.keepalive_interval_s is None or self.keepalive_interval_s > 0,
            "keepalive_interval_s",
            "give seconds > 0 or leave it unset",
        )
        need(
            self.error_after_tokens is None or self.error_after_tokens >= 0,
            "error_after_tokens",
            "give an integer >= 0 or leave it unset",
        )
        need(
            self.stall_after_tokens is None or self.stall_after_tokens >= 0,
            "stall_after_tokens",
            "give an integer >= 0 or leave it unset",
        )
        need(self.spin_s >= 0, "spin_s", "give seconds >= 0")
        parse_routing(self.routing)
        parse_output_len(self.output_len)
        if self.prefill_cost and not self.accelerator.peak_flops(self.geometry.weight_dtype):
            raise SpecError(
                f"sim prefill cost needs a peak FLOP/s for {self.accelerator.name}; give one in "
                "hardware.custom or turn prefill cost off (--no-prefill-cost)"
            )
        self.derive()  # raises when the model does not fit

    def derive(self) -> Derived:
        return Derived.of(self)

    # -- travel as JSON (to the child process of start_sim_subprocess) -------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "geometry":
                value = self.geometry.to_dict()
            elif f.name == "accelerator":
                value = self.accelerator.to_dict()
            elif isinstance(value, Path):
                value = str(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimConfig:
        data = dict(data)
        data["geometry"] = ModelGeometry.from_dict(dict(data["geometry"]))
        acc = dict(data["accelerator"])
        acc["aliases"] = tuple(acc.get("aliases", ()))
        data["accelerator"] = Accelerator(**acc)
        return cls(**data)


@dataclass(frozen=True, slots=True)
class Derived:
    """Per-replica constants the engine uses on every step."""

    weight_bytes_total: float  # every weight stored: dense + all experts of all MoE layers
    kv_cache_bytes: float
    kv_block_bytes: int
    num_blocks: int
    bandwidth_bytes_per_s: float  # rated, all GPUs of one replica
    s_per_byte: float  # 1 / (rated bandwidth × GPUs × efficiency)
    s_per_prefill_token: float  # 2 × active params / (peak FLOP/s × GPUs × prefill efficiency)
    tdp_w: float | None  # per GPU; None: no power model
    idle_w: float  # per GPU
    zipf_s: float | None
    output_len: OutputLength

    @classmethod
    def of(cls, c: SimConfig) -> Derived:
        g, acc = c.geometry, c.accelerator
        weights = float(g.dense_weight_bytes + g.moe_layers * g.experts * g.expert_bytes)
        # The engine gives every cached token a slot in every layer group (one block table per
        # sequence), so a block costs BLOCK_SIZE tokens × the KV bytes of *all* attention
        # layers: sliding-window and chunked layers included. (Sizing it from the full-context
        # layers alone gave an all-sliding model 16-byte blocks and overstated gpt-oss's
        # capacity 2×.) Hand-built geometries without groups fall back to the full-context size.
        per_token = max(1, g.kv_bytes_per_token_all_layers or g.kv_bytes_per_token_full_context)
        block = per_token * BLOCK_SIZE
        if c.kv_cache_blocks is not None:
            kv = float(c.kv_cache_blocks * block)
        elif c.kv_cache_bytes is not None:
            kv = float(c.kv_cache_bytes)
        else:
            kv = acc.memory_bytes * c.gpus_per_replica * KV_MEMORY_FRACTION - weights
            if kv <= 0:
                raise SpecError(
                    f"sim: {g.name} weights ({weights / 1e9:.1f} GB) do not fit in "
                    f"{KV_MEMORY_FRACTION:.0%} of {c.gpus_per_replica} × {acc.name} memory; "
                    "raise gpus_per_replica or give kv_cache_gib"
                )
        blocks = int(kv // block)
        if blocks < 1:
            raise SpecError(
                f"sim kv cache ({kv:.0f} B) holds no {BLOCK_SIZE}-token block of {block} B; "
                "give a larger kv_cache_gib"
            )
        if blocks * BLOCK_SIZE < c.max_model_len:
            raise SpecError(
                f"sim kv cache holds {blocks * BLOCK_SIZE} tokens, fewer than max_model_len "
                f"({c.max_model_len}); give a larger kv_cache_gib or a smaller max_model_len"
            )
        bw = acc.bandwidth_bytes_per_s * c.gpus_per_replica
        peak = acc.peak_flops(g.weight_dtype)
        if c.prefill_cost and peak:
            s_tok = 2.0 * g.active_params / (peak * c.gpus_per_replica * c.prefill_efficiency)
        else:
            s_tok = 0.0
        tdp = c.tdp_w if c.tdp_w is not None else acc.tdp_w
        idle = c.idle_w if c.idle_w is not None else (tdp or 0.0) * c.idle_power_fraction
        if tdp is not None and idle > tdp:
            raise SpecError(f"sim idle_w ({idle} W) exceeds the TDP ({tdp} W); lower idle_w")
        return cls(
            weight_bytes_total=weights,
            kv_cache_bytes=kv,
            kv_block_bytes=block,
            num_blocks=blocks,
            bandwidth_bytes_per_s=bw,
            s_per_byte=1.0 / (bw * c.efficiency),
            s_per_prefill_token=s_tok,
            tdp_w=tdp,
            idle_w=idle,
            zipf_s=parse_routing(c.routing),
            output_len=parse_output_len(c.output_len),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
