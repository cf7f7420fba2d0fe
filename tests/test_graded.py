"""Graded answers in the measuring window: the tasks, the grading rule, accuracy with its
Wilson interval, the accuracy floor, and the simulator's degrading answers as the truth.

The simulator works the tasks out from the prompt text itself (``sim.answers``, no code shared
with ``traffic.graded``), so the grader and the simulator agreeing is a check of both; with
``sim.answer_error`` it decides which answers go wrong and counts them, the truth the client's
accuracy is checked against over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from builders import streamed_record
from tokenwatt.errors import SpecError
from tokenwatt.load.consistency import consistency_prompts
from tokenwatt.load.probe import ProbeRun, run_probe
from tokenwatt.load.target import open_target
from tokenwatt.metrics.accuracy import probe_accuracy, wilson_interval
from tokenwatt.metrics.slo import Limits, judge_probe
from tokenwatt.report.labels import accuracy_text, describe_slo
from tokenwatt.result import load_result
from tokenwatt.send.opening import open_sender
from tokenwatt.sim.answers import answer_words, error_probability, wrong_answer
from tokenwatt.simsettings import AnswerErrorSettings
from tokenwatt.spec import parse_spec
from tokenwatt.spec.graded import GradedSection
from tokenwatt.traffic.graded import (
    GradedSlice,
    GradedTask,
    grade,
    graded_plans,
    make_task,
    public_set,
)
from tokenwatt.traffic.schedule import make_source
from tokenwatt.traffic.workload import RequestPlan

BASE: dict[str, Any] = {
    "model": {"source": "llama-3.1-8b"},
    "hardware": {"accelerator": "h100-sxm", "gpus": 1},
    "endpoint": {"url": "sim"},
    "workload": {"input_tokens": 64, "output_tokens": 16, "seed": 5},
}


# -- tasks and grading ------------------------------------------------------------------------
def test_simulator_solves_every_generated_task_as_the_generator_states_it() -> None:
    """Two implementations, one from the prompt text alone: they agree on 600 seeded tasks (the
    word problems the simulator knows by heart)."""
    rng = np.random.default_rng(11)
    for kind in ("copy", "count", "arithmetic", "gsm8k"):
        for _ in range(150):
            task = make_task(kind, rng)  # type: ignore[arg-type]
            assert task.prompt.endswith("\nAnswer:")
            assert answer_words(task.prompt) == task.answer.split(), task


def test_task_answers_by_hand() -> None:
    assert answer_words("Compute 12 * 7.\nAnswer:") == ["84"]
    assert answer_words("Compute 5 - 9.\nAnswer:") == ["-4"]
    assert answer_words("How many words are in this list? a b c d\nAnswer:") == ["4"]
    assert answer_words("Repeat these words exactly: x y\nAnswer:") == ["x", "y"]
    assert answer_words("Compute 12 * 7.") is None  # not a task prompt
    assert answer_words([1, 2, 3]) is None


@pytest.mark.parametrize(
    ("task", "output", "right"),
    [
        (GradedTask("arithmetic", "", "84"), " 84", True),
        (GradedTask("arithmetic", "", "84"), " 84 the of and", True),  # words after: no matter
        (GradedTask("arithmetic", "", "84"), "The answer is 84.", True),
        (GradedTask("arithmetic", "", "84"), " 85 84", False),  # the first integer counts
        (GradedTask("arithmetic", "", "-4"), " -4", True),
        (GradedTask("arithmetic", "", "4"), " -4", False),
        (GradedTask("count", "", "3"), "", False),
        (GradedTask("copy", "", "apple river"), " Apple, river. and more", True),
        (GradedTask("copy", "", "apple river"), " river apple", False),
        (GradedTask("copy", "", "apple river"), " apple", False),
        (GradedTask("gsm8k", "", "57500"), " 1150 * 50 = $57,500 a year.", True),  # last number
        (GradedTask("gsm8k", "", "26"), "X = $26.00", True),
        (GradedTask("gsm8k", "", "18"), "18 eggs, so 9 * 2", False),
        (GradedTask("gsm8k", "", "18"), "no number", False),
    ],
)
def test_grading_rule(task: GradedTask, output: str, right: bool) -> None:
    assert grade(task, output) is right


def test_bundled_public_set_with_its_licence() -> None:
    """GSM8K's first 27 test problems, the final answers as the source gives them; two by hand."""
    problems = public_set()
    assert len(problems) == 27 and all(float(a) == int(a) for _, a in problems)
    assert len({q for q, _ in problems}) == 27
    by_start = {q.split()[0]: a for q, a in problems}
    assert by_start["Janet\u2019s"] == str((16 - 3 - 4) * 2)
    assert by_start["James"] == str(3 * 3 * 60)
    here = Path(__file__).parents[1] / "src" / "tokenwatt" / "examples" / "graded"
    assert "MIT License" in (here / "LICENSE-gsm8k.txt").read_text()
    assert "openai/grade-school-math" in (here / "SOURCE.md").read_text()
    plan = next(GradedSlice(GradedSection(fraction=1, tasks=["gsm8k"]), 1).apply(iter(_plans(1))))
    assert plan.max_tokens == 256 and plan.task is not None and plan.task.kind == "gsm8k"


