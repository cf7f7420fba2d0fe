"""Fuzzing the spec: mutated example specs either load or fail with the one-line spec error.

Starting points are the shipped specs (examples/ and the bundled demo). Mutations replace any
value with one of another type or an extreme number (inf, nan, 1e308, 2**63, a 200,000-character
string), delete keys, add unknown keys, or corrupt the YAML text itself. A spec that loads must
hold only finite numbers; one that does not must raise ``SpecError`` with one short line.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwatt.errors import SpecError
from tokenwatt.spec import ERROR_LINE_MAX, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[1]
SPECS = [*sorted((ROOT / "examples").glob("*.yaml")), ROOT / "src/tokenwatt/examples/demo.yaml"]
BASES = [yaml.safe_load(p.read_text("utf-8")) for p in SPECS]
LONG = "9" * 200_000
BASE = {
    "model": {"source": "x"},
    "endpoint": {"url": "sim"},
    "hardware": {"accelerator": "h100-sxm"},
}

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**63, 10**40, math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from([LONG, "inf", "nan", "1e308", "", "sim", "http://u:p@h/v1"]),
    st.lists(st.integers(min_value=-5, max_value=10**9), max_size=4),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a nested spec (mappings and lists)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


def parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        where = paths(doc)
        if not where:
            break
        path = draw(st.sampled_from(where))
        holder = parent(doc, path)
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            holder[path[-1]] = draw(values)
        elif action == "delete":
            del holder[path[-1]]
        elif isinstance(holder, dict):
            holder[draw(st.sampled_from(["zzz", LONG, "api_key", "timeouts"]))] = draw(values)
    return doc


def assert_one_line(err: SpecError) -> None:
    text = str(err)
    assert "\n" not in text and 0 < len(text) <= ERROR_LINE_MAX, text[:500]
    assert LONG not in text


def assert_finite(node: Any) -> None:
    if isinstance(node, dict):
        for v in node.values():
            assert_finite(v)
    elif isinstance(node, list):
        for v in node:
            assert_finite(v)
    elif isinstance(node, float):
        assert math.isfinite(node)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_specs_load_or_fail_on_one_line(doc: Any) -> None:
    try:
        spec = parse_spec(doc, source="spec.yaml")
    except SpecError as err:
        assert_one_line(err)
        return
    assert_finite(spec.model_dump(mode="python"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SPECS),
    st.integers(min_value=0, max_value=4000),
    st.binary(min_size=1, max_size=20),
)
def test_corrupted_spec_files_fail_on_one_line(
    tmp_path_factory: pytest.TempPathFactory, src: Path, at: int, junk: bytes
) -> None:
    raw = src.read_bytes()
    at = min(at, len(raw))
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_bytes(raw[:at] + junk + raw[at:])
    try:
        load_spec(path)
    except SpecError as err:
        assert_one_line(err)


@pytest.mark.parametrize(
    ("section", "value", "field"),
    [
        ({"endpoint": {"url": "sim", "timeouts": {"total_s": math.inf}}}, "inf", "total_s"),
        (
            {"endpoint": {"url": "sim", "timeouts": {"first_token_s": 1e308}}},
            "1e+308",
            "first_token_s",
        ),
        ({"search": {"probe": {"min_duration_s": math.nan}}}, "nan", "min_duration_s"),
        ({"search": {"max_rate_rps": 1e12}}, "1000000000000.0", "max_rate_rps"),
        ({"workload": {"output_tokens": 10**40}}, "1000000000000000", "value"),
        ({"power": {"sample_interval_s": 1e-300}}, "1e-300", "sample_interval_s"),
        ({"hardware": {"accelerator": "h100-sxm", "gpus": 2**63}}, "9223372036854775808", "gpus"),
    ],
)
def test_extreme_numbers_are_refused_by_name(
    section: dict[str, Any], value: str, field: str
) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, **section})
    assert field in str(err.value) and value in str(err.value)
    assert_one_line(err.value)


def test_a_huge_bad_value_is_cut_in_the_error() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "endpoint": {"url": "ftp://" + LONG}})
    assert "endpoint.url" in str(err.value)
    assert_one_line(err.value)


def test_a_bad_url_is_shown_without_its_password() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "endpoint": {"url": "ftp://bob:pw-Q9SECRET@h/v1"}})
    assert "endpoint.url" in str(err.value) and "***@h/v1" in str(err.value)
    assert "pw-Q9SECRET" not in str(err.value)
