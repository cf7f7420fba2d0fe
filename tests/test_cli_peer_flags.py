"""The peers' habits on ``bench`` and ``probe``: their flags work as aliases that land in the
spec field they mean, and an unknown peer flag is answered from the table, not by spelling."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenwatt import cli
from tokenwatt.cli import bench as bench_cli
from tokenwatt.cli import probe as probe_cli
from tokenwatt.cli.hints import PEER_FLAG_HINTS
from tokenwatt.spec import BenchSpec

pytestmark = pytest.mark.timeout(120)

SPEC = """
name: peer-flags
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim}
sim: {efficiency: 0.5, prefill_cost: false}
workload: {input_tokens: 64, output_tokens: 12, seed: 4}
slo: {ttft_ms: 2000, tpot_ms: 200}
search: {probe: {warmup_s: 0.3, min_duration_s: 1.0, min_requests: 5}}
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC)
    return p


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    code = ended.value.code
    return code if isinstance(code, int) else 0


@pytest.mark.parametrize("command", ["bench", "probe"])
@pytest.mark.parametrize("flag", sorted(PEER_FLAG_HINTS))
def test_every_peer_flag_gets_its_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, flag: str
) -> None:
    assert _main(monkeypatch, command, flag, "x") == 2
    err = capsys.readouterr().err
    assert f"No such option: {flag}; {PEER_FLAG_HINTS[flag]}" in err
    assert "Possible options" not in err  # no spelling guess beside the table's answer


@pytest.mark.parametrize(
    ("flag", "wanted", "wrong"),
    [
        ("--output-json", "results are always saved: use --out DIR", "--slo-tpot-ms"),
        ("--save-result", "use --out DIR", "--base-url"),
        ("--tokenizer", "no tokenizer is needed", "--workers"),
        ("--goodput", "--slo-ttft-ms MS and --slo-tpot-ms MS", "--out"),
        ("--target", "--base-url", "--set"),
        ("--dataset-name", "--dataset sharegpt:PATH", "--dataset-name"),
        ("--max-seconds", "--duration S", "--max-requests"),
    ],
)
def test_the_issue_s_wrong_hints_are_right_now(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    wanted: str,
    wrong: str,
) -> None:
    assert _main(monkeypatch, "bench", flag, "x") == 2
    err = capsys.readouterr().err
    assert wanted in err and f"(Possible options: {wrong}" not in err


def test_a_typo_keeps_its_suggestion_and_a_far_guess_is_dropped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(monkeypatch, "probe", "--duraton", "3") == 2
    assert "(Possible options: --duration)" in capsys.readouterr().err
    assert _main(monkeypatch, "probe", "--frobnicate-mode", "3") == 2
    assert "Possible options" not in capsys.readouterr().err


Captured = dict[str, Any]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Captured:
    """What ``probe``/``bench`` would run, without running it: the built spec and the load."""
    got: Captured = {}

    def fake_probe(spec: BenchSpec, **kw: Any) -> None:
        got.update(kw, spec=spec, ran="probe")

    def fake_bench(
        spec: BenchSpec, out: Path | None, *, overwrite: bool = False, quiet: bool = False
    ) -> None:
        got.update(spec=spec, ran="bench")

    monkeypatch.setattr(probe_cli, "run_probe_command", fake_probe)
    monkeypatch.setattr(bench_cli, "_bench_and_report", fake_bench)
    return got


ALIASES = [
    ("--num-prompts", "--max-requests"),
    ("--random-input-len", "--input-tokens"),
    ("--random-output-len", "--output-tokens"),
]


