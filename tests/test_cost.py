"""$/Mtok at the operating point against a hand calculation, and the spec's price fields."""

from __future__ import annotations

import pytest

from tokenwatt.errors import SpecError
from tokenwatt.metrics.cost import cost_figures
from tokenwatt.spec import parse_spec


def test_usd_per_mtok_by_hand() -> None:
    # 8 GPUs at $2.50/h = $20/h = $0.005556/s; at 10,000 goodput tok/s a million tokens takes
    # 100 s: $0.5556. Energy: 0.5 J/token × 10⁶ = 500 kJ = 0.1389 kWh × $0.12 = $0.01667.
    c = cost_figures(
        price_per_gpu_hour=2.5,
        gpus=8,
        goodput_output_tokens_per_s=10_000.0,
        joules_per_output_token=0.5,
        price_per_kwh=0.12,
    )
    assert c is not None
    assert c.usd_per_mtok_gpu == pytest.approx(20.0 / 3600 * 100, rel=1e-12)
    assert c.usd_per_mtok_gpu == pytest.approx(0.555556, rel=1e-5)
    assert c.usd_per_mtok_energy == pytest.approx(500_000 / 3.6e6 * 0.12, rel=1e-12)
    assert c.usd_per_mtok == pytest.approx(0.555556 + 0.016667, rel=1e-4)


def test_no_price_no_figure_and_no_goodput_no_cost() -> None:
    assert cost_figures(price_per_gpu_hour=None, gpus=1, goodput_output_tokens_per_s=5.0) is None
    c = cost_figures(price_per_gpu_hour=3.0, gpus=1, goodput_output_tokens_per_s=0.0)
    assert c is not None and c.usd_per_mtok is None and c.usd_per_mtok_gpu is None
    # a kWh price without a measured energy adds nothing (rental alone)
    r = cost_figures(
        price_per_gpu_hour=3.6, gpus=1, goodput_output_tokens_per_s=1000.0, price_per_kwh=0.2
    )
    assert r is not None and r.usd_per_mtok_energy is None
    assert r.usd_per_mtok == pytest.approx(1.0)  # $0.001/s ÷ 1000 tok/s × 10⁶


def test_price_fields_in_the_spec() -> None:
    base = {"model": {"source": "qwen3-8b"}, "endpoint": {"url": "sim"}}
    spec = parse_spec(
        {
            **base,
            "hardware": {
                "accelerator": "h100-sxm",
                "price_per_gpu_hour": 2.49,
                "price_per_kwh": 0.1,
            },
        }
    )
    assert spec.hardware.price_per_gpu_hour == 2.49 and spec.hardware.price_per_kwh == 0.1
    with pytest.raises(SpecError, match=r"hardware\.price_per_gpu_hour") as err:
        parse_spec({**base, "hardware": {"accelerator": "h100-sxm", "price_per_gpu_hour": -1}})
    assert "\n" not in str(err.value)
