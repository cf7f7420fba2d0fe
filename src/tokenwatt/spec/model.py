"""Which model is served: the geometry source and precision overrides."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tokenwatt.spec._base import Section


class ModelSection(Section):
    source: str = Field(
        description="a bundled preset (e.g. qwen3-30b-a3b), a config.json path, a folder "
        "holding one, or a Hugging Face repo id in the local cache"
    )
    weight_dtype: str | None = Field(
        None, description="bf16, fp16, fp8, int8, int4 or mxfp4; default from the config"
    )
    kv_dtype: str | None = Field(None, description="KV-cache dtype; default bf16")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="geometry fields to set by hand (any ModelGeometry field)"
    )