@pytest.mark.parametrize("command", ["bench", "probe"])
@pytest.mark.parametrize(("peer", "ours"), ALIASES)
def test_aliases_set_the_same_field(  # noqa: PLR0917 - fixtures and parameters
    monkeypatch: pytest.MonkeyPatch,
    captured: Captured,
    spec_file: Path,
    command: str,
    peer: str,
    ours: str,
) -> None:
    seen = []
    for flag in (peer, ours):
        assert _main(monkeypatch, command, str(spec_file), "--concurrency", "3", flag, "7") == 0
        spec: BenchSpec = captured["spec"]
        seen.append(
            (
                captured.get("max_requests"),
                spec.workload.input_tokens.model_dump(),
                spec.workload.output_tokens.model_dump(),
            )
        )
        assert captured["ran"] == "probe" and captured["concurrency"] == 3
    assert seen[0] == seen[1]
    if ours == "--max-requests":
        assert seen[0][0] == 7
    elif ours == "--input-tokens":
        assert seen[0][1] == {"kind": "fixed", "value": 7}
    else:
        assert seen[0][2] == {"kind": "fixed", "value": 7}


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_request_rate_is_rate(
    monkeypatch: pytest.MonkeyPatch, captured: Captured, spec_file: Path, command: str
) -> None:
    assert _main(monkeypatch, command, str(spec_file), "--request-rate", "3.5") == 0
    if command == "probe":
        assert captured["rate"] == 3.5 and captured["concurrency"] is None
    else:
        assert captured["ran"] == "bench"
        assert captured["spec"].search.start_rate_rps == 3.5


@pytest.mark.parametrize("command", ["bench", "probe"])
@pytest.mark.parametrize("flag", ["--concurrency", "--max-concurrency"])
def test_concurrency_flags_run_one_closed_loop(
    monkeypatch: pytest.MonkeyPatch, captured: Captured, spec_file: Path, command: str, flag: str
) -> None:
    assert _main(monkeypatch, command, str(spec_file), flag, "4") == 0
    assert captured["ran"] == "probe" and captured["concurrency"] == 4 and captured["rate"] is None


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_seed_and_dataset(
    monkeypatch: pytest.MonkeyPatch,
    captured: Captured,
    spec_file: Path,
    tmp_path: Path,
    command: str,
) -> None:
    data = tmp_path / "sg.json"
    args = ["--seed", "11", "--dataset", f"sharegpt:{data}", "--request-rate", "2"]
    assert _main(monkeypatch, command, str(spec_file), *args) == 0
    spec: BenchSpec = captured["spec"]
    assert spec.workload.seed == 11
    assert spec.workload.dataset is not None and spec.workload.dataset.path == data
    assert spec.workload.dataset.format == "sharegpt"


def test_bench_max_requests_without_concurrency_sets_each_window(
    monkeypatch: pytest.MonkeyPatch, captured: Captured, spec_file: Path
) -> None:
    assert _main(monkeypatch, "bench", str(spec_file), "--num-prompts", "50") == 0
    assert captured["ran"] == "bench"
    assert captured["spec"].search.probe.min_requests == 50