def test_wrong_answers_grade_wrong() -> None:
    rng = np.random.default_rng(3)
    for kind in ("copy", "count", "arithmetic", "gsm8k"):
        for _ in range(50):
            t = make_task(kind, rng)  # type: ignore[arg-type]
            assert not grade(t, " " + " ".join(wrong_answer(t.answer.split())))


def test_error_probability_law() -> None:
    knob = AnswerErrorSettings(base=0.01, per_batch=0.1)
    assert error_probability(knob, 1) == pytest.approx(0.01)
    assert error_probability(knob, 5) == pytest.approx(0.41)
    assert error_probability(knob, 50) == 1.0


def _plans(n: int) -> list[RequestPlan]:
    return [RequestPlan(i, [7] * 10, 10, 100) for i in range(n)]


def test_slice_is_seeded_and_takes_its_fraction() -> None:
    section = GradedSection(fraction=0.25, tasks=["count", "arithmetic"], max_tokens=8)
    a = list(GradedSlice(section, 9).apply(iter(_plans(4000))))
    b = list(GradedSlice(section, 9).apply(iter(_plans(4000))))
    assert a == b  # request i of a seed: the same task in every probe and rerun
    graded = [p for p in a if p.task is not None]
    share = len(graded) / len(a)
    assert abs(share - 0.25) < 3 * (0.25 * 0.75 / 4000) ** 0.5
    assert {p.task.kind for p in graded if p.task} == {"count", "arithmetic"}
    for p in graded:
        assert p.task is not None and p.prompt == p.task.prompt and p.max_tokens == 8
        assert p.prompt_tokens_client == len(p.task.prompt.split())
    assert all(p.prompt == [7] * 10 for p in a if p.task is None)


def test_spec_refusals() -> None:
    with pytest.raises(SpecError, match=r"slo\.accuracy_min needs graded answers"):
        parse_spec({**BASE, "slo": {"accuracy_min": 0.9}})
    with pytest.raises(SpecError, match="graded"):
        parse_spec({**BASE, "graded": {"fraction": 0}})
    spec = parse_spec(
        {**BASE, "graded": {"fraction": 0.5}, "workload": {**BASE["workload"], "sessions": {}}}
    )
    with pytest.raises(SpecError, match=r"workload\.sessions"):
        graded_plans(iter(_plans(3)), spec, 1)


# -- accuracy and the floor -------------------------------------------------------------------
def test_wilson_interval_by_hand() -> None:
    # 8 of 10, z = 1.95996: centre (0.8 + z²/20)/(1 + z²/10) = 0.71665, half-width 0.22658
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.49016, abs=1e-5) and hi == pytest.approx(0.94332, abs=1e-5)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert wilson_interval(10, 10)[1] == 1.0


def _graded_records(right: int, wrong: int, failed: int = 0) -> list[Any]:
    out = []
    for i in range(right + wrong + failed):
        r = streamed_record(i, [2_000_000 + i], sent_ns=1_000_000, prompt_tokens=10)
        r.task = "count"
        if i < right + wrong:
            r.correct = i < right
        else:
            r.status, r.error_kind = "error", "reset"
        out.append(r)
    out.append(streamed_record(99, [2_000_000], sent_ns=1_000_000, prompt_tokens=10))  # ungraded
    return out


