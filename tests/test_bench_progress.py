"""The bench's live progress line and its ETA (``load.eta``), against hand calculations, and
``bench -q``: no progress, only the headline, the report's path and errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from test_bench import SPEC, run_cli
from tokenwatt.cli.bench import _Display
from tokenwatt.load.bench import BenchEvent
from tokenwatt.load.eta import (
    LOW_END_CLEAN,
    Eta,
    bound_probes,
    duration_text,
    full_probe_s,
    probe_left_s,
    probes_to_come,
    progress_text,
)
from tokenwatt.load.probe import Phase, ProbeProgress
from tokenwatt.result import load_result
from tokenwatt.spec import ProbeSettings, SearchSettings, parse_spec

PROBE = ProbeSettings(
    warmup_s=10, min_duration_s=60, min_requests=200, max_duration_s=300, drain_timeout_s=30
)


def _progress(
    phase: Phase,
    *,
    elapsed_s: float,
    window_s: float,
    counted: int,
    max_requests: int | None = None,
) -> ProbeProgress:
    return ProbeProgress(
        phase=phase,
        elapsed_s=elapsed_s,
        window_elapsed_s=window_s,
        min_duration_s=PROBE.min_duration_s,
        max_duration_s=PROBE.max_duration_s,
        min_requests=PROBE.min_requests,
        max_requests=max_requests,
        sent=counted,
        finished=counted,
        in_flight=0,
        counted=counted,
        counted_finished=counted,
        counted_failed=0,
        counted_output_tokens=0,
    )


def _left(p: ProbeProgress, rate: float | None, drain_s: float = 4.0) -> float | None:
    return probe_left_s(p, warmup_s=10, rate_rps=rate, drain_s=drain_s, drain_timeout_s=30)


def test_time_left_in_the_probe_by_hand() -> None:
    # window 20 s old with 50 of 200 requests at 2.5 req/s: 40 s by time, 150/2.5 = 60 s by
    # count; the count binds: 60 s, plus a 4 s drain
    assert _left(_progress("window", elapsed_s=30, window_s=20, counted=50), 2.5) == 64
    # 3 s into a 10 s warm-up: 7 s + a full window max(60 s, 200/2.5 = 80 s) + 4 s drain
    assert _left(_progress("warmup", elapsed_s=3, window_s=0, counted=0), 2.5) == 91
    # 5 s drained (100 − 10 warm-up − 85 window) of an 8 s tail: 3 s; of a 4 s tail: none
    drain = _progress("drain", elapsed_s=100, window_s=85, counted=200)
    assert _left(drain, 2.5, drain_s=8) == 3 and _left(drain, 2.5) == 0
    # 290 s into the window at 0.5 req/s, 100 of 200: 200 s by count, capped at the 10 s
    # that max_duration_s leaves
    assert _left(_progress("window", elapsed_s=300, window_s=290, counted=100), 0.5) == 14
    # closed loop with max_requests = 10: 4 counted in 6 s is 2/3 req/s; 6 more take 9 s
    exact = _progress("window", elapsed_s=16, window_s=6, counted=4, max_requests=10)
    assert _left(exact, None) == pytest.approx(13)
    # nothing counted yet in a closed loop: no rate to go by, no figure
    none_yet = _progress("window", elapsed_s=10.5, window_s=0.5, counted=0, max_requests=10)
    assert _left(none_yet, None) is None
    # a whole probe at 5 req/s: 10 s warm-up + max(60 s, 40 s) + 4 s; the drain within 30 s
    assert full_probe_s(PROBE, 5.0, 4.0) == 74 and full_probe_s(PROBE, 5.0, 99.0) == 100


def test_probes_to_come_by_hand() -> None:
    seq = SearchSettings(precision=0.05, growth=2.0, max_probes=20, sequential=True)
    # the two-sided search's low-end probes are counted in tests/test_eta_precision.py; here
    # the low end's clean requests are already judged (clean_near), so none is added
    full = {"clean_near": LOW_END_CLEAN}
    # ln 1.2 / ln 1.1 = 1.91: one halving, the probe in flight; then the two drift checks
    assert probes_to_come(seq, index=5, checks_started=0, lo_rps=10, hi_rps=12, **full) == 2
    # ln 2 / ln 1.1 = 7.27: ⌈log2 7.27⌉ = 3 halvings, 2 after this one, + 2 checks
    assert probes_to_come(seq, index=5, checks_started=0, lo_rps=10, hi_rps=20, **full) == 4
    # still growing: this probe brackets (×2), then 3 halvings, + 2 checks
    assert probes_to_come(seq, index=2, checks_started=0, lo_rps=10, hi_rps=None, **full) == 5
    # one search probe left in max_probes: 1 + 2 checks
    assert probes_to_come(seq, index=19, checks_started=0, lo_rps=10, hi_rps=None, **full) == 3
    # in the first check: the second is left
    assert probes_to_come(seq, index=9, checks_started=1, lo_rps=10, hi_rps=11, **full) == 1
    bracket = SearchSettings(precision=0.05, growth=2.0, max_probes=20, sequential=False)
    # ln 2 / ln 1.05 = 14.2: ⌈log2 14.2⌉ = 4 halvings, 3 after this one; no drift checks
    assert probes_to_come(bracket, index=3, checks_started=0, lo_rps=10, hi_rps=20) == 3
    assert bound_probes(seq) == 22 and bound_probes(bracket) == 20


def test_progress_text_by_hand() -> None:
    # 40 s left + 4 probes × 35 s = 180 s: 3 min
    eta = Eta.of(index=3, bound=10, rate_rps=12.5, left_s=40, to_come=4, per_probe_s=35)
    assert eta.to_go_s == 180
    assert progress_text(eta) == (
        "probe 3 of ≤ 10 · 12.5 req/s · 40 s left in this probe · about 3 min to go"
    )
    assert duration_text(99.4) == "99 s" and duration_text(100) == "2 min"
    assert duration_text(5999) == "1 h 40 min"


def test_the_display_shows_the_line_live() -> None:
    """The bench display at a known state: bracket 10–20 req/s, two finished probes of 30 and
    50 s, probe 3 at 14.1 req/s 2 s into its window with 20 counted."""
    spec = parse_spec(yaml.safe_load(yaml.safe_dump(SPEC)), source="test")
    p = spec.search.probe  # 0.5 s warm-up, ≥ 1 s, ≥ 15 requests, ≤ 4 s
    display = _Display(Console(file=io.StringIO(), width=200), spec)
    display(BenchEvent("search_step", index=2, lo_rps=10.0, hi_rps=20.0))
    display.durations_s = [30.0, 50.0]
    display.drain_s = 0.25
    display(BenchEvent("probe_start", index=3, rate_rps=14.1, phase="fit", warmup_s=0.5))
    prog = ProbeProgress(
        phase="window", elapsed_s=2.5, window_elapsed_s=2.0, min_duration_s=p.min_duration_s,
        max_duration_s=p.max_duration_s, min_requests=p.min_requests, max_requests=None,
        sent=28, finished=25, in_flight=3, counted=20, counted_finished=17, counted_failed=0,
        counted_output_tokens=272,
    )  # fmt: skip
    display(BenchEvent("probe_progress", index=3, rate_rps=14.1, phase="fit", progress=prog))
    # left: max(1 − 2, (15 − 20)/14.1) → 0 s of window + 0.25 s drain;
    # to come: ln 2 / ln 1.1 = 7.27 (precision 0.45, sequential: the bisection's width is
    # the resolution, min(0.45, 5 %)): ⌈log2⌉ = 3, 2 after this one, + 1 for the low end
    # (no clean pass yet), + 2 checks: 5 × 40 s = 200 s; the low end's window holds
    # 765 − 280 = 485 requests more than a pass, at the bracket's 10 req/s 48.5 s:
    # 0.25 + 200 + 48.5 = 248.8 s, "4 min"
    (task,) = display.progress.tasks
    assert (
        task.description
        == "probe 3 of ≤ 10 · 14.1 req/s · 0 s left in this probe · about 4 min to go"
    )


@pytest.mark.timeout(200)
def test_quiet_bench_prints_only_the_result(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    res = run_cli("bench", str(spec), "--out", str(out), "-q")
    assert res.returncode == 0, res.stderr[-2000:]
    r = load_result(out)
    assert r.boundary is not None and r.probes
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    # the headline: what ran, the SLO, goodput with its interval, tokens per joule, MBU
    assert lines[0].startswith("bench-test · SIMULATED"), res.stdout
    assert any(x.startswith("SLO goodput") for x in lines[:4]) and "95 %" in res.stdout
    assert lines[-1].startswith("report:") and lines[-1].endswith("report.html")
    for noise in ("probe 1", "bracket", "target:", "writing to", "single stream", "Probes"):
        assert noise not in res.stdout
    assert len(lines) <= 10, res.stdout
    assert res.stderr == ""