@pytest.mark.parametrize("command", ["bench", "probe"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-concurrency", "4", "--rate", "2"], "--max-concurrency beside a finite --rate"),
        (["--concurrency", "4", "--max-concurrency", "5"], "disagree"),
        (["--concurrency", "2", "--request-rate", "2"], "not both"),
        (["--dataset", "sharegpt"], "give sharegpt:PATH"),
        (["--random-input-len", "0", "--rate", "1"], "--input-tokens must be at least 1"),
        (["--rate", "1", "--set", "workload.dataset=sharegpt"], "workload.dataset.path=FILE"),
    ],
)
def test_peer_flag_mistakes_are_one_line(  # noqa: PLR0917 - fixtures and parameters
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    captured: Captured,
    spec_file: Path,
    command: str,
    args: list[str],
    message: str,
) -> None:
    assert _main(monkeypatch, command, str(spec_file), *args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "ran" not in captured


def test_ray_help_shows_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    for command in ("bench", "probe"):
        _main(monkeypatch, command, "--help")
        assert "(needs tokenwatt[ray])" in capsys.readouterr().out


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=100,
        check=False,
    )


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_vllm_style_command_line_runs(spec_file: Path, tmp_path: Path, command: str) -> None:
    """As a vLLM user types it: a closed loop of 2, exactly 6 prompts of 32 → 8 tokens."""
    out = tmp_path / command
    res = _run(
        command,
        str(spec_file),
        "--max-concurrency",
        "2",
        "--num-prompts",
        "6",
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--seed",
        "3",
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    p = orjson.loads((out / "result.json").read_bytes())["probes"][0]
    assert p["concurrency"] == 2 and p["seed"] == 3
    assert p["requests_counted"] == 6
    lines = (out / "requests.jsonl").read_bytes().splitlines()
    records = [r for r in map(orjson.loads, lines) if r["phase"] == "window"]
    assert len(records) == 6
    assert {r["completion_tokens"] for r in records} == {8}
    assert {r["prompt_tokens"] for r in records} == {32}


def test_dataset_sharegpt_runs_real_prompts(spec_file: Path, tmp_path: Path) -> None:
    """--dataset sharegpt:PATH as vLLM users type it: the prompts come from the file."""
    data = tmp_path / "sharegpt.json"
    convs = [
        {
            "conversations": [
                {"from": "human", "value": " ".join(["word"] * (10 + i))},
                {"from": "gpt", "value": "an answer of a few words"},
            ]
        }
        for i in range(8)
    ]
    data.write_bytes(orjson.dumps(convs))
    out = tmp_path / "ds"
    res = _run(
        "probe",
        str(spec_file),
        "--dataset",
        f"sharegpt:{data}",
        "--concurrency",
        "2",
        "--num-prompts",
        "4",
        "-o",
        str(out),
        "-q",
    )
    assert res.returncode == 0, res.stderr
    spec = orjson.loads((out / "result.json").read_bytes())["spec"]
    assert spec["workload"]["dataset"]["path"] == str(data)
    lines = (out / "requests.jsonl").read_bytes().splitlines()
    counted = [r for r in map(orjson.loads, lines) if r["phase"] == "window"]
    assert len(counted) == 4
    assert all(10 <= r["prompt_tokens"] <= 17 for r in counted)  # the file's 10-17 words


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_infinite_rate_with_a_concurrency_cap_is_a_closed_loop(
    monkeypatch: pytest.MonkeyPatch, captured: Captured, spec_file: Path, command: str
) -> None:
    """vLLM's default pairing: no arrival process, 8 in flight."""
    args = ["--request-rate", "inf", "--max-concurrency", "8"]
    assert _main(monkeypatch, command, str(spec_file), *args) == 0
    assert captured["ran"] == "probe" and captured["concurrency"] == 8
    assert captured["rate"] is None
    assert captured["spec"].search.start_rate_rps is None


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_infinite_rate_alone_says_what_to_add(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    captured: Captured,
    spec_file: Path,
    command: str,
) -> None:
    assert _main(monkeypatch, command, str(spec_file), "--request-rate", "inf") == 2
    err = capsys.readouterr().err
    assert "--request-rate inf" in err and "--max-concurrency N" in err
    assert "got inf" not in err and len(err.strip().splitlines()) == 1
    assert "ran" not in captured


@pytest.mark.parametrize("command", ["bench", "probe"])
@pytest.mark.parametrize("kind", ["constant", "poisson", "Constant"])
def test_rate_type_picks_the_arrival_process(
    monkeypatch: pytest.MonkeyPatch,
    captured: Captured,
    spec_file: Path,
    command: str,
    kind: str,
) -> None:
    args = ["--rate-type", kind, "--rate", "2"]
    assert _main(monkeypatch, command, str(spec_file), *args) == 0
    assert captured["spec"].workload.arrival.kind == kind.lower()


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_rate_type_synchronous_is_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch, captured: Captured, spec_file: Path, command: str
) -> None:
    assert _main(monkeypatch, command, str(spec_file), "--rate-type", "synchronous") == 0
    assert captured["ran"] == "probe" and captured["concurrency"] == 1


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("sweep", "searches the rate itself"),
        ("throughput", "--concurrency N"),
        ("concurrent", "--concurrency N"),
        ("bursty", "is not one of poisson, constant, synchronous"),
    ],
)
def test_rate_types_that_do_not_apply_say_why(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spec_file: Path,
    kind: str,
    message: str,
) -> None:
    assert _main(monkeypatch, "bench", str(spec_file), "--rate-type", kind) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_no_op_flags_run_with_one_note(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    captured: Captured,
    spec_file: Path,
    command: str,
) -> None:
    args = ["--dataset-name", "random", "--ignore-eos", "--streaming", "--rate", "2"]
    assert _main(monkeypatch, command, str(spec_file), *args) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: --dataset-name random, --ignore-eos, --streaming change nothing here: random "
        "prompts are the default; output lengths are exact (workload.ignore_eos); requests "
        "always stream"
    ]
    assert captured["spec"].workload.dataset is None