def test_probe_accuracy_counts_judged_answers_only() -> None:
    acc = probe_accuracy(_graded_records(6, 2, failed=1))
    assert acc is not None
    assert (acc.graded, acc.right, acc.unjudged, acc.accuracy) == (8, 6, 1, 0.75)
    assert (acc.accuracy_low, acc.accuracy_high) == wilson_interval(6, 8)
    assert acc.by_task == {"count": (6, 8)}
    assert probe_accuracy(_graded_records(0, 0)[-1:]) is None


def test_accuracy_floor_fails_the_probe_alone() -> None:
    limits = Limits("percentile", 1.0, 1.0, None, 0.99, 0.9, accuracy_min=0.8)
    ok = judge_probe(limits, _graded_records(9, 1), origin_ns=1_000_000)
    assert ok.passed, ok.reason
    bad = judge_probe(limits, _graded_records(7, 3), origin_ns=1_000_000)
    assert not bad.passed and bad.failed == ["accuracy"]
    assert bad.reason == "accuracy 70.0% of 10 graded answers < 80.0%"
    # no answer judged: nothing shows accuracy below the floor (the result says none judged)
    assert judge_probe(limits, _graded_records(0, 0), origin_ns=1_000_000).passed
    no_floor = Limits("percentile", 1.0, 1.0, None, 0.99, 0.9)
    assert judge_probe(no_floor, _graded_records(0, 5), origin_ns=1_000_000).passed


# -- against the simulator's truth ------------------------------------------------------------
def _probe(
    spec_extra: dict[str, Any], rate: float, tasks: list[str] | None = None
) -> tuple[ProbeRun, dict[str, float]]:
    graded: dict[str, Any] = {"fraction": 0.5} | ({"tasks": tasks} if tasks else {})
    spec = parse_spec(
        {
            **BASE,
            "sim": {"efficiency": 0.5, "prefill_cost": False, "seed": 4, **spec_extra},
            "graded": graded,
            "search": {"probe": {"warmup_s": 0.3, "min_duration_s": 2, "max_duration_s": 3}},
        }
    )

    async def go() -> tuple[ProbeRun, dict[str, float]]:
        async with open_target(spec) as target:
            run = await run_probe(spec, target.client, rate_rps=rate, seed=5)
            assert target.sim is not None
            return run, target.sim.server.truth_totals()

    return asyncio.run(go())


def _cut_after_answer(run: ProbeRun) -> int:
    """Graded streams the probe's end cancelled after they were sent: the simulator may have
    decided their answers (its first token can be on the wire before the client reads it),
    the client could not judge them."""
    return sum(1 for r in run.records if r.task and r.cancelled and r.sent_ns is not None)


@pytest.mark.timeout(60)
def test_accuracy_matches_the_simulators_truth_within_its_interval() -> None:
    """Answers wrong with p = 0.1 × (B − 1): every wrong answer the simulator sent is one the
    client graded wrong, and the accuracy's interval holds the truth's expected accuracy
    1 − mean p over the answers the simulator decided (at 99.9 %: a 95 % interval misses one
    run in twenty by design, and this test must not)."""
    run, truth = _probe(
        {"answer_error": {"per_batch": 0.1}}, 30, ["copy", "count", "arithmetic", "gsm8k"]
    )
    assert run.metrics.requests_failed == 0
    every = probe_accuracy(run.records)
    assert every is not None and every.unjudged == 0
    # the same answers, judged by the simulator when sent and by the client on arrival, but
    # for the few streams the probe's end cancelled in flight (not judged)
    cut = _cut_after_answer(run)
    assert every.graded <= truth["graded_answers"] <= every.graded + cut
    assert every.graded > 40 and cut <= 6
    assert every.graded - every.right <= truth["graded_wrong"] <= every.graded - every.right + cut
    assert truth["graded_wrong"] > 0
    expected = 1 - truth["graded_error_probability_sum"] / truth["graded_answers"]
    lo, hi = wilson_interval(every.right, every.graded, 0.999)
    assert lo <= expected <= hi, (every, expected)
    assert (every.accuracy_low, every.accuracy_high) == wilson_interval(every.right, every.graded)
    assert expected < 0.97  # the load made answers degrade: the check is not 100 % against 100 %
    window = probe_accuracy(run.counted)
    assert window is not None and 0 < window.graded < every.graded
    assert set(every.by_task) == {"copy", "count", "arithmetic", "gsm8k"}
    assert sum(g for _, g in window.by_task.values()) == window.graded


