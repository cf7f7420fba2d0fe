"""MBU in words, shared by the terminal report, the HTML report and ``tokenwatt probe``.

One place says how the two figures (headline ``mbu`` and ``mbu_decode_only``, each by its one
word: ``result.MBU_FIGURES``) and the raised flags read, so the three views cannot drift
apart: every raised flag is shown with the direction it moves the figure
(docs/methodology.md, "Assumptions and where they bend").
"""

from __future__ import annotations

from tokenwatt.report.format import fmt_float, fmt_pct
from tokenwatt.result import MBU_DECODE_ONLY, Mbu, MbuInputs

__all__ = [
    "FLAG_DIRECTION",
    "HEADLINE_NUMERATOR",
    "distinct_experts_at",
    "mbu_figures_text",
    "mbu_missing_reason",
    "mbu_notes",
    "raised_flags",
]

# The meaning of ``MbuInputs.headline_bytes_per_s`` in every view's inputs table.
HEADLINE_NUMERATOR = "the headline's bytes/s: MBU = this ÷ N·BW (R·s·W(B) + KV/s is the seed's)"

# Each MbuFlags field and which way it moves the printed figure (or why there is none).
FLAG_DIRECTION: dict[str, str] = {
    "no_decode": "no MBU: nothing decoded",
    "above_rated_bandwidth": "no MBU: above the rated bandwidth, an input is wrong",
    "over_slot_limit": "no MBU: batch above the slot limit, window not steady",
    "multi_token_chunks": "reads high (s = 1/τ overstates steps/s)",
    "moe_uniform_routing_upper_bound": "reads high if routing is skewed",
    "low_load_busy_bias": "reads high (weight term per busy time)",
    "mixed_steps": "headline counts prompt-routed experts; decode-only leaves them out "
    "(below the headline, not a correction)",
    "idle": "corrected by the measured busy share (unscaled would read high)",
    "small_batch": "outside the validated ±2 pt range (decode-only may read low)",
    "routing_skew": "measured routing moves it against uniform (see note)",
    "speculative_steps": "s, B and W counted in verify steps, the drafter's bytes added",
    "drafter_bytes_unknown": "reads low (the undeclared drafter's bytes left out)",
    "coalesced_chunks": "steps not measurable from chunks: seed formula, reads high",
    "prefill_only": "corrected: prompt-only time and bytes taken out (unscaled would read high)",
    "kv_pressure": "preemption: B corrected for stalled streams (uncorrected reads high); "
    "MBU between the raw-τ and corrected-τ values (see note)",
    "routing_unmeasured": "routing not measured: both figures are uniform upper bounds; "
    "the band down to the fewest experts any routing reads is wider than 1 pt",
    "tau_from_pooled_itl": "reads high (+0.6…+2.3 % on B): τ is the pooled mean ITL",
    "tau_from_tpot": "reads high (B +12 %, +25 % with preemption): τ is mean TPOT",
    "tau_from_median_itl": "reads low (B 0.66–0.99 × the engine's): τ is a median ITL",
    "kv_lengths_from_means": "lower bound: lengths known only as means, KV at fixed lengths",
}


def distinct_experts_at(i: MbuInputs) -> str:
    """Where ``expected_distinct_experts`` was evaluated: the seed's B under uniform routing,
    or a speculative verify pass's B·(k + 1) positions under its expert load."""
    if i.speculation is not None:
        sp = i.speculation
        return (
            f"at B·(k + 1) = {fmt_float(i.batch_per_replica)}·{sp.num_tokens + 1} verify "
            f"positions and riding prompts ({i.moe_layers} layers, {sp.routing} routing)"
        )
    return f"at B ({i.moe_layers} layers, uniform routing)"


def raised_flags(detail: Mbu | None) -> list[str]:
    """``name: direction`` for every raised flag, in FLAG_DIRECTION's order."""
    if detail is None:
        return []
    on = detail.flags.model_dump()
    return [f"{k}: {v}" for k, v in FLAG_DIRECTION.items() if on.get(k)]


def mbu_missing_reason(detail: Mbu | None) -> str:
    """Why a probe has no MBU figure, in a few words."""
    if detail is None:
        return "not derived"
    f = detail.flags
    if f.above_rated_bandwidth:
        return "refused: above the rated bandwidth (an input is wrong: see the self-checks)"
    if f.over_slot_limit:
        return "not derived (batch above the engine's slot limit)"
    if detail.mbu_decode_only is not None:
        return (
            f"headline not known (idle share not measured)  ·  decode-only "
            f"{fmt_pct(detail.mbu_decode_only)}"
        )
    return "not derived (no decode measured)"


def mbu_figures_text(mbu: float | None, detail: Mbu | None) -> str:
    """The headline with its split and the decode-only figure beside it."""
    if mbu is None:
        return mbu_missing_reason(detail)
    text = fmt_pct(mbu)
    if detail is None:
        return text
    if detail.mbu_weights is not None and detail.mbu_kv is not None:
        text += f"  (weights {fmt_pct(detail.mbu_weights)} + KV {fmt_pct(detail.mbu_kv)})"
    if detail.mbu_decode_only is not None:
        text += f"  ·  {MBU_DECODE_ONLY.label} {fmt_pct(detail.mbu_decode_only)}"
    if detail.flags.routing_unmeasured and detail.mbu_lower_bound is not None:
        text += (
            f"  ·  routing unmeasured: {fmt_pct(detail.mbu_lower_bound)}–{fmt_pct(mbu)} "
            f"({detail.routing_reference} to uniform)"
        )
    if detail.mbu_lengths_upper_bound is not None:
        text += f"  ·  lengths unknown: {fmt_pct(mbu)}–{fmt_pct(detail.mbu_lengths_upper_bound)}"
    return text


def mbu_notes(detail: Mbu | None) -> list[str]:
    """The notes a view lists beside MBU's inputs and flags, each said once: less the prose
    of a raised flag (its flag line says it, with its direction) and less the refusal's
    reason (the self-checks' warning, ``checks._above_rated``, carries it)."""
    if detail is None:
        return []
    restated = set(detail.flags.notes())
    refused = detail.flags.above_rated_bandwidth
    return [n for i, n in enumerate(detail.notes) if n not in restated and not (refused and i == 0)]
