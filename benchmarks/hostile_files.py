"""Hostile files on every command that reads one, each in a child process under a memory cap
(``RLIMIT_AS``) and a time cap, in its own session (killed whole at the time cap). Prints one
row per case: what was fed to which command, and what came of it (exit status, wall time,
the child's peak RSS, the last line it printed on stderr, and TRACEBACK where one was).

    PYTHONPATH=src python benchmarks/hostile_files.py

``run()`` returns the rows as (case, outcome) for other scripts. Run it against another tree
(``PYTHONPATH=/other/src``) for a before/after: the files are generated here from the test
fixtures, so both trees read the same bytes.

Measured on the 2-core VM with other jobs running (cap 2048 MiB, 60 s); exit, wall, peak RSS:

    case                               before (main 9f72a1a)           after
    probe: spec alias bomb (460 B)     -11 SIGSEGV, 12.2 s, 1093 MB    2, 0.6 s, 40 MB
    probe: spec -> /dev/zero           1 MemoryError tb, 1849 MB       2, 0.5 s, 40 MB
    probe: --set extra_body=<bomb>     -11 SIGSEGV, 10.9 s, 1093 MB    2, 0.5 s, 41 MB
    sweep: bench extra_body bomb       running after 60 s (killed)     2, 2.4 s, 104 MB
    import: -> /dev/zero               1 MemoryError tb, 1882 MB       2, 1.8 s, 72 MB
    import: -> /dev/urandom            1 MemoryError tb, 19.9 s        2, 3.2 s, 72 MB
    import: 3 GiB file (sparse)        1 MemoryError tb                2 "over the 256 MiB limit"
    import: 200,000-deep array         1 RecursionError tb             2 "nested deeper than 64"
    import: vLLM NaN / Infinity        0, imported as figures          2 "is nan: must be finite"
    import: vLLM 1e308                 1 OverflowError tb              2 "... 1e+308, beyond ..."
    import: vLLM negative figures      0, prints "SLO met"             2 "-5, cannot be negative"
    import: vLLM duration 0            0, imported                     2 "must be over zero"
    report: result.json -> /dev/zero   1 MemoryError tb, 1898 MB       2, 3.5 s, 88 MB
    report: 200,000-deep array         1 RecursionError tb             2 "nested deeper than 64"
    report: result NaN / Inf / 1e308   0, printed                      2, one line naming the key
    report: negative figures           0, prints "SLO met"             2 "cannot be negative"
    compare: result.json -> /dev/zero  1 MemoryError tb, 1854 MB       2, 0.7 s, 45 MB
    compare: negative figures          0, compared                     2 "cannot be negative"
    pareto: result.json -> /dev/zero   1 MemoryError tb, 1898 MB       2, 2.2 s, 88 MB
    mbu: --requests /dev/zero          1 MemoryError tb, 1933 MB       2, 1.8 s, 57 MB
    probe: --dataset sharegpt:/dev/zero  1 MemoryError tb              2 "not a regular file"
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
RESULT = FIXTURES / "peers" / "tokenwatt_sim_probe" / "result.json"
VLLM = FIXTURES / "peers" / "vllm_sim_detailed.json"
CAP_MB = 2048
CAP_S = 60

_MEASURE = """
import resource, subprocess, sys, time
cap = int(sys.argv[1]) << 20
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
t0 = time.perf_counter()
p = subprocess.run(sys.argv[2:], capture_output=True, text=True, preexec_fn=limit)
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
err = p.stderr.strip().splitlines()
last = (err or [""])[-1][:110]
tb = " TRACEBACK" if "Traceback" in p.stderr else ""
out = p.stdout
slo = " (prints 'SLO met')" if "SLO met" in out or "SLO pass" in out else ""
print(f"exit {p.returncode}, {wall:.1f} s, {rss} MB{tb}{slo}: {last}")
"""

SPEC = """name: hostile
model: {{source: llama-3.1-8b}}
hardware: {{accelerator: h100-sxm}}
endpoint: {{url: sim, extra_body: {extra}}}
"""


def _bomb() -> str:
    """A YAML flow mapping of 9 levels of 9 aliases: 460 bytes, ~3.9e8 scalars expanded."""
    parts = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    parts += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "{" + ", ".join(parts) + "}"


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tokenwatt", *args]


def _outcome(argv: list[str], cwd: Path) -> str:
    wrapper = [sys.executable, "-c", _MEASURE, str(CAP_MB), *argv]
    proc = subprocess.Popen(
        wrapper, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=CAP_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"still running after {CAP_S} s (killed)"
    return out.strip() or f"wrapper exit {proc.returncode}"


IMPORT_EDITS: dict[str, Callable[[dict[str, Any]], dict[str, float]]] = {
    "NaN": lambda v: {"p99_ttft_ms": float("nan")},
    "Infinity": lambda v: {"mean_tpot_ms": float("inf")},
    "1e308": lambda v: {"output_throughput": 1e308},
    "negative figures": lambda v: {k: -5.0 for k, x in v.items() if isinstance(x, float)},
    "duration 0": lambda v: {"duration": 0.0},
}
RESULT_EDITS: dict[str, dict[str, float]] = {
    "NaN": {"output_tokens_per_s": float("nan")},
    "Infinity": {"window_s": float("inf")},
    "1e308": {"output_tokens_per_s": 1e308},
    "negative figures": {
        "goodput_output_tokens_per_s": -5.0,
        "output_tokens_per_s": -5.0,
        "attainment": -1.0,
    },
}


def _write_imports(d: Path) -> list[str]:
    """A real vLLM result with one kind of impossible figure each: ``d/vllm-NAME.json``."""
    vllm = json.loads(VLLM.read_text("utf-8"))
    for name, edit in IMPORT_EDITS.items():
        (d / f"vllm-{name}.json").write_text(json.dumps({**vllm, **edit(vllm)}))
    return list(IMPORT_EDITS)


def _write_runs(d: Path) -> list[str]:
    """A real result with impossible first-probe figures (``d/run-NAME``), a symlink to
    /dev/zero (``run-zero``), a 200,000-deep array (``run-deep``) and the file as is."""
    result = json.loads(RESULT.read_text("utf-8"))
    for name, edit in RESULT_EDITS.items():
        doc = json.loads(json.dumps(result))
        doc["probes"][0].update(edit)
        (d / f"run-{name}").mkdir()
        (d / f"run-{name}" / "result.json").write_text(json.dumps(doc))
    for name in ("zero", "deep", "good"):
        (d / f"run-{name}").mkdir()
    (d / "run-zero" / "result.json").symlink_to("/dev/zero")
    deep = '{"probes": ' + "[" * 200_000 + "]" * 200_000 + "}"
    (d / "run-deep" / "result.json").write_text(deep)
    (d / "run-good" / "result.json").write_text(json.dumps(result))
    return list(RESULT_EDITS)


def _files(d: Path) -> dict[str, Callable[[], list[str]]]:
    """case -> the command line, its files written under ``d``."""
    zero = d / "zero.json"
    zero.symlink_to("/dev/zero")
    urandom = d / "urandom.json"
    urandom.symlink_to("/dev/urandom")
    deep = d / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    sparse = d / "sparse.json"
    with sparse.open("wb") as f:
        f.truncate(3 << 30)
    spec = d / "bomb.yaml"
    spec.write_text(SPEC.format(extra=_bomb()))
    plain = d / "plain.yaml"
    plain.write_text(SPEC.format(extra="{}"))
    sweep = d / "sweep.yaml"
    sweep.write_text(
        "server: {command: 'sleep 30', health_url: 'http://127.0.0.1:9/h', health_timeout_s: 5}\n"
        "grid: {x: [1]}\n"
        f"bench: {{model: {{source: llama-3.1-8b}}, hardware: {{accelerator: h100-sxm}}, "
        f"endpoint: {{url: sim, extra_body: {_bomb()}}}}}\n"
    )
    imports, results = _write_imports(d), _write_runs(d)
    zrun, drun, good = d / "run-zero", d / "run-deep", d / "run-good"
    imp = ("--model", "llama-3.1-8b", "--hardware", "h100-sxm")
    cases: dict[str, Callable[[], list[str]]] = {
        "probe: spec alias bomb in extra_body": lambda: _cmd(
            "probe", str(spec), "--rate", "1", "-o", str(d / "o1")
        ),
        "probe: spec -> /dev/zero": lambda: _cmd("probe", str(zero), "--rate", "1"),
        "probe: --set extra_body=<alias bomb>": lambda: _cmd(
            *("probe", str(plain), "--rate", "1", "-o", str(d / "o2")),
            *("--set", f"endpoint.extra_body={_bomb()}"),
        ),
        "sweep: bench extra_body alias bomb": lambda: _cmd(
            "sweep", str(sweep), "-o", str(d / "sw")
        ),
        "import: -> /dev/zero": lambda: _cmd("import", str(zero), *imp),
        "import: -> /dev/urandom": lambda: _cmd("import", str(urandom), *imp),
        "import: 3 GiB file (sparse)": lambda: _cmd("import", str(sparse), *imp),
        "import: 200,000-deep array": lambda: _cmd("import", str(deep), *imp),
    }
    for name in imports:
        path = d / f"vllm-{name}.json"
        out = d / f"imported-{name.replace(' ', '-')}"
        cases[f"import: vLLM file, {name}"] = lambda p=path, o=out: _cmd(
            "import", str(p), *imp, "-o", str(o)
        )
    cases["report: result.json -> /dev/zero"] = lambda: _cmd("report", str(zrun), "--no-html")
    cases["report: 200,000-deep array"] = lambda: _cmd("report", str(drun), "--no-html")
    for name in results:
        run = d / f"run-{name}"
        cases[f"report: result, {name}"] = lambda r=run: _cmd("report", str(r), "--no-html")
    cases["compare: result.json -> /dev/zero"] = lambda: _cmd("compare", str(good), str(zrun))
    cases["compare: result, negative figures"] = lambda: _cmd(
        "compare", str(good), str(d / "run-negative figures")
    )
    cases["pareto: result.json -> /dev/zero"] = lambda: _cmd(
        "pareto", str(zrun / "result.json"), "-o", str(d / "p.html")
    )
    cases["probe: --dataset sharegpt:/dev/zero"] = lambda: _cmd(
        *("probe", "--base-url", "sim", "--model", "llama-3.1-8b", "--rate", "1"),
        *("--set", "hardware.accelerator=h100-sxm", "--dataset", f"sharegpt:{zero}"),
        *("-o", str(d / "o3")),
    )
    cases["mbu: --requests /dev/zero"] = lambda: _cmd(
        *("mbu", "llama-3.1-8b", "--hardware", "h100-sxm", "--requests", str(zero)),
        *("--output-tokens-per-s", "100", "--tpot-ms", "20"),
    )
    return cases


def run() -> list[tuple[str, str]]:
    """Every case, in order: (case, outcome)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        return [(case, _outcome(argv(), d)) for case, argv in _files(d).items()]


def main() -> None:
    width = 40
    print(f"{'case':<{width}} outcome (cap {CAP_MB} MiB, {CAP_S} s)")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for case, argv in _files(d).items():
            print(f"{case:<{width}} {_outcome(argv(), d)}", flush=True)


if __name__ == "__main__":
    main()