@pytest.mark.timeout(60)
def test_without_the_knob_every_answer_is_right_and_ungraded_requests_unchanged() -> None:
    run, truth = _probe({}, 10)
    acc = probe_accuracy(run.records)
    assert acc is not None and acc.accuracy == 1.0 and truth["graded_wrong"] == 0
    assert acc.graded == truth["graded_answers"]
    for r in run.records:
        if r.task is None:  # filler requests still run to max_tokens under ignore_eos
            assert r.output_tokens == 16 and r.correct is None
        else:  # the answer, then the simulator's EOS
            assert r.finish_reason == "stop"
            assert r.output_tokens == (4 if r.task == "copy" else 1)


@pytest.mark.timeout(60)
def test_greedy_consistency_against_the_same_prompt_alone() -> None:
    """Consistency tasks: each pool prompt is sent alone first (B = 1, never wrong here), then
    under load its answer must equal that reference; the simulator's batch-dependent errors
    are exactly the inconsistencies the client finds, at the rate its truth expects."""
    run, truth = _probe({"answer_error": {"per_batch": 0.1}}, 30, tasks=["consistency"])
    every = probe_accuracy(run.records)
    assert every is not None and set(every.by_task) == {"consistency"}
    pool = len(consistency_prompts(5))
    cut = _cut_after_answer(run)  # as above
    # the references were answers too
    assert every.graded + pool <= truth["graded_answers"] <= every.graded + pool + cut
    assert every.graded - every.right <= truth["graded_wrong"] <= every.graded - every.right + cut
    assert truth["graded_wrong"] > 0
    # the references (alone) had p = 0, so the mean p over the graded ones is Σp ÷ graded
    expected = 1 - truth["graded_error_probability_sum"] / every.graded
    lo, hi = wilson_interval(every.right, every.graded, 0.999)  # as above
    assert lo <= expected <= hi, (every, expected)
    # graded requests use the pool's prompts only
    assert {r.request_id for r in run.records if r.task} and all(
        r.output_tokens == 8 for r in run.records if r.task
    )


def test_consistency_without_references_sends_ordinary_requests() -> None:
    section = GradedSection(fraction=1.0, tasks=["consistency"])
    plans = list(GradedSlice(section, 2).apply(iter(_plans(20))))
    assert all(p.task is None for p in plans)
    refs = {"Continue this text: a b\nAnswer:": "b a"}
    plans = list(GradedSlice(section, 2, refs).apply(iter(_plans(20))))
    assert all(p.task == GradedTask("consistency", *next(iter(refs.items()))) for p in plans)
    assert grade(plans[0].task, "  b a\n") and not grade(plans[0].task, " b a c")  # type: ignore[arg-type]


