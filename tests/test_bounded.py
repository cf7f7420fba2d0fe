"""The bounded loader on its own: each limit refuses in one line naming the file and the
limit, a file within the limits reads back exactly, and no input makes it raise anything
but the caller's error class (fuzzed)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwatt.bounded import (
    MAX_DEPTH,
    MAX_MAGNITUDE,
    MAX_YAML_NODES,
    load_document,
    parse_json,
    parse_yaml,
    read_bounded,
)
from tokenwatt.errors import SpecError

MIB = 1 << 20


def _load(path: Path, fmt: Any = "auto", max_bytes: int = MIB) -> Any:
    return load_document(path, max_bytes=max_bytes, error=SpecError, fmt=fmt)


def _one_line(exc: pytest.ExceptionInfo[SpecError], path: Path | str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{path}:"), msg
    return msg


# ------------------------------------------------------------------- files that are not files
@pytest.mark.timeout(10)
def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    """Opening a FIFO nobody writes to would block for ever: refused from stat alone."""
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError) as exc:
        _load(fifo)
    assert "not a regular file" in _one_line(exc, fifo)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_symlink_to_a_device_is_refused_before_a_byte_is_read(
    tmp_path: Path, device: str
) -> None:
    link = tmp_path / "result.json"
    link.symlink_to(device)
    with pytest.raises(SpecError) as exc:
        read_bounded(link, max_bytes=MIB, error=SpecError)
    assert "not a regular file" in _one_line(exc, link)


def test_a_folder_and_a_missing_file_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as exc:
        _load(tmp_path)
    assert "is a folder" in _one_line(exc, tmp_path)
    with pytest.raises(SpecError) as exc:
        _load(tmp_path / "nope.yaml")
    assert "No such file" in _one_line(exc, tmp_path / "nope.yaml")


def test_an_oversize_file_is_refused_from_its_size(tmp_path: Path) -> None:
    """A sparse 3 GiB file: refused from stat, so the test costs no disk and no memory."""
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(3 << 30)
    with pytest.raises(SpecError) as exc:
        _load(big)
    assert "3072.0 MiB, over the 1 MiB limit" in _one_line(exc, big)


def test_not_utf8_names_the_byte(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_bytes(b"name: x\n\xff\xfe")
    with pytest.raises(SpecError) as exc:
        _load(p)
    assert "not UTF-8 text (byte 8)" in _one_line(exc, p)


# --------------------------------------------------------------------------------- depth
@pytest.mark.parametrize("fmt", ["json", "yaml", "auto"])
def test_a_200000_deep_array_is_refused_not_a_recursion_error(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / "deep.json"
    p.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(SpecError) as exc:
        _load(p, fmt)
    assert f"nested deeper than {MAX_DEPTH} levels" in _one_line(exc, p)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_depth_just_inside_the_limit_reads(tmp_path: Path, fmt: str) -> None:
    """MAX_DEPTH nested lists read; one more is refused (JSON and YAML agree on the count)."""
    p = tmp_path / "d"
    p.write_text("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    data = _load(p, fmt)
    for _ in range(MAX_DEPTH - 1):
        (data,) = data
    assert data == []
    p.write_text("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    with pytest.raises(SpecError, match="nested deeper"):
        _load(p, fmt)


# ------------------------------------------------------------------------------ YAML aliases
def _bomb(levels: int) -> str:
    """The classic billion laughs: each level 9 aliases of the one before (9**levels)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_a_500_byte_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    text = _bomb(9)  # 9**9 ≈ 3.9e8 scalars once expanded
    assert len(text) < 500
    p = tmp_path / "bomb.yaml"
    p.write_text(text)
    with pytest.raises(SpecError) as exc:
        _load(p, "yaml")
    assert f"over {MAX_YAML_NODES:,} nodes" in _one_line(exc, p)


def test_aliases_within_the_limit_expand_as_yaml_says(tmp_path: Path) -> None:
    """Three levels (9³ = 729 leaves): read, and equal to PyYAML's own reading."""
    text = _bomb(3)
    p = tmp_path / "ok.yaml"
    p.write_text(text)
    assert _load(p, "yaml") == yaml.safe_load(text)


