"""Everything that defines one simulated node, checked once, with the derived constants.

A ``SimConfig`` is plain data so that it can travel to a child process as JSON
(``to_dict``/``from_dict``); ``SimConfig.derive()`` turns it into the numbers the engine
uses on every step (KV blocks, seconds per byte, seconds per prefill token, power).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tokenwatt.errors import SpecError
from tokenwatt.geometry import load_geometry
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.simsettings import (
    OutputLength,
    SimSettings,
    SpeculativeSettings,
    parse_output_len,
    parse_routing,
    settings_error,
)

__all__ = ["BLOCK_SIZE", "Derived", "OutputLength", "SimConfig", "SimSettings", "parse_output_len"]
_GIB = 1 << 30

BLOCK_SIZE = 16  # tokens per KV block, as in vLLM
KV_MEMORY_FRACTION = 0.9  # share of HBM the engine may use (vLLM's gpu_memory_utilization)


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
    prefix_caching: bool = False  # vLLM's automatic prefix caching, 16-token blocks
    reasoning: str = "off"  # chat output streamed as reasoning_content first (SimSettings)
    # wire-format knobs for testing clients (off by default)
    tokens_per_chunk: int = 1
    keepalive_interval_s: float | None = None
    error_after_tokens: int | None = None
    stall_after_tokens: int | None = None
    # timing of the real-time driver
    spin_s: float = 0.0015
    # speculative decoding (SpeculativeSettings as a dict, so the config travels as JSON)
    speculative: dict[str, Any] | None = None
    draft_geometry: ModelGeometry | None = None  # method draft: the draft model

    def __post_init__(self) -> None:
        if not self.served_model_name:
            self.served_model_name = self.geometry.name
        self.validate()

    def settings(self) -> SimSettings:
        """These knobs as ``SimSettings``, validated there: the one definition of what is valid.

        Raises ``SpecError`` (one line naming the knob) when a knob is out of range.
        """
        try:
            return SimSettings(
                efficiency=self.efficiency,
                prefill_efficiency=self.prefill_efficiency,
                prefill_cost=self.prefill_cost,
                step_overhead_ms=self.step_overhead_s * 1e3,
                routing=self.routing,
                max_num_seqs=self.max_num_seqs,
                max_batched_tokens=self.max_batched_tokens,
                kv_cache_gib=None if self.kv_cache_bytes is None else self.kv_cache_bytes / _GIB,
                kv_cache_blocks=self.kv_cache_blocks,
                max_model_len=self.max_model_len,
                output_len=self.output_len,
                prefix_caching=self.prefix_caching,
                reasoning=self.reasoning,
                seed=self.seed,
                idle_power_fraction=self.idle_power_fraction,
                idle_w=self.idle_w,
                tdp_w=self.tdp_w,
                tokens_per_chunk=self.tokens_per_chunk,
                keepalive_s=self.keepalive_interval_s,
                error_after_tokens=self.error_after_tokens,
                stall_after_tokens=self.stall_after_tokens,
                spin_s=self.spin_s,
                truth_log=None if self.truth_log is None else str(self.truth_log),
                speculative=self.speculative,
            )
        except ValidationError as exc:
            raise SpecError(settings_error(exc)) from None

    @classmethod
    def from_settings(
        cls,
        settings: SimSettings,
        *,
        geometry: ModelGeometry,
        accelerator: Accelerator,
        gpus_per_replica: int = 1,
        replicas: int = 1,
        served_model_name: str = "",
    ) -> SimConfig:
        """The node these settings describe on this model and hardware."""
        s = settings
        spec = s.speculative
        draft = None
        if spec is not None and spec.draft_model is not None:
            draft = load_geometry(spec.draft_model)
        return cls(
            geometry=geometry,
            accelerator=accelerator,
            gpus_per_replica=gpus_per_replica,
            replicas=replicas,
            efficiency=s.efficiency,
            prefill_efficiency=s.prefill_efficiency,
            prefill_cost=s.prefill_cost,
            step_overhead_s=s.step_overhead_ms / 1e3,
            routing=s.routing,
            max_num_seqs=s.max_num_seqs,
            max_batched_tokens=s.max_batched_tokens,
            kv_cache_bytes=None if s.kv_cache_gib is None else s.kv_cache_gib * _GIB,
            kv_cache_blocks=s.kv_cache_blocks,
            max_model_len=s.max_model_len,
            seed=s.seed,
            served_model_name=served_model_name,
            idle_power_fraction=s.idle_power_fraction,
            idle_w=s.idle_w,
            tdp_w=s.tdp_w,
            truth_log=s.truth_log,
            output_len=s.output_len,
            prefix_caching=s.prefix_caching,
            reasoning=s.reasoning,
            tokens_per_chunk=s.tokens_per_chunk,
            keepalive_interval_s=s.keepalive_s,
            error_after_tokens=s.error_after_tokens,
            stall_after_tokens=s.stall_after_tokens,
            spin_s=s.spin_s,
            speculative=None if spec is None else spec.model_dump(),
            draft_geometry=draft,
        )

    def validate(self) -> None:
        """The knobs through ``SimSettings``; then what needs the model and hardware."""
        if self.gpus_per_replica < 1:
            raise SpecError("sim gpus_per_replica is invalid: give an integer >= 1")
        if self.replicas < 1:
            raise SpecError("sim replicas is invalid: give an integer >= 1")
        settings = self.settings()
        if settings.speculative is not None:
            if settings.speculative.method == "draft" and self.draft_geometry is None:
                raise SpecError(
                    "sim speculative method draft needs a draft model: give "
                    "sim.speculative.draft_model (a preset, config.json or folder)"
                )
            if settings.speculative.method == "mtp" and not self.geometry.mtp_params:
                raise SpecError(
                    f"sim speculative method mtp: {self.geometry.name} has no MTP layers "
                    "(num_nextn_predict_layers); use method draft or ngram"
                )
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
            elif f.name == "draft_geometry":
                value = None if self.draft_geometry is None else self.draft_geometry.to_dict()
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
        if data.get("draft_geometry") is not None:
            data["draft_geometry"] = ModelGeometry.from_dict(dict(data["draft_geometry"]))
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
    speculative: SpeculativeSettings | None = None

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
            if acc.memory_bytes is None:
                raise SpecError(
                    "sim: the accelerator's memory is unknown; name it (--hardware) or give "
                    "hardware.custom.memory_bytes or sim.kv_cache_gib"
                )
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
            speculative=None
            if c.speculative is None
            else SpeculativeSettings.model_validate(c.speculative),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["speculative"] = None if self.speculative is None else self.speculative.model_dump()
        return out