def test_each_no_op_flag_alone_is_accepted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], spec_file: Path
) -> None:
    for flag in (["--dataset-name", "random"], ["--ignore-eos"], ["--streaming"]):
        monkeypatch.setattr(probe_cli, "run_probe_command", lambda spec, **kw: None)
        assert _main(monkeypatch, "probe", str(spec_file), *flag, "--rate", "1") == 0
        assert f"note: {' '.join(flag)} change nothing here" in capsys.readouterr().err


def test_dataset_name_other_than_random_points_at_dataset(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], spec_file: Path
) -> None:
    assert _main(monkeypatch, "probe", str(spec_file), "--dataset-name", "sharegpt") == 2
    assert "--dataset sharegpt:PATH" in capsys.readouterr().err


def test_processor_gets_its_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(monkeypatch, "bench", "--processor", "meta-llama/x") == 2
    err = capsys.readouterr().err
    assert "No such option: --processor; no tokenizer or processor is needed" in err


def test_every_unknown_flag_is_answered_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "--output-json",
        "x",
        "--frobnicate",
        "--duraton=3",
        "--tokenizer",
        "t",
        "--output-json",
    ]
    assert _main(monkeypatch, "probe", *args) == 2
    lines = [x.removeprefix("Error: ") for x in capsys.readouterr().err.splitlines()]
    answered = [x for x in lines if x.startswith("No such option:")]
    assert answered == [
        f"No such option: --output-json; {PEER_FLAG_HINTS['--output-json']}",
        "No such option: --frobnicate",
        "No such option: --duraton (did you mean --duration?)",
        f"No such option: --tokenizer; {PEER_FLAG_HINTS['--tokenizer']}",
    ]


@pytest.mark.parametrize("loop", [["--rate", "1"], ["--concurrency", "2"]])
def test_num_prompts_with_duration_is_refused_on_probe(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    captured: Captured,
    spec_file: Path,
    loop: list[str],
) -> None:
    """Together one of them was silently ignored (10 prompts, a 3 s window: 3 counted)."""
    args = [*loop, "--num-prompts", "10", "--duration", "3"]
    assert _main(monkeypatch, "probe", str(spec_file), *args) == 2
    err = capsys.readouterr().err
    assert "--num-prompts 10 and --duration 3 both set where the probe ends" in err
    assert len(err.strip().splitlines()) == 1 and "ran" not in captured


def test_bench_num_prompts_with_duration_sets_both_floors(
    monkeypatch: pytest.MonkeyPatch, captured: Captured, spec_file: Path
) -> None:
    """On bench both are minimums of each window (≥ S seconds and ≥ N requests): no conflict."""
    args = ["--num-prompts", "10", "--duration", "3"]
    assert _main(monkeypatch, "bench", str(spec_file), *args) == 0
    p = captured["spec"].search.probe
    assert (p.min_requests, p.min_duration_s) == (10, 3.0)
