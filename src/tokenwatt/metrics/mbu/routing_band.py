"""Routing nobody measured is a range: MBU from uniform routing down to the fewest experts.

An MoE step reads every expert its tokens picked. How many that is depends on the router's
per-expert load, which the client never sees: uniform routing touches the most experts (the
seed's upper bound), a skewed router fewer (its tokens collide on popular experts). Without a
measured expert load (``engine.expert_load_file`` or an engine's expert-load counters) the
weight term is therefore bounded, not known:

    upper = the mixed-step estimate with π_r = k/E       (uniform: the printed headline)
    lower = the same estimate with every token on the same k experts  (``ExpertLoad.fewest``)

Each token picks k distinct experts, so a step that routes any token reads at least k experts
per MoE layer, and exactly k when every token agrees: no routing can read fewer, so the lower
end is a true bound at every batch and every skew, not an assumed exponent (real routers have
no published exponent to assume). Both ends use the same measured s = 1/τ, B = T·τ/R, idle
share and prompt regime; only the distinct experts per step differ, so the KV term is common
and the band is the weight term's. A spec's ``engine.routing_zipf`` replaces the bound by the
value under that stated skew (the user's assumption, labelled ``zipf:s``). The decode-only
figure gets its own band the same way. ``routing_unmeasured`` is raised whenever the band is
wider than ``ROUTING_BAND_FLAG_PT``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad
from tokenwatt.metrics.mbu.mixed_steps import StepRegime, estimate_mixed_steps
from tokenwatt.result import Mbu, MbuMixedSteps

__all__ = [
    "ROUTING_BAND_FLAG_PT",
    "ROUTING_SKEW_NOTE_PT",
    "RoutingBand",
    "reference_load",
    "routing_band",
    "routing_band_note",
    "routing_skew_note",
    "with_band",
]

ROUTING_BAND_FLAG_PT = 1.0  # band wider than this (points of MBU): flag routing_unmeasured
ROUTING_SKEW_NOTE_PT = 0.5  # measured routing moves MBU by more than this against uniform


@dataclass(frozen=True, slots=True)
class RoutingBand:
    """MBU and decode-only MBU under uniform routing (upper) and the fewest experts any routing
    could read, or a stated skew (lower)."""

    reference: str  # "fewest:k" (the bound) or "zipf:s" (engine.routing_zipf)
    mbu_upper: float
    mbu_lower: float
    decode_only_upper: float
    decode_only_lower: float

    @property
    def width_pt(self) -> float:
        """The wider of the two figures' bands, in points of MBU."""
        return 100.0 * max(
            self.mbu_upper - self.mbu_lower, self.decode_only_upper - self.decode_only_lower
        )

    @property
    def raised(self) -> bool:
        return self.width_pt > ROUTING_BAND_FLAG_PT


def routing_band(
    geometry: ModelGeometry,
    regime: StepRegime,
    *,
    batch_per_replica: float,
    steps_per_s: float,
    replicas: int,
    kv_bytes_per_output_token: float,
    kv_bytes_per_s: float,
    node_bandwidth_bytes_per_s: float,
    zipf_s: float | None = None,
    upper: MbuMixedSteps | None = None,
) -> RoutingBand | None:
    """The band of an MoE figure whose routing was not measured; None for a dense model or a
    measured expert load (then the figure is the measured value, no band). ``upper``: the
    headline's own uniform estimate, when the caller has it (not evaluated again)."""
    if not geometry.is_moe or regime.expert_load is not None:
        return None
    skewed = reference_load(geometry, zipf_s)
    figures = []
    for load in (None, skewed):
        mix = upper if load is None and upper is not None else estimate_mixed_steps(
            geometry,
            batch_per_replica=batch_per_replica,
            steps_per_s=steps_per_s,
            replicas=replicas,
            regime=dataclasses.replace(regime, expert_load=load),
            kv_bytes_per_output_token=kv_bytes_per_output_token,
        )  # fmt: skip
        figures.append(
            (
                (mix.weight_bytes_per_s + kv_bytes_per_s) / node_bandwidth_bytes_per_s,
                (mix.decode_only_weight_bytes_per_s + kv_bytes_per_s) / node_bandwidth_bytes_per_s,
            )
        )
    (up, dec_up), (low, dec_low) = figures
    return RoutingBand(skewed.source, up, low, dec_up, dec_low)


def reference_load(geometry: ModelGeometry, zipf_s: float | None) -> ExpertLoad:
    """The band's lower-end routing: the fewest experts any routing could read (None), or Zipf
    ``zipf_s`` where the spec states that skew."""
    if zipf_s is None:
        return ExpertLoad.fewest(geometry.experts, geometry.experts_per_token)
    return ExpertLoad.zipf(geometry.experts, geometry.experts_per_token, zipf_s)


def with_band(result: Mbu, band: RoutingBand | None) -> Mbu:
    """``result`` with the band's lower bounds, its note and ``routing_unmeasured`` when the
    band is wider than ``ROUTING_BAND_FLAG_PT`` (unchanged without a band)."""
    if band is None:
        return result
    flags = result.flags.model_copy(update={"routing_unmeasured": band.raised})
    return result.model_copy(
        update={
            "mbu_lower_bound": band.mbu_lower,
            "mbu_decode_only_lower_bound": band.decode_only_lower,
            "routing_reference": band.reference,
            "flags": flags,
            "notes": [*result.notes, routing_band_note(band)],
        }
    )


def routing_skew_note(source: str, skew: float) -> str:
    """A measured expert load's note: how far uniform routing would move MBU (``skew``, a
    fraction of the node's bandwidth, positive when uniform reads higher)."""
    return (
        f"routing from the measured expert load ({source}): uniform routing would read "
        f"{100 * abs(skew):.1f} pt {'higher' if skew >= 0 else 'lower'}"
    )


def routing_band_note(band: RoutingBand) -> str:
    """What the band means for each printed figure, direction first."""
    if band.reference.startswith("fewest:"):
        k = band.reference.split(":", 1)[1]
        low = (
            f"if every token picked the same {k} experts (the fewest any routing can read) it "
            f"reads {100 * band.mbu_lower:.1f} %, so the truth lies in "
            f"[{100 * band.mbu_lower:.1f}, {100 * band.mbu_upper:.1f}] % whatever the routing"
        )
    else:
        low = (
            f"under the stated skew ({band.reference}, engine.routing_zipf: an assumption, not "
            f"a bound) it reads {100 * band.mbu_lower:.1f} %, so the truth lies in "
            f"[{100 * band.mbu_lower:.1f}, {100 * band.mbu_upper:.1f}] % for any routing up "
            "to that skew"
        )
    return (
        f"routing not measured: MBU {100 * band.mbu_upper:.1f} % assumes uniform routing, an "
        f"upper bound; {low}; decode-only likewise reads high, in "
        f"[{100 * band.decode_only_lower:.1f}, {100 * band.decode_only_upper:.1f}] %; a "
        "measured expert load (engine.expert_load_file, or an engine's expert-load counters) "
        "collapses the band"
    )
