"""A probe's energy: one function for ``bench`` and ``probe``, so both measure power the same way.

Over exactly the probe's window it asks the monitor for the energy per scope, divides by the
output tokens received in the window (tokens per joule) and by output plus the prompt tokens
whose prefill ended in the window (J per total token), and records each source's audit
(``power.audit``): its method, checks and verdict, and the split of the energy into busy and
idle time and prefill-heavy and decode-only time, from the requests' own stamps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tokenwatt.hardware import Accelerator
from tokenwatt.load.probe import ProbeRun
from tokenwatt.metrics.energy import energy_metrics
from tokenwatt.power import PowerMonitor, open_power
from tokenwatt.records import RequestRecord
from tokenwatt.result import EnergySummary
from tokenwatt.spec import BenchSpec

__all__ = [
    "NO_POWER",
    "activity_intervals",
    "in_window_prompt_tokens",
    "open_probe_power",
    "power_warnings",
    "probe_energy",
]

NO_POWER = "no power source: tokens per joule not measured"

Interval = tuple[int, int]


def open_probe_power(
    spec: BenchSpec, accelerator: Accelerator | None, sim_metrics_url: str | None
) -> PowerMonitor:
    """The spec's power sources, opened and sampling (the simulator's counter for ``endpoint:
    sim`` when none is named); close it when the run ends."""
    url, gpus = sim_metrics_url, spec.hardware.gpus
    return open_power(spec.power, gpus=gpus, accelerator=accelerator, sim_metrics_url=url)


def power_warnings(monitor: PowerMonitor) -> list[str]:
    """What the run must say about its power sources: skipped ones, or none at all."""
    return [*monitor.warnings, *([] if monitor.sources else [NO_POWER])]


def in_window_prompt_tokens(records: Sequence[RequestRecord], a_ns: int, b_ns: int) -> int:
    """Prompt tokens of the requests whose first token arrived in [a, b): their prefill ended
    inside the window, as the output tokens counted there were received inside it."""
    total = 0
    for r in records:
        if r.first_token_ns is not None and a_ns <= r.first_token_ns < b_ns:
            total += r.prompt_tokens if r.prompt_tokens is not None else r.prompt_tokens_client
    return total


def activity_intervals(
    records: Sequence[RequestRecord],
) -> tuple[list[Interval], list[Interval]]:
    """(busy, prefill) raw intervals: a request is in flight from its send to its stream's
    end, and in prefill from its send to its first token (or its end, if none came)."""
    busy: list[Interval] = []
    prefill: list[Interval] = []
    for r in records:
        start = r.sent_ns if r.sent_ns is not None else r.scheduled_ns
        end = r.done_ns or r.end_ns
        if end is None or end <= start:
            continue
        busy.append((start, end))
        prefill.append((start, min(r.first_token_ns or end, end)))
    return busy, prefill


async def probe_energy(
    monitor: PowerMonitor | None, run: ProbeRun, accelerator: Accelerator | None
) -> tuple[EnergySummary | None, list[tuple[float, float]] | None]:
    """The probe's ``EnergySummary`` (with the audit) and its power series for the plot; None
    when no source measured or the window is empty."""
    a, b = run.window_start_ns, run.window_end_ns
    if monitor is None or not monitor.sources or b <= a:
        return None, None
    report = await monitor.energy_async(a, b, max_wait_s=2.0)
    busy, prefill = activity_intervals(run.records)
    tdp_w = None if accelerator is None else accelerator.tdp_w
    audit = await asyncio.to_thread(monitor.audit, a, b, busy=busy, prefill=prefill, tdp_w=tdp_w)
    summary = energy_metrics(
        report,
        run.metrics.output_tokens,
        input_tokens=in_window_prompt_tokens(run.records, a, b),
        audit=audit,
    )
    if summary.primary is None or summary.energy_j is None:
        return None, None
    series = monitor.samples(a, b, max_points=120)
    return summary, series.primary_points()
