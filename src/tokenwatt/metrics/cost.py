"""Cost per million output tokens at a probe's goodput: the buyer's figure.

    usd_per_mtok_gpu    = price_per_gpu_hour × gpus ÷ (goodput_tok_s × 3600 s/h) × 10⁶
    usd_per_mtok_energy = J per output token × 10⁶ ÷ (3.6 × 10⁶ J/kWh) × price_per_kwh
    usd_per_mtok        = usd_per_mtok_gpu + usd_per_mtok_energy (the second only when a
                          kWh price and a measured energy are both there)

Goodput, not throughput: a token that missed its SLO is not what the buyer pays for
(InferenceX prices at the interactivity target the same way). The rental price already
includes the power of a cloud GPU; ``price_per_kwh`` is for owned hardware, where the
electricity is a separate bill. "usd" names the spec's currency, whatever it is.
"""

from __future__ import annotations

from tokenwatt.result import CostFigures

__all__ = ["J_PER_KWH", "SECONDS_PER_HOUR", "TOKENS_PER_MTOK", "cost_figures"]

SECONDS_PER_HOUR = 3600.0
J_PER_KWH = 3.6e6
TOKENS_PER_MTOK = 1e6


def cost_figures(
    *,
    price_per_gpu_hour: float | None,
    gpus: int,
    goodput_output_tokens_per_s: float,
    joules_per_output_token: float | None = None,
    price_per_kwh: float | None = None,
) -> CostFigures | None:
    """The cost figures, or None without a GPU price (no figure is made up)."""
    if price_per_gpu_hour is None:
        return None
    gpu = None
    if goodput_output_tokens_per_s > 0:
        per_s = price_per_gpu_hour * gpus / SECONDS_PER_HOUR
        gpu = per_s / goodput_output_tokens_per_s * TOKENS_PER_MTOK
    energy = None
    if price_per_kwh is not None and joules_per_output_token is not None:
        energy = joules_per_output_token * TOKENS_PER_MTOK / J_PER_KWH * price_per_kwh
    total = None if gpu is None else gpu + (energy or 0.0)
    return CostFigures(
        price_per_gpu_hour=price_per_gpu_hour,
        gpus=gpus,
        goodput_output_tokens_per_s=goodput_output_tokens_per_s,
        usd_per_mtok_gpu=gpu,
        price_per_kwh=price_per_kwh,
        usd_per_mtok_energy=energy,
        usd_per_mtok=total,
    )