def test_the_node_count_is_exact_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``a: [n scalars]`` is n + 3 nodes (the mapping, its key, the list): at a limit of
    1,000, 997 scalars read, 998 are refused, and so is an alias that doubles the 997."""
    monkeypatch.setattr("tokenwatt.bounded.MAX_YAML_NODES", 1000)
    ok = f"a: &a [{', '.join(['1'] * 997)}]\n"
    assert len(parse_yaml(ok, source="s", error=SpecError)["a"]) == 997
    with pytest.raises(SpecError, match="over 1,000 nodes"):
        parse_yaml(ok.replace("[1,", "[1, 1,"), source="s", error=SpecError)
    with pytest.raises(SpecError, match="nodes with its aliases"):
        parse_yaml(ok + "b: *a\n", source="s", error=SpecError)


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(SpecError, match=r"alias \*a refers to itself"):
        parse_yaml("a: &a [1, *a]\n", source="s", error=SpecError)


def test_a_merge_key_still_works() -> None:
    text = "base: &b {gpus: 8, accelerator: h100}\nnode: {<<: *b, gpus: 4}\n"
    assert parse_yaml(text, source="s", error=SpecError)["node"] == {
        "gpus": 4,
        "accelerator": "h100",
    }


# ---------------------------------------------------------------------------------- numbers
@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": [1, NaN]}', "NaN at line 1, column 11: numbers must be finite"),
        ('{"a": Infinity}', "Infinity at line 1"),
        ('{"a": -Infinity}', "-Infinity at line 1"),
        ('{"a": {"b": [0, 1e308]}}', "a.b[1] is 1e+308, beyond"),
        ('{"a": 1e999}', "not valid JSON"),  # beyond a double: orjson refuses it outright
        ('{"seed": 123456789012345678901234567890}', "seed is 1.23e+29, beyond"),
    ],
)
def test_json_numbers_must_be_finite_and_bounded(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_json(text, source="f.json", error=SpecError)
    assert fragment in _one_line(exc, "f.json")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("x: .nan\n", "x is nan"),
        ("x: [1, -.inf]\n", "x[1] is -inf"),
        ("x: {y: 1.0e+300}\n", "x.y is 1e+300"),
        ("x: " + "9" * 30 + "\n", "x is an integer of 100 bits"),  # 10³⁰ − 1 < 2¹⁰⁰
    ],
)
def test_yaml_numbers_must_be_finite_and_bounded(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_yaml(text, source="f.yaml", error=SpecError)
    assert fragment in _one_line(exc, "f.yaml")


def test_a_5000_digit_integer_is_one_line() -> None:
    """Python refuses to build an int of over 4300 digits: a one-line refusal, not a
    ValueError traceback."""
    with pytest.raises(SpecError, match="cannot be read as YAML"):
        parse_yaml("x: " + "9" * 5000 + "\n", source="f.yaml", error=SpecError)


def test_the_bound_itself_reads() -> None:
    assert parse_json(f"[{MAX_MAGNITUDE!r}, -{MAX_MAGNITUDE!r}]", source="f", error=SpecError) == [
        MAX_MAGNITUDE,
        -MAX_MAGNITUDE,
    ]


def test_values_false_keeps_infinity_for_a_caller_that_checks_figures(tmp_path: Path) -> None:
    """Another tool's file: ``.inf`` means unlimited there; depth is still bounded."""
    p = tmp_path / "r.json"
    p.write_text('{"rate": Infinity, "x": NaN}')
    data = load_document(p, max_bytes=MIB, error=SpecError, values=False)
    assert data["rate"] == math.inf and math.isnan(data["x"])
    p.write_text("[" * 100 + "]" * 100)
    with pytest.raises(SpecError, match="nested deeper"):
        load_document(p, max_bytes=MIB, error=SpecError, values=False)


# ------------------------------------------------------------------------------------ fuzz
_SCALARS = (
    st.none()
    | st.booleans()
    # JSON integers beyond 64 bits read as floats (orjson); no file of this tool has one
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
_TREES = st.recursive(
    _SCALARS,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=30,
)


def _depth(x: Any) -> int:
    if isinstance(x, dict):
        return 1 + max((_depth(v) for v in x.values()), default=0)
    if isinstance(x, list):
        return 1 + max((_depth(v) for v in x), default=0)
    return 0


def _acceptable(x: Any) -> bool:
    if isinstance(x, dict):
        return all(_acceptable(v) for v in x.values())
    if isinstance(x, list):
        return all(_acceptable(v) for v in x)
    if isinstance(x, float):
        return math.isfinite(x) and abs(x) <= MAX_MAGNITUDE
    if isinstance(x, int) and not isinstance(x, bool):
        return abs(x) <= MAX_MAGNITUDE
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TREES, st.sampled_from(["json", "yaml"]))
def test_fuzz_a_document_reads_back_exactly_or_is_refused_in_one_line(doc: Any, fmt: str) -> None:
    """Written as JSON (Python's json, NaN and all) or YAML, a document either reads back
    equal (every number finite and within bounds, nesting within MAX_DEPTH) or is refused
    with one SpecError line; never another exception."""
    text = json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc)
    parse = parse_json if fmt == "json" else parse_yaml
    try:
        got = parse(text, source="fuzz", error=SpecError)
    except SpecError as exc:
        assert "\n" not in str(exc)
        assert not _acceptable(doc) or _depth(doc) > MAX_DEPTH, (doc, str(exc))
        return
    assert _acceptable(doc)
    assert got == (json.loads(text) if fmt == "json" else yaml.safe_load(text))


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_key_with_a_line_break_is_quoted_in_the_one_line_refusal(fmt: str) -> None:
    """The key a refusal names is shown with its escapes: the line stays one line."""
    doc = {"a\nb": {"\r": [1e300]}}
    text = json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc)
    with pytest.raises(SpecError) as got:
        (parse_json if fmt == "json" else parse_yaml)(text, source="fuzz", error=SpecError)
    assert "\n" not in str(got.value) and "\r" not in str(got.value)
    assert "'a\\nb'.'\\r'[0] is 1e+300" in str(got.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_arbitrary_bytes_never_escape_as_another_exception(raw: bytes) -> None:
    """Any bytes at all, through the whole file path: data or one SpecError line."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".yaml") as f:
        f.write(raw)
        f.flush()
        try:
            load_document(f.name, max_bytes=MIB, error=SpecError)
        except SpecError as exc:
            assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["[", "]", "{", "}", "&a ", "*a", "&b ", "*b", ", ", ": ", "x", "\n", "- "]
        ),
        max_size=60,
    )
)
def test_fuzz_yaml_made_of_anchors_and_brackets(parts: list[str]) -> None:
    """Anchors, aliases and brackets shuffled: a value or one line, never a hang or a crash."""
    text = "".join(parts)
    try:
        parse_yaml(text, source="fuzz", error=SpecError)
    except SpecError as exc:
        assert "\n" not in str(exc)
