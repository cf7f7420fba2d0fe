"""The witness's step weighting: τ weights each step by its batch, so when steps that carry
more streams last longer the client's B = T·τ reads above the engine's tokens per step and
1/τ below its steps per second, with T the same. Hand-built stamps, checked by hand: the
client's own step count from its token gaps (``metrics.mbu.step_gaps``) gives the engine's
figures, and only then is the pair explained."""

from __future__ import annotations

import pytest

from tokenwatt.engine import ClientMechanisms, compare_client_engine, window_figures
from tokenwatt.engine.compare import STEP_WEIGHTED, UNEXPLAINED
from tokenwatt.metrics.mbu.step_gaps import step_law_from_gaps
from tokenwatt.records import RequestRecord
from witness_streams import MS
from witness_streams import stream as _stream


def _records() -> list[RequestRecord]:
    """10 streams decode through [0, 2] s; 10 more join at 1 s. Steps: 20 ms at batch 10
    (50 steps), then 40 ms at batch 20 (25 steps): the longer steps carry more streams."""
    first = list(range(0, 1000, 20)) + list(range(1000, 2001, 40))
    second = list(range(1000, 2001, 40))
    return [_stream(i, first) for i in range(10)] + [_stream(10 + i, second) for i in range(10)]


def test_step_weighting_explained_by_the_clients_own_step_count() -> None:
    recs = _records()
    # by hand: the engine made 75 steps and 50·10 + 25·20 = 1000 tokens in 2 s → B = 13.33,
    # s = 37.5/s; the client's T = 500 tok/s, τ = (10·2 s + 10·1 s) ÷ (10·75 + 10·25) = 30 ms
    # → T·τ = 15 (+12.5 %), 1/τ = 33.3/s (−11.1 %)
    law = step_law_from_gaps(recs, 0, 2000 * MS, 1)
    assert law is not None
    assert law.steps_per_s == pytest.approx(37.5)
    assert law.mean_batch == pytest.approx(40 / 3)
    w = window_figures("vllm", "u", duration_s=2.0, generated_tokens=1000, decode_steps=75)
    kw = {"client_tokens_per_s": 500.0, "client_tau_s": 0.030, "replicas": 1, "window": w}
    plain = {a.figure: a for a in compare_client_engine(**kw)}  # type: ignore[arg-type]
    assert plain["B"].ok is False and plain["B"].rel_diff == pytest.approx(0.125)
    assert UNEXPLAINED in (plain["B"].cause or "")
    mech = ClientMechanisms(steps_per_s=law.steps_per_s, step_batch=law.mean_batch)
    out = {a.figure: a for a in compare_client_engine(**kw, mechanisms=mech)}  # type: ignore[arg-type]
    assert out["T"].ok and out["B"].ok and out["s"].ok
    assert (out["B"].cause or "").startswith(STEP_WEIGHTED)
    assert "+12.5%" in (out["B"].cause or "")


def test_one_of_the_pair_past_its_tolerance_is_explained_too() -> None:
    # the same steps with s's tolerance at 12 %: s (−11.1 %) is within it, B (+12.5 %) is not;
    # the covariance moved both, so B's disagreement is the same mechanism (seen in a loaded
    # demo: B +5.9 % against ±5.3 %, s −5.2 % against ±5.6 %, both sides true to the truth log)
    recs = _records()
    law = step_law_from_gaps(recs, 0, 2000 * MS, 1)
    assert law is not None
    w = window_figures("vllm", "u", duration_s=2.0, generated_tokens=1000, decode_steps=75)
    tol = {"T": 0.02, "B": 0.05, "s": 0.12, "alpha": 0.03}
    kw = {"client_tokens_per_s": 500.0, "client_tau_s": 0.030, "replicas": 1, "window": w}
    plain = {a.figure: a for a in compare_client_engine(**kw, tolerances=tol)}  # type: ignore[arg-type]
    assert plain["s"].ok is True and plain["B"].ok is False
    mech = ClientMechanisms(steps_per_s=law.steps_per_s, step_batch=law.mean_batch)
    out = {a.figure: a for a in compare_client_engine(**kw, tolerances=tol, mechanisms=mech)}  # type: ignore[arg-type]
    assert out["B"].ok is True and (out["B"].cause or "").startswith(STEP_WEIGHTED)
    # the wrong direction (client B lower) is not this mechanism
    low = {**kw, "client_tau_s": 0.024}
    wrong = {a.figure: a for a in compare_client_engine(**low, tolerances=tol, mechanisms=mech)}  # type: ignore[arg-type]
    assert wrong["B"].ok is False and UNEXPLAINED in (wrong["B"].cause or "")


