"""Hostile files on every surface that reads one: spec (``probe``), sweep file, ``--set``,
``import``, ``report``, ``compare``, ``pareto`` and ``mbu --requests``. Each attack is the one
a user could make by accident or on purpose; each must end in one line naming the file and
the limit, exit 2, no traceback. The commands run as a user runs them, in a child process
under a memory cap (``RLIMIT_AS``), so a regression costs the child, never this machine."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.errors import ReportError, SpecError
from tokenwatt.importers import read_runs
from tokenwatt.importers.base import ImportFileError
from tokenwatt.result import load_result
from tokenwatt.spec import load_spec
from tokenwatt.spec.dotted import yaml_value
from tokenwatt.spec.sweep import load_sweep_spec
from tokenwatt.sweep_result import load_sweep

FIXTURES = Path(__file__).parent / "fixtures"
RESULT = FIXTURES / "peers" / "tokenwatt_sim_probe" / "result.json"
VLLM = FIXTURES / "peers" / "vllm_sim_detailed.json"
CAP_BYTES = 1536 << 20  # the child's address space: /dev/zero read whole would hit it at once

SPEC = """name: hostile
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint:
  url: sim
  extra_body: {EXTRA}
"""
# 9 levels of 9 aliases: ~3.9e8 scalars once expanded, 460 bytes written
BOMB = "&a0 [x, x, x, x, x, x, x, x, x]"


def _bomb_mapping() -> str:
    """An ``extra_body`` flow mapping whose values alias each other 9 deep."""
    parts = [f"a0: {BOMB}"]
    for i in range(1, 9):
        parts.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "{" + ", ".join(parts) + "}"


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        preexec_fn=_capped,
        cwd=cwd,
    )


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err[-400:])
    assert "Traceback" not in err and len(err.splitlines()) == 1, err[-400:]
    for fragment in fragments:
        assert fragment in err, err
    return err


def _result_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(RESULT.read_text("utf-8"))
    return doc


def _write_run(folder: Path, doc: Any, *, text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(text if text is not None else json.dumps(doc))
    return folder


# ----------------------------------------------------------------------------- the spec
def test_an_alias_bomb_in_extra_body_is_refused_by_probe_in_one_line(tmp_path: Path) -> None:
    """It used to kill ``probe`` with SIGSEGV after 4 s: now one line naming the limit."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("{EXTRA}", _bomb_mapping()))
    assert spec.stat().st_size < 700
    t0 = time.monotonic()
    with pytest.raises(SpecError, match=r"spec.yaml: expands to over 1,000,000 nodes"):
        load_spec(spec)
    assert time.monotonic() - t0 < 5  # refused from the events, never expanded
    _one_line_exit_2(
        _cli("probe", str(spec), "--rate", "1", "-o", str(tmp_path / "o")),
        "spec.yaml",
        "1,000,000 nodes",
    )


def test_a_spec_that_is_a_device_or_too_large_is_one_line(tmp_path: Path) -> None:
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    _one_line_exit_2(
        _cli("probe", str(zero), "--rate", "1", "-o", str(tmp_path / "o")),
        "zero.yaml",
        "not a regular file",
    )
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(64 << 20)  # sparse
    with pytest.raises(SpecError, match=r"big.yaml: 64.0 MiB, over the 4 MiB limit"):
        load_spec(big)


def test_a_sweep_file_alias_bomb_and_a_set_value_bomb_are_refused(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "server: {command: 'server --port {port}', health_url: 'http://127.0.0.1:{port}/h'}\n"
        f"grid: {_bomb_mapping()}\n"
        "bench: {model: {source: llama-3.1-8b}}\n"
    )
    with pytest.raises(SpecError, match=r"sweep.yaml: expands to over 1,000,000 nodes"):
        load_sweep_spec(sweep)
    with pytest.raises(SpecError, match="nodes with its aliases"):
        yaml_value(_bomb_mapping())
    assert yaml_value("[1, 2") == "[1, 2"  # text that is not YAML still stays text


