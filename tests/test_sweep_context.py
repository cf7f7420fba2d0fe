"""What a sweep's views state besides the frontier: the SLO, the price, each point's stop reason
and whether its boundary is only a lower bound, the energy's validity with its cause, $/Mtok
without an invalid energy, and per-device figures in the hardware's own unit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.hardware import custom_accelerator, get_accelerator
from tokenwatt.load.derive import _cost
from tokenwatt.report.sweep_html import PlotPoint, render_sweep_html, summary_lines
from tokenwatt.result import BenchResult, EnergySummary
from tokenwatt.spec import parse_spec
from tokenwatt.sweep_result import device_unit, operating_point

GOLDEN = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"
VERDICT = "samples: 2 readings in a 60 s window, 12 expected"


def _invalid_energy() -> dict[str, Any]:
    audit = {
        "source": "nvml", "scope": "gpu", "method": "sampled_power", "gpus_only": True,
        "window_s": 60.0, "samples_in_window": 2, "expected_period_s": 5.0, "valid": False,
        "verdict": VERDICT,
    }  # fmt: skip
    return {"energy_j": 1000.0, "joules_per_output_token": 2.0, "tokens_per_joule": 0.5,
            "source": "nvml", "scope": "gpu", "valid": False, "audit": [audit]}  # fmt: skip


def _result(stop: str = "max_probes", *, energy_valid: bool = False) -> BenchResult:
    data = json.loads(GOLDEN.read_text("utf-8"))
    data["search"]["stop_reason"] = stop
    b = data["boundary"]
    energy = _invalid_energy()
    energy["valid"] = energy_valid
    b["energy"] = energy
    gpu_usd = 2.0 * 2 / 3600 / b["goodput_output_tokens_per_s"] * 1e6
    energy_usd = 2.0 * 1e6 / 3.6e6 * 0.12  # J/token × Mtok ÷ J/kWh × $/kWh
    b["cost"] = {"price_per_gpu_hour": 2.0, "gpus": 2,
                 "goodput_output_tokens_per_s": b["goodput_output_tokens_per_s"],
                 "usd_per_mtok_gpu": gpu_usd, "price_per_kwh": 0.12,
                 "usd_per_mtok_energy": energy_usd,
                 "usd_per_mtok": gpu_usd + energy_usd}  # fmt: skip
    data["spec"]["hardware"]["price_per_gpu_hour"] = 2.0
    data["spec"]["hardware"]["price_per_kwh"] = 0.12
    return BenchResult.model_validate(data)


def test_operating_point_states_the_stop_the_bound_the_energy_and_the_cost() -> None:
    r = _result()
    op = operating_point(r)
    cost = r.boundary.cost if r.boundary else None
    assert cost is not None and cost.usd_per_mtok_gpu is not None
    assert op.stop_reason == "max_probes" and op.lower_bound
    assert op.energy_valid is False and op.energy_cause == VERDICT
    # the invalid energy's 0.0667 per Mtok is left out: the rental alone
    assert op.usd_per_mtok == pytest.approx(cost.usd_per_mtok_gpu)
    assert op.usd_per_mtok != pytest.approx(cost.usd_per_mtok)
    assert op.slo == r.slo and op.price_per_gpu_hour == 2.0 and op.price_per_kwh == 0.12
    assert op.device_unit == "GPU"
    valid = operating_point(_result("converged", energy_valid=True))
    assert not valid.lower_bound and valid.energy_cause is None
    assert valid.usd_per_mtok == pytest.approx(cost.usd_per_mtok_gpu + 2.0 / 3.6 * 0.12)


def test_device_unit_fits_the_hardware() -> None:
    h100 = get_accelerator("h100-sxm")
    assert device_unit(h100) == "GPU"
    assert device_unit(get_accelerator("mi300x")) == "GPU"
    assert device_unit(get_accelerator("tpu-v6e")) == "accelerator"
    cpu = custom_accelerator("cpu", bandwidth_bytes_per_s=2e10, memory_bytes=6e10)
    assert device_unit(cpu) == "node"  # custom figures, no device named
    from dataclasses import replace

    assert device_unit(replace(cpu, confidence="measured")) == "CPU socket"
    assert device_unit(None) == "node"


def test_cost_leaves_out_an_invalid_energy() -> None:
    """By hand: 2 per GPU-hour × 1 GPU at 1000 tok/s = 2/3600/1000 × 10⁶ = 0.556 per Mtok;
    2 J/token at 0.12 per kWh adds 2 × 10⁶ / 3.6·10⁶ × 0.12 = 0.0667 only when valid."""
    spec = parse_spec(
        {"name": "c", "model": {"source": "llama-3.1-8b"}, "endpoint": {"url": "sim"},
         "hardware": {"accelerator": "h100-sxm", "gpus": 1, "price_per_gpu_hour": 2.0,
                      "price_per_kwh": 0.12}},
        source="test",
    )  # fmt: skip
    bad = EnergySummary.model_validate(_invalid_energy())
    good = bad.model_copy(update={"valid": True})
    c_bad, c_good = _cost(spec, 1000.0, bad), _cost(spec, 1000.0, good)
    assert c_bad is not None and c_good is not None
    assert c_bad.usd_per_mtok_energy is None
    assert c_bad.usd_per_mtok == pytest.approx(2 / 3600 / 1000 * 1e6)
    assert c_good.usd_per_mtok == pytest.approx(2 / 3600 / 1000 * 1e6 + 2 / 3.6 * 0.12)


def test_sweep_page_and_summary_state_what_a_buyer_needs() -> None:
    ops = [
        operating_point(_result(), name="np=1"),
        operating_point(_result("converged"), name="np=2"),
    ]
    points = [PlotPoint(o.name, "ok", None, f"points/0{i}", o) for i, o in enumerate(ops)]
    page = render_sweep_html("s", points)
    assert "p99 TTFT ≤ 500 ms, p99 TPOT ≤ 60 ms" in page
    assert "2 per GPU-hour, 0.12 per kWh" in page
    assert "max_probes (boundary is a lower bound)" in page and "converged" in page
    assert f"invalid: {VERDICT}" in page
    assert "goodput tok/s/GPU" in page and "≥ " in page
    lines = summary_lines(points)
    assert lines[0] == "SLO: p99 TTFT ≤ 500 ms, p99 TPOT ≤ 60 ms"
    assert lines[1] == "price: 2 per GPU-hour, 0.12 per kWh"
    assert "stop max_probes (boundary is a lower bound); goodput ≥ " in lines[2]
    assert "tok/s per GPU" in lines[2] and f"energy invalid: {VERDICT}" in lines[2]
    assert "stop converged; goodput " in lines[3] and "≥" not in lines[3]


def test_a_cpu_sweep_is_per_cpu_socket_and_a_node_sweep_per_node() -> None:
    socket = operating_point(_result("converged")).model_copy(update={"device_unit": "CPU socket"})
    page = render_sweep_html("cpu", [PlotPoint("t=4", "ok", None, "p/0", socket)])
    assert "goodput tok/s/CPU socket" in page and "per CPU socket-hour" in page
    assert "tok/s/GPU" not in page and "per GPU" not in page
    node = socket.model_copy(update={"device_unit": "node"})
    lines = summary_lines([PlotPoint("n", "ok", None, "p/0", node)])
    g = node.goodput_output_tokens_per_s
    assert g is not None and f"goodput {g:,.1f} tok/s per node" in lines[2]
