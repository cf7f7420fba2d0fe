"""Tokens per joule and joules per output token over a measurement window.

    tokens_per_joule        = output tokens in the window ÷ energy in the window (J)
    joules_per_output_token = energy in the window (J) ÷ output tokens in the window
    mean_power_w            = energy ÷ window length

Output tokens only (the ML.ENERGY and MLPerf convention for LLM serving), counted over the
same window as the energy. One figure per scope (gpu, module, node, …), never summed across
scopes. None wherever energy was not measured; a modelled figure (constant source) is
computed but carries ``measured = False`` and the ``modelled`` flag.

This module reads the monitor's report through a small protocol so that ``metrics`` does
not depend on ``power`` (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["EnergyMetrics", "ScopeEfficiency", "energy_metrics", "scope_efficiency"]


class _ScopeEnergyLike(Protocol):
    @property
    def scope(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def measured(self) -> bool: ...
    @property
    def energy_j(self) -> float | None: ...
    @property
    def window_s(self) -> float: ...
    @property
    def flags(self) -> Sequence[str]: ...
    @property
    def valid(self) -> bool: ...


class _EnergyReportLike(Protocol):
    @property
    def scopes(self) -> Mapping[str, _ScopeEnergyLike]: ...
    @property
    def primary_scope(self) -> str | None: ...
    @property
    def warnings(self) -> Sequence[str]: ...
    @property
    def window_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ScopeEfficiency:
    """Energy efficiency in one scope over one window."""

    scope: str
    source: str
    kind: str
    measured: bool
    energy_j: float | None
    mean_power_w: float | None
    output_tokens: int
    window_s: float
    tokens_per_joule: float | None
    joules_per_output_token: float | None
    flags: tuple[str, ...]
    valid: bool

    @property
    def modelled(self) -> bool:
        return not self.measured

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "source": self.source,
            "kind": self.kind,
            "measured": self.measured,
            "modelled": self.modelled,
            "energy_j": self.energy_j,
            "mean_power_w": self.mean_power_w,
            "output_tokens": self.output_tokens,
            "window_s": self.window_s,
            "tokens_per_joule": self.tokens_per_joule,
            "joules_per_output_token": self.joules_per_output_token,
            "flags": list(self.flags),
            "valid": self.valid,
        }


@dataclass(frozen=True, slots=True)
class EnergyMetrics:
    """Per-scope efficiency for one window; ``primary`` is the headline scope."""

    output_tokens: int
    window_s: float
    primary_scope: str | None
    scopes: dict[str, ScopeEfficiency] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def primary(self) -> ScopeEfficiency | None:
        return self.scopes.get(self.primary_scope) if self.primary_scope else None

    @property
    def measured(self) -> bool:
        p = self.primary
        return p is not None and p.measured and p.energy_j is not None

    @property
    def tokens_per_joule(self) -> float | None:
        p = self.primary
        return p.tokens_per_joule if p is not None else None

    @property
    def joules_per_output_token(self) -> float | None:
        p = self.primary
        return p.joules_per_output_token if p is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "output_tokens": self.output_tokens,
            "window_s": self.window_s,
            "primary_scope": self.primary_scope,
            "measured": self.measured,
            "tokens_per_joule": self.tokens_per_joule,
            "joules_per_output_token": self.joules_per_output_token,
            "scopes": {k: v.to_dict() for k, v in self.scopes.items()},
            "warnings": list(self.warnings),
        }


def scope_efficiency(e: _ScopeEnergyLike, output_tokens: int) -> ScopeEfficiency:
    """Efficiency of one scope's energy over its window."""
    energy, window = e.energy_j, e.window_s
    return ScopeEfficiency(
        scope=e.scope,
        source=e.source,
        kind=e.kind,
        measured=e.measured,
        energy_j=energy,
        mean_power_w=energy / window if energy is not None and window > 0 else None,
        output_tokens=output_tokens,
        window_s=window,
        tokens_per_joule=output_tokens / energy if energy is not None and energy > 0 else None,
        joules_per_output_token=(
            energy / output_tokens if energy is not None and output_tokens > 0 else None
        ),
        flags=tuple(e.flags),
        valid=e.valid,
    )


def energy_metrics(report: _EnergyReportLike, output_tokens: int) -> EnergyMetrics:
    """Efficiency per scope from an ``EnergyReport`` and the output tokens of its window."""
    if output_tokens < 0:
        raise ValueError(f"output_tokens must be >= 0, got {output_tokens}")
    return EnergyMetrics(
        output_tokens=output_tokens,
        window_s=report.window_s,
        primary_scope=report.primary_scope,
        scopes={k: scope_efficiency(v, output_tokens) for k, v in report.scopes.items()},
        warnings=tuple(report.warnings),
    )