# -------------------------------------------------------------------------------- import
def test_import_refuses_devices_depth_and_size(tmp_path: Path) -> None:
    zero = tmp_path / "bench.json"
    zero.symlink_to("/dev/urandom")
    _one_line_exit_2(
        _cli("import", str(zero), "--model", "llama-3.1-8b", "--hardware", "h100-sxm"),
        "bench.json",
        "not a regular file",
    )
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ImportFileError, match="nested deeper than 64 levels"):
        read_runs(deep)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("output_throughput", -5.0, "output_tokens_per_s is -5, and cannot be negative"),
        ("p99_ttft_ms", float("nan"), "ttft_s.p99 is nan: figures must be finite"),
        ("mean_tpot_ms", float("inf"), "tpot_s.mean is inf: figures must be finite"),
        ("output_throughput", 1e308, "output_tokens_per_s is 1e+308, beyond"),
        ("duration", 0.0, "duration"),
    ],
)
def test_import_refuses_impossible_figures(
    tmp_path: Path, key: str, value: float, fragment: str
) -> None:
    """A vLLM result (real, from the simulator) with one figure made impossible; Python's
    json writes NaN and Infinity as vLLM's own ``json.dump`` would."""
    doc = json.loads(VLLM.read_text("utf-8"))
    doc[key] = value
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportFileError) as exc:
        read_runs(path)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_a_file_of_negative_figures_never_prints_slo_met(tmp_path: Path) -> None:
    """Every figure negative: it used to print "SLO goodput −5.00 tok/s … SLO met"."""
    doc = json.loads(VLLM.read_text("utf-8"))
    for k, v in list(doc.items()):
        if isinstance(v, int | float) and not isinstance(v, bool) and k != "duration":
            doc[k] = -abs(v) - 5
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(doc))
    proc = _cli(
        "import", str(path), "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "-o",
        str(tmp_path / "out"),
    )  # fmt: skip
    err = _one_line_exit_2(proc, "neg.json", "cannot be negative")
    assert "SLO" not in proc.stdout and not (tmp_path / "out" / "result.json").exists(), err


