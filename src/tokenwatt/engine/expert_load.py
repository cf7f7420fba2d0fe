"""Per-expert load where an engine tells it, as the ``ExpertLoad`` an expert-load file gives.

Which engine gives what (checked against each engine's source, December 2026):

- **tokenwatt's simulator**: ``tokenwatt_sim_expert_tokens_total{engine, layer, expert}`` on
  ``/metrics`` — tokens routed to each expert (``layer="all"``: its MoE layers share one
  routing law). A window's load is the counters' increase between two scrapes: a probe's
  witness keeps them at every scrape (``EngineSample.experts``), so its first and last scrape
  give the probe's measured load (``expert_load_from_samples``) with no file.
- **vLLM-Ascend**: its EPLB statistics logger's ``vllm:phy_expert_heat`` counter per physical
  expert and ``vllm:phy2log`` map, read the same way (``engine.expert_counts``).
- **SGLang**: the expert distribution recorder. ``POST /start_expert_distribution_record``,
  then ``/stop_…`` and ``/dump_expert_distribution_record``; versions up to 0.4.x write one CSV
  per rank, ``expert_distribution_rank{R}_timestamp{T}.csv`` with header
  ``layer_id,expert_id,count`` (tokens routed to that expert of that layer); later versions
  (``sglang.srt.eplb.expert_distribution``) dump a torch file whose ``logical_count`` is the
  same layers × experts matrix — read it with torch and write it as tokenwatt's JSON
  (``engine.expert_load_file``). Nothing on ``/metrics``.
- **vLLM**: the expert-parallel load balancer (``--enable-eplb``) keeps per-layer, per-physical-
  expert token counts inside the workers (``expert_load_pass`` / ``expert_load_window``) to
  rebalance; it exposes none of them on ``/metrics`` and with ``log_balancedness`` logs only
  the balancedness ratio (mean ÷ max tokens per rank), which does not give π_r. A vLLM user
  must dump the counts (or use the routing band: ``metrics.mbu.routing_band``).
- **llama.cpp**: nothing.

Counts from all ranks (SGLang CSV files, simulator replicas) are summed: π_r only needs each
expert's share within a layer.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable, Mapping

from tokenwatt.engine.expert_counts import SIM_EXPERT_TOKENS, ExpertCounts, expert_counts
from tokenwatt.engine.parse import EngineSample, parse_samples
from tokenwatt.geometry.routing import ExpertLoad

__all__ = [
    "SIM_EXPERT_TOKENS",
    "ExpertLoadError",
    "expert_load_from_exposition",
    "expert_load_from_samples",
    "expert_load_from_sglang_csv",
]


class ExpertLoadError(ValueError):
    """The engine's text holds no usable per-expert load (one line, says what is missing)."""


Counts = ExpertCounts  # layer → expert → tokens


def _exposition_counts(text: str) -> Counts:
    return expert_counts(parse_samples(text))


def _to_load(
    counts: Mapping[str, Mapping[int, float]], experts: int, k: int, src: str
) -> ExpertLoad:
    if not counts:
        raise ExpertLoadError(f"{src}: no per-expert counts found")
    rows = []
    for layer in sorted(counts, key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0)):
        row = counts[layer]
        if row and max(row) >= experts:
            raise ExpertLoadError(
                f"{src}: expert id {max(row)} in layer {layer}, the model has {experts} experts"
            )
        rows.append([max(0.0, row.get(r, 0.0)) for r in range(experts)])
    try:
        return ExpertLoad.from_counts(rows, k, src)
    except ValueError as exc:
        raise ExpertLoadError(f"{src}: {exc}") from None


def expert_load_from_exposition(
    before: str, after: str, *, experts: int, k: int, source: str = "engine /metrics"
) -> ExpertLoad:
    """The window's load from two ``/metrics`` scrapes: each counter's increase (a counter that
    went down was reset: its ``after`` value is the increase)."""
    return _load_between(_exposition_counts(before), _exposition_counts(after), experts, k, source)


def expert_load_from_samples(
    samples: Iterable[EngineSample], *, experts: int, k: int, source: str = "engine /metrics"
) -> ExpertLoad | None:
    """The load between the first and the last scrape that carry per-expert counters; None
    when fewer than two do or nothing was routed between them (the band then stays)."""
    have = sorted((s for s in samples if s.experts), key=lambda s: s.t_ns)
    if len(have) < 2:
        return None
    try:
        return _load_between(have[0].experts, have[-1].experts, experts, k, source)
    except ExpertLoadError:
        return None


def _load_between(a: Counts, b: Counts, experts: int, k: int, source: str) -> ExpertLoad:
    delta: Counts = {}
    for layer, row in b.items():
        prev = a.get(layer, {})
        delta[layer] = {
            r: v - prev.get(r, 0.0) if v >= prev.get(r, 0.0) else v for r, v in row.items()
        }
    return _to_load(delta, experts, k, source)


def expert_load_from_sglang_csv(
    texts: Iterable[str], *, experts: int, k: int, source: str = "sglang expert distribution"
) -> ExpertLoad:
    """SGLang's recorder CSV files (one per rank), summed over ranks."""
    out: Counts = defaultdict(lambda: defaultdict(float))
    for text in texts:
        reader = csv.DictReader(io.StringIO(text))
        if reader.fieldnames is None or not {"layer_id", "expert_id", "count"} <= set(
            reader.fieldnames
        ):
            raise ExpertLoadError(f"{source}: expected the header layer_id,expert_id,count")
        for row in reader:
            try:
                out[row["layer_id"]][int(row["expert_id"])] += float(row["count"])
            except (TypeError, ValueError):
                raise ExpertLoadError(f"{source}: bad row {row}") from None
    return _to_load(out, experts, k, source)
