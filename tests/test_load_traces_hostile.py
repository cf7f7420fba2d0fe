"""Hostile trace files on disk: infinite timestamps, a huge row, lengths no prompt can have,
more rows than a replay can use. Each is one line naming the line, read as a stream in
bounded memory; a trace at the row bound loads in compact columns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tokenwatt.errors import SpecError
from tokenwatt.traffic.traces import MAX_LINE_CHARS, MAX_TRACE_ROWS, load_trace

HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _refused(path: Path, fmt: str, match: str) -> str:
    with pytest.raises(SpecError, match=match) as err:
        load_trace(path, fmt)  # type: ignore[arg-type]
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"workload.trace.path: {path}")
    return text


@pytest.mark.parametrize("stamp", ["inf", "-inf", "nan", "1e300"])
def test_azure_non_finite_timestamps_name_the_line(tmp_path: Path, stamp: str) -> None:
    p = tmp_path / "a.csv"
    p.write_text(HEAD + "1,2,3\n" + f"{stamp},2,3\n")
    _refused(p, "azure", "line 3: (timestamp|TIMESTAMP) .* (not a finite time|not a date-time)")


def test_mooncake_timestamp_past_int64_ns(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 1e20, "input_length": 4, "output_length": 1}\n')
    _refused(p, "mooncake", "line 1: timestamp 1e\\+20 is not a finite time")


def test_a_huge_row_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    ids = ", ".join(str(i) for i in range(400_000))  # ~3 MB on one line
    p.write_text(
        '{"timestamp": 0, "input_length": 4, "output_length": 1}\n'
        f'{{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [{ids}]}}\n'
    )
    _refused(p, "mooncake", f"line 2: longer than {MAX_LINE_CHARS:,} characters")


@pytest.mark.parametrize(
    ("fmt", "text", "match"),
    [
        ("azure", HEAD + "0,1000000000000,8\n", "line 2: ContextTokens 1000000000000 is more"),
        ("mooncake", '{"timestamp": 0, "input_length": 1e12, "output_length": 1}\n', "line 1"),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 2, "output_length": 1, "hash_ids": [1, 2, 3]}\n',
            "3 hash_ids for 2 input tokens",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": ['
            + f"{2**64}]}}\n",
            "64-bit",
        ),
        ("azure", HEAD + "0,1\n", "line 2: has 2 fields"),
    ],
)
def test_lengths_no_prompt_can_have(tmp_path: Path, fmt: str, text: str, match: str) -> None:
    p = tmp_path / "t.txt"
    p.write_text(text)
    _refused(p, fmt, match)


def test_not_utf8_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(HEAD.encode() + b"\xff\xfe,1,1\n")
    _refused(p, "azure", "not UTF-8 text")


_CHILD = """
import sys
from pathlib import Path
from tokenwatt.errors import SpecError
from tokenwatt.traffic.traces import load_trace
try:
    t = load_trace(Path(sys.argv[1]), sys.argv[2])
    print(len(t.rows), t.rows[-1].hash_ids[-1] if t.rows[-1].hash_ids else -1)
except SpecError as exc:
    print("refused", exc)
# VmHWM, not ru_maxrss: ru_maxrss keeps the forking parent's high-water mark
hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]
print(int(hwm[0].split()[1]) // 1024)
"""


def _child(path: Path, fmt: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), fmt], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return out[0], int(out[1])


@pytest.mark.slow
@pytest.mark.virtual
def test_row_bound_in_bounded_memory(tmp_path: Path) -> None:
    """10^6 Mooncake rows with 4 hash ids each load in columns (~130 MB peak with numpy and
    the interpreter, where Python objects took ~1 GB); one row more is refused by line."""
    p = tmp_path / "m.jsonl"
    row = '{"timestamp": %d, "input_length": 2048, "output_length": 9, "hash_ids": [%d, 1, 2, 3]}\n'
    with p.open("w") as f:
        f.writelines(row % (i, i) for i in range(MAX_TRACE_ROWS))
    first, peak_mb = _child(p, "mooncake")
    assert first == f"{MAX_TRACE_ROWS} 3"
    assert peak_mb < 400, peak_mb
    with p.open("a") as f:
        f.write(row % (MAX_TRACE_ROWS, 0))
    first, peak_mb = _child(p, "mooncake")
    assert first.startswith("refused") and f"line {MAX_TRACE_ROWS + 1}: more than" in first
    assert peak_mb < 400, peak_mb
