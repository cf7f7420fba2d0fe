"""Tokens per joule and joules per output token, against hand calculations and a published
ML.ENERGY leaderboard row."""

from __future__ import annotations

import pytest

from tokenwatt.metrics.energy import energy_metrics
from tokenwatt.power import EnergyReport, ScopeEnergy

S = 1_000_000_000


def scope(name: str, energy_j: float | None, window_s: float, **kw: object) -> ScopeEnergy:
    base: dict[str, object] = {
        "scope": name,
        "source": "nvml",
        "source_detail": "0: NVIDIA H100 80GB HBM3",
        "kind": "energy_counter",
        "measured": True,
        "energy_j": energy_j,
        "mean_power_w": None if energy_j is None else energy_j / window_s,
        "window_s": window_s,
        "devices": 1,
        "samples_used": 600,
        "coverage": 1.0,
        "update_period_s": 0.1,
        "flags": (),
    }
    base.update(kw)
    return ScopeEnergy(**base)  # type: ignore[arg-type]


def report(*scopes: ScopeEnergy, window_s: float, primary: str | None = "gpu") -> EnergyReport:
    return EnergyReport(
        start_ns=5 * S,
        end_ns=5 * S + int(window_s * S),
        scopes={s.scope: s for s in scopes},
        sources=tuple(scopes),
        primary_scope=primary,
    )


def test_hand_calculation_per_scope() -> None:
    rep = report(
        scope("gpu", 500.0, 20.0),
        scope("node", 1250.0, 20.0, source="redfish", kind="power_sampler"),
        window_s=20.0,
    )
    m = energy_metrics(rep, output_tokens=2000)
    gpu, node = m.scopes["gpu"], m.scopes["node"]
    assert gpu.tokens_per_joule == pytest.approx(4.0)  # 2000 / 500
    assert gpu.joules_per_output_token == pytest.approx(0.25)
    assert gpu.mean_power_w == pytest.approx(25.0)  # 500 J / 20 s
    assert node.tokens_per_joule == pytest.approx(1.6)  # 2000 / 1250
    assert node.source == "redfish" and node.kind == "power_sampler"
    assert m.primary is gpu and m.tokens_per_joule == pytest.approx(4.0)
    assert m.joules_per_output_token == pytest.approx(0.25)
    assert m.measured and gpu.valid


def test_ml_energy_leaderboard_row() -> None:
    # ML.ENERGY v3, Llama-3.1-8B on 1×H100, max_num_seqs 128: 669 W (GPU sum), 0.095 J/tok,
    # 10.5 tok/J. At that power a 60 s window at 669/0.095 tok/s holds these tokens:
    window = 60.0
    tokens = round(669.0 / 0.095 * window)
    m = energy_metrics(report(scope("gpu", 669.0 * window, window), window_s=window), tokens)
    assert m.joules_per_output_token == pytest.approx(0.095, rel=1e-4)
    assert m.tokens_per_joule == pytest.approx(10.5, rel=0.01)


def test_not_measured_is_none_everywhere() -> None:
    m = energy_metrics(report(window_s=10.0, primary=None), output_tokens=1000)
    assert m.primary is None and not m.measured
    assert m.tokens_per_joule is None and m.joules_per_output_token is None
    assert m.model_dump()["tokens_per_joule"] is None
    gone = energy_metrics(
        report(scope("gpu", None, 10.0, flags=("no_samples",)), window_s=10.0), 1000
    )
    assert gone.tokens_per_joule is None and gone.joules_per_output_token is None
    assert not gone.measured and gone.primary is not None and not gone.primary.valid


def test_modelled_is_computed_but_labelled() -> None:
    s = scope(
        "gpu",
        7000.0,
        10.0,
        source="constant",
        kind="power_sampler",
        measured=False,
        flags=("modelled",),
    )
    m = energy_metrics(report(s, window_s=10.0), output_tokens=3500)
    p = m.primary
    assert p is not None and p.modelled and not p.measured and not p.valid
    assert p.tokens_per_joule == pytest.approx(0.5)
    assert not m.measured  # a model is never reported as a measurement
    assert m.model_dump()["scopes"]["gpu"]["modelled"] is True
    assert m.is_modelled


def test_edge_cases_zero_tokens_zero_energy_and_bad_input() -> None:
    m = energy_metrics(report(scope("gpu", 300.0, 3.0), window_s=3.0), output_tokens=0)
    assert m.tokens_per_joule == 0.0 and m.joules_per_output_token is None
    z = energy_metrics(
        report(scope("gpu", 0.0, 3.0, flags=("zero_energy",)), window_s=3.0), output_tokens=10
    )
    assert z.tokens_per_joule is None and not z.primary.valid  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="output_tokens must be >= 0"):
        energy_metrics(report(window_s=1.0), output_tokens=-1)


def test_flags_travel_and_fit_the_result_schema() -> None:
    from tokenwatt.result import EnergySummary

    s = scope("gpu", 42.0, 0.5, flags=("window_short",))
    m = energy_metrics(report(s, window_s=0.5), output_tokens=84)
    d = m.primary.model_dump()  # type: ignore[union-attr]
    assert d["flags"] == ["window_short"] and d["valid"] is False
    summary = EnergySummary.model_validate(d)
    assert summary.tokens_per_joule == pytest.approx(2.0)
    assert summary.joules_per_output_token == pytest.approx(0.5)
    assert summary.scope == "gpu" and summary.source == "nvml" and summary.modelled is False
    assert summary.flags == ["window_short"]


def test_whole_metrics_dict_fills_the_result_headline() -> None:
    from tokenwatt.result import EnergySummary

    rep = report(
        scope("gpu", 900.0, 30.0),
        scope("cpu", 300.0, 30.0, source="rapl"),
        window_s=30.0,
    )
    # what energy_metrics returns is the result's type; its file form reads back the same
    summary = energy_metrics(rep, 4500)
    assert EnergySummary.model_validate_json(summary.model_dump_json()) == summary
    assert summary.scope == "gpu" and summary.source == "nvml"
    assert summary.tokens_per_joule == pytest.approx(5.0)  # 4500 / 900
    assert summary.mean_power_w == pytest.approx(30.0)
    assert summary.scopes["cpu"].tokens_per_joule == pytest.approx(15.0)
    assert not summary.is_modelled
