"""Settings for the built-in simulator, used when ``endpoint.url`` is ``sim``.

The accelerator, GPUs per replica and replicas come from the ``hardware`` section and the
model from ``model``, so a spec describes one node whether it is real or simulated.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from tokenwatt.spec._base import Section


class SimSection(Section):
    efficiency: float = Field(
        0.5, gt=0, le=1, description="fraction of rated bandwidth the stack achieves in decode"
    )
    prefill_efficiency: float = Field(
        0.5, gt=0, le=1, description="fraction of peak FLOP/s achieved in prefill"
    )
    prefill_cost: bool = Field(True, description="charge prefill compute time (false: zero)")
    step_overhead_ms: float = Field(0.0, ge=0, description="fixed time added to every step, ms")
    routing: str = Field("uniform", description="expert routing: uniform or zipf:S")
    max_num_seqs: int = Field(256, ge=1, description="cap on running sequences per replica")
    max_batched_tokens: int = Field(8192, ge=1, description="token budget per step")
    kv_cache_gib: float | None = Field(
        None, gt=0, description="KV capacity per replica, GiB; None: memory minus weights"
    )
    max_model_len: int = Field(32768, ge=2, description="longest prompt + output accepted")
    seed: int = Field(0)

    @field_validator("routing")
    @classmethod
    def _routing(cls, v: str) -> str:
        if v == "uniform":
            return v
        if v.startswith("zipf:"):
            try:
                s = float(v.split(":", 1)[1])
            except ValueError:
                s = -1.0
            if s > 0:
                return v
        raise ValueError("must be 'uniform' or 'zipf:S' with S > 0, e.g. zipf:1.2")
