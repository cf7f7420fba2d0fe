"""Everything that defines one simulated node, checked once, with the derived constants.

A ``SimConfig`` is plain data so that it can travel to a child process as JSON
(``to_dict``/``from_dict``); ``SimConfig.derive()`` turns it into the numbers the engine
uses on every step (KV blocks, seconds per byte, seconds per prefill token, power).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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


@dataclass(slots=True, init=False)
class SimConfig:
    """One simulated node: R replicas of an engine serving ``geometry`` on ``accelerator``,
    with its knobs as one ``SimSettings`` (the one definition of each knob and of what is
    valid; read them as ``config.settings.efficiency``).

    ``SimConfig(geometry, accelerator, efficiency=0.3, ...)``: keyword knobs are
    ``SimSettings`` fields, in its units (``step_overhead_ms``, ``kv_cache_gib``), laid over
    ``settings`` (default: every knob's default); an unknown or invalid one is a ``SpecError``
    naming it. ``kv_cache_blocks`` (16 tokens each) or ``kv_cache_gib`` is per replica; neither
    derives it as accelerator memory × gpus_per_replica × 0.9 − all weight bytes (an error, not
    a clamp, when that is not positive: the model does not fit). Power per GPU is ``idle_w``
    (default ``idle_power_fraction`` × TDP) plus the rest of TDP in proportion to how busy the
    roofline resource of the moment is (see docs/methodology.md).
    """

    geometry: ModelGeometry
    accelerator: Accelerator
    settings: SimSettings
    gpus_per_replica: int
    replicas: int
    served_model_name: str
    draft_geometry: ModelGeometry | None  # speculative method draft: the draft model

    def __init__(
        self,
        geometry: ModelGeometry,
        accelerator: Accelerator,
        *,
        settings: SimSettings | None = None,
        gpus_per_replica: int = 1,
        replicas: int = 1,
        served_model_name: str = "",
        draft_geometry: ModelGeometry | None = None,
        **knobs: Any,
    ) -> None:
        self.geometry = geometry
        self.accelerator = accelerator
        self.settings = _with_knobs(settings or SimSettings(), knobs)
        self.gpus_per_replica = gpus_per_replica
        self.replicas = replicas
        self.served_model_name = served_model_name or geometry.name
        self.draft_geometry = draft_geometry
        self.validate()

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
        """The node these settings describe on this model and hardware (the draft model of
        ``speculative.draft_model`` loaded here)."""
        spec = settings.speculative
        draft = None
        if spec is not None and spec.draft_model is not None:
            draft = load_geometry(spec.draft_model)
        return cls(
            geometry,
            accelerator,
            settings=settings,
            gpus_per_replica=gpus_per_replica,
            replicas=replicas,
            served_model_name=served_model_name,
            draft_geometry=draft,
        )

    def validate(self) -> None:
        """The knobs through ``SimSettings``; then what needs the model and hardware."""
        if self.gpus_per_replica < 1:
            raise SpecError("sim gpus_per_replica is invalid: give an integer >= 1")
        if self.replicas < 1:
            raise SpecError("sim replicas is invalid: give an integer >= 1")
        settings = self.settings
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
        if settings.prefill_cost and not self.accelerator.peak_flops(self.geometry.weight_dtype):
            raise SpecError(
                f"sim prefill cost needs a peak FLOP/s for {self.accelerator.name}; give one in "
                "hardware.custom or turn prefill cost off (--no-prefill-cost)"
            )
        self.derive()  # raises when the model does not fit

    def derive(self) -> Derived:
        return Derived.of(self)

    # -- travel as JSON (to the child process of start_sim_subprocess) -------------------
    def to_dict(self) -> dict[str, Any]:
        draft = self.draft_geometry
        return {
            "geometry": self.geometry.to_dict(),
            "accelerator": self.accelerator.to_dict(),
            "settings": self.settings.model_dump(),
            "gpus_per_replica": self.gpus_per_replica,
            "replicas": self.replicas,
            "served_model_name": self.served_model_name,
            "draft_geometry": None if draft is None else draft.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimConfig:
        data = dict(data)
        draft = data.pop("draft_geometry", None)
        acc = dict(data.pop("accelerator"))
        acc["aliases"] = tuple(acc.get("aliases", ()))
        return cls(
            ModelGeometry.from_dict(dict(data.pop("geometry"))),
            Accelerator(**acc),
            settings=SimSettings.model_validate(data.pop("settings")),
            draft_geometry=None if draft is None else ModelGeometry.from_dict(dict(draft)),
            **data,
        )


def _with_knobs(settings: SimSettings, knobs: dict[str, Any]) -> SimSettings:
    """``settings`` with ``knobs`` laid over it, validated by ``SimSettings`` (a one-line
    ``SpecError`` naming each bad or unknown knob)."""
    if not knobs:
        return settings
    try:
        return SimSettings.model_validate({**settings.model_dump(), **knobs})
    except ValidationError as exc:
        raise SpecError(settings_error(exc)) from None


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
    step_overhead_s: float  # fixed time added to every step
    zipf_s: float | None
    output_len: OutputLength
    speculative: SpeculativeSettings | None = None

    @classmethod
    def of(cls, c: SimConfig) -> Derived:
        g, acc, k = c.geometry, c.accelerator, c.settings
        weights = float(g.dense_weight_bytes + g.moe_layers * g.experts * g.expert_bytes)
        # The engine gives every cached token a slot in every layer group (one block table per
        # sequence), so a block costs BLOCK_SIZE tokens × the KV bytes of *all* attention
        # layers: sliding-window and chunked layers included. (Sizing it from the full-context
        # layers alone gave an all-sliding model 16-byte blocks and overstated gpt-oss's
        # capacity 2×.) Hand-built geometries without groups fall back to the full-context size.
        per_token = max(1, g.kv_bytes_per_token_all_layers or g.kv_bytes_per_token_full_context)
        block = per_token * BLOCK_SIZE
        if k.kv_cache_blocks is not None:
            kv = float(k.kv_cache_blocks * block)
        elif k.kv_cache_gib is not None:
            kv = float(k.kv_cache_gib * _GIB)
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
        if blocks * BLOCK_SIZE < k.max_model_len:
            raise SpecError(
                f"sim kv cache holds {blocks * BLOCK_SIZE} tokens, fewer than max_model_len "
                f"({k.max_model_len}); give a larger kv_cache_gib or a smaller max_model_len"
            )
        bw = acc.bandwidth_bytes_per_s * c.gpus_per_replica
        peak = acc.peak_flops(g.weight_dtype)
        if k.prefill_cost and peak:
            s_tok = 2.0 * g.active_params / (peak * c.gpus_per_replica * k.prefill_efficiency)
        else:
            s_tok = 0.0
        tdp = k.tdp_w if k.tdp_w is not None else acc.tdp_w
        idle = k.idle_w if k.idle_w is not None else (tdp or 0.0) * k.idle_power_fraction
        if tdp is not None and idle > tdp:
            raise SpecError(f"sim idle_w ({idle} W) exceeds the TDP ({tdp} W); lower idle_w")
        return cls(
            weight_bytes_total=weights,
            kv_cache_bytes=kv,
            kv_block_bytes=block,
            num_blocks=blocks,
            bandwidth_bytes_per_s=bw,
            s_per_byte=1.0 / (bw * k.efficiency),
            s_per_prefill_token=s_tok,
            tdp_w=tdp,
            idle_w=idle,
            step_overhead_s=k.step_overhead_ms / 1e3,
            zipf_s=parse_routing(k.routing),
            output_len=parse_output_len(k.output_len),
            speculative=k.speculative,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["speculative"] = None if self.speculative is None else self.speculative.model_dump()
        return out
