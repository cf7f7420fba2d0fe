"""Tokens per joule and joules per output token over a measurement window.

    tokens_per_joule        = output tokens in the window ÷ energy in the window (J)
    joules_per_output_token = energy in the window (J) ÷ output tokens in the window
    joules_per_total_token  = energy in the window (J) ÷ (output tokens + prompt tokens whose
                              prefill ended in the window): the figure that charges prompts
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
from typing import Protocol

from tokenwatt.result import EnergyAudit, EnergySummary, ScopeEnergy

__all__ = ["energy_metrics", "scope_efficiency"]


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


def scope_efficiency(e: _ScopeEnergyLike, output_tokens: int) -> ScopeEnergy:
    """Efficiency of one scope's energy over its window."""
    energy, window = e.energy_j, e.window_s
    return ScopeEnergy(
        scope=e.scope,
        source=e.source,
        kind=e.kind,
        measured=e.measured,
        modelled=not e.measured,
        energy_j=energy,
        mean_power_w=energy / window if energy is not None and window > 0 else None,
        output_tokens=output_tokens,
        window_s=window,
        tokens_per_joule=output_tokens / energy if energy is not None and energy > 0 else None,
        joules_per_output_token=(
            energy / output_tokens if energy is not None and output_tokens > 0 else None
        ),
        flags=list(e.flags),
        valid=e.valid,
    )


def energy_metrics(
    report: _EnergyReportLike,
    output_tokens: int,
    *,
    input_tokens: int | None = None,
    audit: Sequence[EnergyAudit] = (),
) -> EnergySummary:
    """Efficiency per scope from an ``EnergyReport`` and the output tokens of its window, as
    the result's ``EnergySummary``: the headline fields are the primary scope's, and
    ``measured`` is true only when that scope measured (not modelled) an energy. With
    ``input_tokens`` (prompt tokens whose prefill ended in the window) also J per total token;
    ``audit`` is the monitor's per-source record (``power.audit``), kept as it is."""
    if output_tokens < 0:
        raise ValueError(f"output_tokens must be >= 0, got {output_tokens}")
    scopes = {k: scope_efficiency(v, output_tokens) for k, v in report.scopes.items()}
    head = scopes.get(report.primary_scope) if report.primary_scope else None
    common = {
        "output_tokens": output_tokens,
        "window_s": report.window_s,
        "primary_scope": report.primary_scope,
        "scopes": scopes,
        "warnings": list(report.warnings),
        "input_tokens": input_tokens,
        "audit": list(audit),
    }
    if head is None:
        return EnergySummary(measured=False, **common)
    total = output_tokens + (input_tokens or 0)
    per_total = (
        head.energy_j / total
        if input_tokens is not None and head.energy_j is not None and total > 0
        else None
    )
    return EnergySummary(
        joules_per_total_token=per_total,
        energy_j=head.energy_j,
        mean_power_w=head.mean_power_w,
        joules_per_output_token=head.joules_per_output_token,
        tokens_per_joule=head.tokens_per_joule,
        source=head.source,
        scope=head.scope,
        kind=head.kind,
        modelled=head.modelled,
        measured=head.measured and head.energy_j is not None,
        flags=list(head.flags),
        valid=head.valid,
        **common,
    )
