"""Shared pydantic base for spec sections: strict, frozen, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
