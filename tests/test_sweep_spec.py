"""The sweep file: the command template and the grid (or list) expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.errors import SpecError
from tokenwatt.spec.sweep import (
    SweepSpec,
    expand_points,
    load_sweep_spec,
    point_label,
    render,
    render_command,
)

BASE = {
    "server": {"command": "srv -m {gguf} -np {slots} --port {port}", "health_url": "http://x"},
    "bench": {"model": {"source": "qwen3-8b"}},
}


def test_grid_is_every_combination_last_key_fastest() -> None:
    spec = SweepSpec.model_validate({**BASE, "grid": {"slots": [1, 2], "threads": [4, 8, 16]}})
    points = expand_points(spec)
    assert len(points) == 6
    assert points[0] == {"slots": 1, "threads": 4}
    assert points[1] == {"slots": 1, "threads": 8}
    assert points[3] == {"slots": 2, "threads": 4}
    assert [point_label(p) for p in points[:2]] == ["slots=1,threads=4", "slots=1,threads=8"]


def test_points_list_is_kept_in_order() -> None:
    spec = SweepSpec.model_validate({**BASE, "points": [{"slots": 4}, {"slots": 1}]})
    assert expand_points(spec) == [{"slots": 4}, {"slots": 1}]


def test_template_quotes_values_and_splits_like_a_shell() -> None:
    argv = render_command(
        "srv -m {gguf} -np {slots} --port {port}",
        {"gguf": "/models/my model.gguf", "slots": 2, "port": 8123},
    )
    assert argv == ["srv", "-m", "/models/my model.gguf", "-np", "2", "--port", "8123"]
    assert render("http://127.0.0.1:{port}/v1", {"port": 9}, what="set") == "http://127.0.0.1:9/v1"


def test_unknown_placeholder_is_one_line_naming_it() -> None:
    with pytest.raises(SpecError, match=r"\{slotz\} is not defined"):
        render_command("srv -np {slotz}", {"slots": 1, "port": 1, "point": 0})
    with pytest.raises(SpecError, match="not a plain name"):
        render("srv {a.b}", {"a": 1}, what="server.command")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({}, "exactly one of grid"),
        ({"grid": {"slots": [1]}, "points": [{"slots": 1}]}, "exactly one of grid"),
        ({"grid": {"slots": []}}, "at least one value"),
        ({"grid": {"port": [1, 2]}}, "set per point by the sweep"),
        ({"grid": {"a": [1, 2, 3]}, "max_points": 2}, "over max_points"),
    ],
)
def test_bad_sweeps_are_refused_in_one_line(
    tmp_path: Path, extra: dict[str, object], match: str
) -> None:
    import yaml

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**BASE, **extra}))
    with pytest.raises(SpecError, match=match) as err:
        expand_points(load_sweep_spec(path))
    assert "\n" not in str(err.value)


def test_the_bundled_sweep_example_validates_at_every_point() -> None:
    from tokenwatt.cli.sweep import _bench_doc, _check_first

    path = Path(__file__).parents[1] / "examples" / "sweeps" / "llamacpp-slots.yaml"
    spec = load_sweep_spec(path)
    doc = _bench_doc(spec, path)
    _check_first(spec, doc)  # every point's command, health URL and bench spec
    assert [point_label(p) for p in expand_points(spec)] == [f"slots={n}" for n in (1, 2, 4, 8)]