# ------------------------------------------------------------------ report, compare, pareto
def test_report_compare_and_pareto_refuse_a_symlink_to_dev_zero(tmp_path: Path) -> None:
    """It used to cost 3.8 GB and a MemoryError: now refused from stat, under a 1.5 GiB cap."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").symlink_to("/dev/zero")
    good = _write_run(tmp_path / "good", _result_doc())
    _one_line_exit_2(_cli("report", str(run), "--no-html"), "result.json", "not a regular file")
    _one_line_exit_2(_cli("compare", str(good), str(run)), "not a regular file")
    pareto = _cli("pareto", str(run / "result.json"), "-o", str(tmp_path / "p.html"))
    _one_line_exit_2(pareto, "not a regular file")


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda t: t.replace('"output_tokens_per_s": ', '"output_tokens_per_s": NaN, "x": ', 1),
         "NaN at line"),
        (lambda t: t.replace('"window_s": ', '"window_s": Infinity, "x": ', 1), "Infinity at"),
        (lambda t: t.replace('"output_tokens_per_s": ', '"output_tokens_per_s": 1e308, "x": ', 1),
         "output_tokens_per_s is 1e+308, beyond"),
        (lambda t: '{"probes": ' + "[" * 200_000 + "]" * 200_000 + "}",
         "nested deeper than 64 levels"),
    ],
)  # fmt: skip
def test_load_result_refuses_non_finite_huge_and_deep(
    tmp_path: Path, edit: Any, fragment: str
) -> None:
    text = edit(json.dumps(_result_doc()))
    run = _write_run(tmp_path / "run", None, text=text)
    with pytest.raises(ReportError) as exc:
        load_result(run)
    msg = str(exc.value)
    assert fragment in msg and "\n" not in msg and str(run / "result.json") in msg


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (("goodput_output_tokens_per_s",), -5.0, "probes[0].goodput_output_tokens_per_s is -5"),
        (("ttft_s", "p99"), -0.5, "probes[0].ttft_s.p99 is -0.5, and cannot be negative"),
        (("requests_ok",), -3, "probes[0].requests_ok is -3"),
        (("window_s",), 0.0, "probes[0].window_s is 0 with"),
    ],
)
def test_load_result_refuses_impossible_figures(
    tmp_path: Path, path: tuple[str, ...], value: float, fragment: str
) -> None:
    doc = _result_doc()
    node = doc["probes"][0]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    run = _write_run(tmp_path / "run", doc)
    with pytest.raises(ReportError, match="the file is damaged or was edited") as exc:
        load_result(run)
    assert fragment in str(exc.value)
    proc = _cli("report", str(run), "--no-html")
    _one_line_exit_2(proc, fragment)
    assert "SLO met" not in proc.stdout


def test_the_unedited_result_still_reads(tmp_path: Path) -> None:
    """The checks refuse only what is impossible: the real file reads as before."""
    run = _write_run(tmp_path / "run", _result_doc())
    assert (
        load_result(run).probes[0].output_tokens_per_s
        == _result_doc()["probes"][0]["output_tokens_per_s"]
    )


def test_a_sweep_json_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "sweep.json")
    with pytest.raises(ReportError, match="not a regular file"):
        load_sweep(tmp_path)


# ------------------------------------------------------------------------- mbu --requests
def test_mbu_requests_dev_zero_is_one_line(tmp_path: Path) -> None:
    zero = tmp_path / "requests.jsonl"
    zero.symlink_to("/dev/zero")
    proc = _cli(
        "mbu", "llama-3.1-8b", "--hardware", "h100-sxm", "--requests", str(zero),
        "--output-tokens-per-s", "100", "--tpot-ms", "20",
    )  # fmt: skip
    _one_line_exit_2(proc, "requests.jsonl", "not a regular file")


# ----------------------------------------------------------------------- a prompt dataset
def test_a_sharegpt_dataset_that_is_a_device_is_one_line(tmp_path: Path) -> None:
    zero = tmp_path / "sharegpt.json"
    zero.symlink_to("/dev/zero")
    proc = _cli(
        *("probe", "--base-url", "sim", "--model", "llama-3.1-8b", "--rate", "1"),
        *("--set", "hardware.accelerator=h100-sxm", "--dataset", f"sharegpt:{zero}"),
        *("-o", str(tmp_path / "o")),
    )
    _one_line_exit_2(proc, "sharegpt.json", "not a regular file")


@pytest.mark.timeout(60)
def test_a_sweep_whose_bench_spec_is_a_fifo_stops_before_any_server(tmp_path: Path) -> None:
    """Opening the FIFO would block the sweep for ever; no server may have started."""
    import os

    os.mkfifo(tmp_path / "bench.yaml")
    marker = tmp_path / "started"
    (tmp_path / "sweep.yaml").write_text(
        f"server: {{command: 'touch {marker}', health_url: 'http://127.0.0.1:{{port}}/h'}}\n"
        "grid: {x: [1]}\nbench: bench.yaml\n"
    )
    proc = _cli("sweep", str(tmp_path / "sweep.yaml"), "-o", str(tmp_path / "out"))
    _one_line_exit_2(proc, "bench.yaml", "not a regular file")
    assert not marker.exists()


def test_an_expert_load_file_that_is_a_device_is_one_line(tmp_path: Path) -> None:
    from tokenwatt.geometry.routing import load_expert_load

    zero = tmp_path / "load.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(SpecError, match=r"expert_load_file .* not a regular file") as exc:
        load_expert_load(zero, experts=4, k=2, layers=3)
    assert "\n" not in str(exc.value)
