"""What every view must say about a run besides its figures: which run, under which SLO, and
whether the figures were simulated or modelled rather than measured.

Why one module: a screenshot of one card, one chart or one table travels without the page
around it, so the simulated mark has to sit on each of them, in the same words everywhere
(terminal, HTML, ``compare``, ``tokenwatt probe``). It imports nothing of rich or HTML, so
``report.compare`` (the comparison's data) and the views all read it without importing one
another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenwatt.report.format import fmt_pct, fmt_quantile

if TYPE_CHECKING:
    from tokenwatt.hardware import Accelerator
    from tokenwatt.result import BenchResult, EnergySummary, GradedAccuracy, SloSettings
    from tokenwatt.simsettings import SimSettings

__all__ = [
    "SIMULATED",
    "SIMULATED_NOTE",
    "bandwidth_provenance",
    "describe_run",
    "describe_slo",
    "power_mark",
    "sim_settings",
]

SIMULATED = "SIMULATED"
SIMULATED_NOTE = (
    "SIMULATED: served by tokenwatt's built-in simulator, not measured on the hardware named; "
    "every figure follows from the simulator's settings"
)


def sim_settings(result: BenchResult) -> SimSettings | None:
    """The simulator's settings a simulated run was served with, or None where they are not
    known: a standalone ``tokenwatt sim`` the run found at its URL (``target.server_identity``)
    was started with its own flags, and the spec's ``sim`` section served nothing."""
    if not result.simulated:
        return None
    t = result.target
    if t is None or t.kind == "sim":
        return t.sim if t is not None and t.sim is not None else result.spec.sim
    return None


def describe_slo(slo: SloSettings) -> str:
    """The SLO in one line, e.g. ``p99 TTFT ≤ 500 ms, p99 TPOT ≤ 60 ms``."""
    limits = [
        (name, ms)
        for name, ms in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E", slo.e2e_ms))
        if ms is not None
    ]
    floor = "" if slo.accuracy_min is None else f", accuracy ≥ {fmt_pct(slo.accuracy_min, 0)}"
    if slo.kind == "attainment":
        each = " and ".join(f"{name} ≤ {ms:g} ms" for name, ms in limits)
        return f"≥ {fmt_pct(slo.attainment, 0)} of requests with {each}{floor}"
    q = fmt_quantile(slo.percentile)
    return ", ".join(f"{q} {name} ≤ {ms:g} ms" for name, ms in limits) + floor


def accuracy_text(acc: GradedAccuracy) -> str:
    """A probe's graded answers in one line, e.g. ``84.6 % of 52 graded (72.5–92.0 %, 95 %)``."""
    if acc.accuracy is None or acc.accuracy_low is None or acc.accuracy_high is None:
        return f"no graded answer judged ({acc.unjudged} failed before an answer)"
    band = f"{fmt_pct(acc.accuracy_low)}–{fmt_pct(acc.accuracy_high)}, {fmt_pct(acc.confidence, 0)}"
    return f"{fmt_pct(acc.accuracy)} of {acc.graded} graded ({band})"


def describe_run(result: BenchResult) -> str:
    """``name · model on N × accelerator (R replicas)``, and ``SIMULATED`` where the built-in
    simulator served it: a screenshot must not read like a real H100 measurement."""
    model = result.model_name
    acc = result.accelerator_name
    replicas = "1 replica" if result.replicas == 1 else f"{result.replicas} replicas"
    if result.simulated:
        node = f"{result.gpus} × {acc} ({replicas}, tokenwatt sim)"
        return f"{result.name} · {SIMULATED} {model} on {node}"
    return f"{result.name} · {model} on {result.gpus} × {acc} ({replicas})"


def power_mark(energy: EnergySummary | None) -> str:
    """``"modelled"`` for power from a stated wattage, ``"simulated"`` for the simulator's
    power model (its energy counter is read like an exporter's, so the source alone says
    so), else ``""``: the word goes beside every watt and joule figure shown."""
    if energy is None:
        return ""
    if energy.source == "sim":
        return "simulated"
    return "modelled" if energy.is_modelled else ""


def bandwidth_provenance(accelerator: Accelerator | None) -> str:
    """``rated`` for a datasheet's bandwidth; for one measured on this machine (``tokenwatt
    hardware --measure``) its source: when, how, and how much the runs varied. A result with
    no accelerator record (schema 3: a probe whose config.json could not be read) has no MBU,
    so this is never asked of it; ``rated`` keeps the type honest."""
    if accelerator is not None and accelerator.confidence == "measured":
        return accelerator.source
    return "rated"
