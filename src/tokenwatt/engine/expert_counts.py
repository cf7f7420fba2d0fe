"""Per-expert routed-token counters read from one ``/metrics`` page, layer → expert → tokens.

Why apart from ``engine.expert_load``: every scrape keeps these counts (``EngineSample.experts``)
so a probe's first and last scrape give the window's expert load without a second request,
and ``engine.parse`` cannot import ``expert_load`` (which parses text itself) without a circle.

Read, where the page has them:

- tokenwatt's simulator: ``tokenwatt_sim_expert_tokens_total{engine, layer, expert}``.
- vLLM-Ascend's EPLB statistics logger: ``vllm:phy_expert_heat_total{rank, layer,
  phy_expert_id}`` (tokens routed to each *physical* expert, ``phy_expert_id`` local to its
  rank) with ``vllm:phy2log{rank, layer, phy_expert_id, log_expert_id}`` = 1 for the logical
  expert each physical slot holds now. Redundant copies of a logical expert are summed back
  onto it; without the map, physical slot ``rank × slots per rank + phy_expert_id`` is taken
  as that logical expert (no redundancy). Upstream vLLM and SGLang publish no per-expert
  counter on ``/metrics`` (``engine.expert_load`` says what they offer instead).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from tokenwatt.promscrape import Series

__all__ = ["ASCEND_HEAT", "ASCEND_PHY2LOG", "SIM_EXPERT_TOKENS", "ExpertCounts", "expert_counts"]

SIM_EXPERT_TOKENS = "tokenwatt_sim_expert_tokens_total"
ASCEND_HEAT = "vllm:phy_expert_heat_total"
ASCEND_PHY2LOG = "vllm:phy2log"

ExpertCounts = dict[str, dict[int, float]]  # layer → logical expert → routed tokens


def expert_counts(series: Mapping[str, Series]) -> ExpertCounts:
    """Every per-expert counter the page holds, summed over engines and ranks; empty when the
    page has none (or a label is not an expert number: then that series is skipped)."""
    out: defaultdict[str, defaultdict[int, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in series.get(SIM_EXPERT_TOKENS, []):
        expert = _int(labels.get("expert"))
        if expert is not None:
            out[labels.get("layer", "all")][expert] += value
    heat = series.get(ASCEND_HEAT, [])
    if heat:
        _ascend(heat, series.get(ASCEND_PHY2LOG, []), out)
    return {layer: dict(row) for layer, row in out.items()}


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _ascend(heat: Series, phy2log: Series, out: defaultdict[str, defaultdict[int, float]]) -> None:
    """Physical slots' heat onto logical experts (``phy2log``'s current map, else identity)."""
    mapping: dict[tuple[str, str, str], int] = {}
    for labels, value in phy2log:
        logical = _int(labels.get("log_expert_id"))
        if value == 1.0 and logical is not None:
            mapping[_slot(labels)] = logical
    per_rank: defaultdict[str, set[str]] = defaultdict(set)
    for labels, _ in heat:
        per_rank[labels.get("rank", "")].add(labels.get("phy_expert_id", ""))
    slots = max(len(v) for v in per_rank.values())
    for labels, value in heat:
        key = _slot(labels)
        rank, phy = _int(key[0]), _int(key[2])
        logical = mapping.get(key)
        if logical is None and rank is not None and phy is not None:
            logical = rank * slots + phy
        if logical is not None:
            out[key[1]][logical] += value


def _slot(labels: Mapping[str, str]) -> tuple[str, str, str]:
    """A physical expert's (rank, layer, slot on the rank)."""
    return labels.get("rank", ""), labels.get("layer", ""), labels.get("phy_expert_id", "")