# -- a bench with an accuracy floor -----------------------------------------------------------
BENCH: dict[str, Any] = {
    **BASE,
    "name": "graded-bench",
    "sim": {"efficiency": 0.5, "prefill_cost": False, "answer_error": {"per_batch": 0.06}},
    "workload": {**BASE["workload"], "arrival": {"kind": "constant"}},
    "graded": {"fraction": 0.6},
    "slo": {"ttft_ms": 2000, "tpot_ms": 200, "accuracy_min": 0.8},
    "search": {
        "start_rate_rps": 6,
        "growth": 2.0,
        "precision": 0.45,
        "max_probes": 8,
        "single_stream_requests": 2,
        "probe": {
            "warmup_s": 0.5,
            "min_duration_s": 2,
            "min_requests": 30,
            "max_duration_s": 4,
            "drain_timeout_s": 5,
        },
    },
}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_stops_where_accuracy_falls_below_the_floor(tmp_path: Path) -> None:
    """Latency limits far beyond what these rates reach; answers degrading with the batch: the
    search stops on accuracy, every failing probe fails on accuracy alone and every passing
    one is at or above the floor."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(BENCH))
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "bench", str(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    r = load_result(out)
    assert r.search is not None and r.search.lo_rps is not None and r.search.hi_rps is not None
    searched = [p for p in r.probes if p.phase != "check"]
    for p in searched:
        assert p.accuracy is not None and p.accuracy.accuracy is not None
        if p.slo_passed:
            assert p.accuracy.accuracy >= 0.8
        else:
            assert p.slo_detail.failed == ["accuracy"], p.slo_detail
            assert p.accuracy.accuracy < 0.8
    failing = [p for p in searched if p.rate_rps == r.search.hi_rps]
    passing = [p for p in searched if p.rate_rps == r.search.lo_rps]
    assert failing and passing and not failing[0].slo_passed and passing[0].slo_passed
    # the accuracy falls with the rate, as the knob makes it: the failing rate's below the passing
    assert failing[0].accuracy.accuracy < passing[0].accuracy.accuracy  # type: ignore[union-attr,operator]
    # the headline probe's accuracy in the terminal and the HTML report, in the same words
    head = r.headline_probe
    assert head is not None and head.accuracy is not None
    words = accuracy_text(head.accuracy)
    assert words in " ".join(res.stdout.split()), res.stdout[-3000:]
    assert words in (out / "report.html").read_text()
    single = r.single_stream
    assert single is not None
    if single.accuracy is not None:  # its few requests may carry no task
        assert single.accuracy.accuracy == 1.0  # B = 1: p = base = 0


def test_accuracy_in_the_terminal_words() -> None:
    acc = probe_accuracy(_graded_records(6, 2))
    assert acc is not None
    lo, hi = wilson_interval(6, 8)  # 0.4093–0.9285
    assert accuracy_text(acc) == f"75.0% of 8 graded ({lo:.1%}–{hi:.1%}, 95%)"
    assert accuracy_text(acc) == "75.0% of 8 graded (40.9%–92.9%, 95%)"
    spec = parse_spec({**BASE, "graded": {}, "slo": {"ttft_ms": 500, "accuracy_min": 0.9}})
    assert describe_slo(spec.slo) == "p99 TTFT ≤ 500 ms, accuracy ≥ 90%"


@pytest.mark.timeout(60)
def test_probe_command_prints_and_judges_the_accuracy(tmp_path: Path) -> None:
    """`tokenwatt probe` on the simulator with answers degrading fast: the row of graded
    answers, and the verdict failing on the floor with the same figure, as result.json has."""
    spec = {
        **BASE,
        "sim": {"efficiency": 0.5, "prefill_cost": False, "answer_error": {"per_batch": 0.3}},
        "graded": {"fraction": 0.5, "tasks": ["arithmetic", "gsm8k"]},
        "slo": {"accuracy_min": 0.95},
        "search": {"probe": {"warmup_s": 0.3, "min_duration_s": 2, "max_duration_s": 3}},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "probe", str(path), "--rate", "40", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    p = load_result(out).probes[0]
    assert p.accuracy is not None and p.accuracy.accuracy is not None
    assert p.accuracy.accuracy < 0.95 and p.slo_detail.failed == ["accuracy"]
    assert accuracy_text(p.accuracy) in res.stdout
    assert f"accuracy {p.accuracy.accuracy:.1%} of {p.accuracy.graded} graded answers" in res.stdout


def test_worker_processes_refuse_graded_tasks() -> None:
    """Worker processes are dealt requests without their tasks: refused, not silently ungraded."""
    spec = parse_spec({**BASE, "graded": {}, "search": {"probe": {"workers": 2}}})
    schedule, _ = make_source(spec, rate_rps=5, seed=1, concurrency=None, prompt_format="text")
    with pytest.raises(SpecError, match=r"workers > 1 cannot send graded tasks"):
        open_sender(spec, object(), schedule, spec.search.probe)  # type: ignore[arg-type]
