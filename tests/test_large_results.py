"""A result too large to read whole is streamed probe by probe: the views get a bounded,
named subset, every probe is still checked, and a file in another layout is refused, never
misread. The size threshold is lowered here so a few hundred probes stand in for 20,000."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tokenwatt.result as result_module
from tokenwatt.errors import ReportError
from tokenwatt.result import PROBES_KEPT, SCHEMA_VERSION, BenchResult, load_result, write_result

FIXTURE = Path(__file__).parent / "fixtures" / "peers" / "tokenwatt_sim_probe"
N = 700


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BenchResult]:
    """A real one-probe result written back with N probes, rates rising."""
    base = load_result(FIXTURE)
    one = base.probes[0]
    probes = [
        one.model_copy(update={"index": i, "rate_rps": (one.rate_rps or 1.0) * (1 + i / N)})
        for i in range(N)
    ]
    whole = base.model_copy(update={"probes": probes, "schema_version": SCHEMA_VERSION})
    folder = tmp_path_factory.mktemp("many")
    write_result(whole, folder)
    return folder, load_result(folder)  # read whole: the truth the stream is held to


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(result_module, "RESULT_WHOLE_MAX_BYTES", 64 << 10)


@pytest.mark.usefixtures("small_threshold")
def test_a_streamed_result_keeps_a_bounded_named_subset(many: tuple[Path, BenchResult]) -> None:
    folder, whole = many
    assert (folder / "result.json").stat().st_size > 64 << 10
    streamed = load_result(folder)
    kept = [p.index for p in streamed.probes]
    # the last half of the budget whole, the rest spread evenly before it, in file order
    assert len(kept) <= PROBES_KEPT and kept == sorted(kept)
    tail = PROBES_KEPT // 2
    assert kept[-tail:] == list(range(N - tail, N))
    spread = kept[:-tail]
    stride = spread[1] - spread[0]
    assert spread == list(range(0, N - tail, stride)) and stride & (stride - 1) == 0
    # each kept probe is exactly the probe the whole read has at that index
    by_index = {p.index: p for p in whole.probes}
    assert all(p == by_index[p.index] for p in streamed.probes)
    # the rest of the result is untouched, and the views are told what was left out
    assert streamed.spec == whole.spec and streamed.boundary == whole.boundary
    note = streamed.warnings[-1]
    assert f"holds {N:,} probes; the views show {len(kept)}" in note
    assert f"every {stride}th" in note and streamed.warnings[:-1] == whole.warnings


@pytest.mark.usefixtures("small_threshold")
def test_a_bad_probe_outside_the_kept_subset_is_still_refused(
    many: tuple[Path, BenchResult], tmp_path: Path
) -> None:
    folder, _ = many
    doc = json.loads((folder / "result.json").read_text("utf-8"))
    doc["probes"][3]["output_tokens_per_s"] = -1.0  # probe 3: not among those kept
    (tmp_path / "result.json").write_text(json.dumps(doc, indent=2))
    with pytest.raises(ReportError, match=r"probes\[3\]\.output_tokens_per_s is -1"):
        load_result(tmp_path)
    doc["probes"][3]["output_tokens_per_s"] = 1.0
    text = json.dumps(doc, indent=2).replace('"window_s": ', '"window_s": NaN, "x": ', 1)
    (tmp_path / "result.json").write_text(text)
    with pytest.raises(ReportError, match=r"probes\[0\]: NaN: numbers must be finite"):
        load_result(tmp_path)


@pytest.mark.usefixtures("small_threshold")
def test_a_large_file_in_another_layout_is_refused_not_misread(
    many: tuple[Path, BenchResult], tmp_path: Path
) -> None:
    folder, _ = many
    doc = json.loads((folder / "result.json").read_text("utf-8"))
    (tmp_path / "result.json").write_text(json.dumps(doc))  # compact: one line
    with pytest.raises(ReportError, match="not in the layout tokenwatt writes"):
        load_result(tmp_path)
    # an element cut short: the file ends inside the array
    text = json.dumps(doc, indent=2)
    (tmp_path / "result.json").write_text(text[: len(text) // 2])
    with pytest.raises(ReportError, match="ends inside an element"):
        load_result(tmp_path)
    # something between two elements other than a comma
    spliced = text.replace("\n    },\n    {", "\n    }\n    {", 1)
    (tmp_path / "result.json").write_text(spliced)
    with pytest.raises(ReportError, match=r"probes\[0\] is not followed by ','"):
        load_result(tmp_path)


def test_below_the_threshold_every_probe_is_kept(many: tuple[Path, BenchResult]) -> None:
    _, whole = many
    assert [p.index for p in whole.probes] == list(range(N))
    assert not any("the views show" in w for w in whole.warnings)


@pytest.mark.usefixtures("small_threshold")
def test_every_view_says_what_was_left_out(many: tuple[Path, BenchResult]) -> None:
    """The terminal report prints the note, and compare names it beside the frontier."""
    from io import StringIO

    from rich.console import Console

    from tokenwatt.report.compare import compare_results
    from tokenwatt.report.compare_view import comparison_view
    from tokenwatt.report.terminal import ResultView
    from tokenwatt.result import probes_left_out

    folder, whole = many
    streamed = load_result(folder)
    note = probes_left_out(streamed)
    assert note is not None and probes_left_out(whole) is None
    out = StringIO()
    console = Console(file=out, width=400)
    console.print(ResultView(streamed))
    assert note in out.getvalue()
    out.truncate(0)
    console.print(comparison_view(compare_results([("a", whole), ("b", streamed)])))
    assert f"b: {note}; the frontier below is drawn from those" in out.getvalue()