def test_the_engines_running_gauge_confirms_the_step_weighting() -> None:
    # a loaded client whose token gaps cannot count the steps: the engine's own time-weighted
    # running requests (17.0, ±0.3 standard error) read the client's T·τ = 17.1, while its
    # tokens per step read 15.5 (+10.3 %) and steps/s 35.5 (−9.4 %); T agrees
    w = window_figures(
        "vllm", "u", duration_s=10.0, generated_tokens=5500, decode_steps=355,
        running_mean=17.0, running_sem=0.3,
    )  # fmt: skip
    kw = {"client_tokens_per_s": 550.0, "client_tau_s": 17.1 / 550.0, "replicas": 1, "window": w}
    out = {a.figure: a for a in compare_client_engine(**kw)}  # type: ignore[arg-type]
    assert out["B"].rel_diff == pytest.approx(17.1 / (5500 / 355) - 1)
    assert out["B"].ok and out["s"].ok
    assert (out["B"].cause or "").startswith(STEP_WEIGHTED) and "running" in (out["B"].cause or "")
    # the gauge far from the client's B (a client B too high for it): no explanation
    far = window_figures(
        "vllm", "u", duration_s=10.0, generated_tokens=5500, decode_steps=355,
        running_mean=15.6, running_sem=0.3,
    )  # fmt: skip
    bad = {a.figure: a for a in compare_client_engine(**{**kw, "window": far})}  # type: ignore[arg-type]
    assert bad["B"].ok is False and UNEXPLAINED in (bad["B"].cause or "")
    # a gauge without its standard error (fewer than 3 scrapes) explains nothing either
    bare = window_figures(
        "vllm", "u", duration_s=10.0, generated_tokens=5500, decode_steps=355, running_mean=17.0
    )
    none = {a.figure: a for a in compare_client_engine(**{**kw, "window": bare})}  # type: ignore[arg-type]
    assert none["B"].ok is False


def test_a_step_count_that_disagrees_explains_nothing() -> None:
    w = window_figures("vllm", "u", duration_s=2.0, generated_tokens=1000, decode_steps=75)
    mech = ClientMechanisms(steps_per_s=33.3, step_batch=15.0)  # the client's τ again
    out = {a.figure: a for a in compare_client_engine(
        client_tokens_per_s=500.0, client_tau_s=0.030, replicas=1, window=w, mechanisms=mech,
    )}  # fmt: skip
    assert out["B"].ok is False and UNEXPLAINED in (out["B"].cause or "")


def test_s_tolerance_carries_the_measured_scrape_edge() -> None:
    # the client's 1000 tokens in its window read 900 on the engine's clock: the scrapes'
    # interpolation moved 10 % of the window's count, and s (read the same way) may too
    w = window_figures("vllm", "u", duration_s=10.0, generated_tokens=900, decode_steps=300)
    base = {a.figure: a for a in compare_client_engine(
        client_tokens_per_s=100.0, client_tau_s=0.03, replicas=1, window=w)}  # fmt: skip
    edged = {a.figure: a for a in compare_client_engine(
        client_tokens_per_s=100.0, client_tau_s=0.03, replicas=1, window=w,
        client_tokens_per_s_engine_clock=90.0)}  # fmt: skip
    assert edged["s"].tolerance == pytest.approx(base["s"].tolerance + 0.10)
    assert edged["B"].tolerance == pytest.approx(base["B"].tolerance)
    assert base["s"].tolerance == pytest.approx(0.05 + 1 / 300)
