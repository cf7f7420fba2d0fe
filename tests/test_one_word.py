"""One word per figure: for one run of each command, every view gives the same numbers.

``tokenwatt probe`` (a simulator that aborts every stream past 12 tokens, so a third of the
counted requests fail and the counted rate and the achieved rate differ) and ``tokenwatt bench``
(a short search) each run once against the simulator. Their ``result.json`` is held to an
independent truth first: the achieved rate is the successful requests scheduled in the window
÷ window and T the tokens whose receive stamps fall in the window ÷ window, both counted here
from ``requests.jsonl`` by hand, and the headline MBU is redone from ``mbu_detail.inputs``
(the headline's own numerator ÷ the node's bandwidth). Then every view must print those same
figures, each at its own precision: the command's terminal output, ``tokenwatt report``'s
terminal text and ``report.html``, ``tokenwatt compare``, the BR0.2 report and
``probes.csv``. (One probe once printed 1.45 "achieved" in the terminal and 22.35 in
``result.json``.)

Each printed MBU figure (MBU, decode-only MBU, the seed-formula MBU, the engine MBU) has one
word and one definition (``result.MBU_FIGURES``): the same in docs/methodology.md,
docs/howto/glossary.md and result.json's field docs (a quick test), and the terminal and the
HTML print each figure under that word (the runs above).
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from tokenwatt.records import read_requests
from tokenwatt.report.exports import br02_name
from tokenwatt.report.format import fmt_float, fmt_pct, fmt_tokens_per_s
from tokenwatt.result import (
    MBU_DECODE_ONLY,
    MBU_FIGURES,
    MBU_SEED,
    EngineFigures,
    Mbu,
    ProbeSummary,
    load_result,
)

ROOT = Path(__file__).resolve().parent.parent

PROBE_SPEC = """
name: one-word-probe
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim}
sim: {efficiency: 0.5, prefill_cost: false, error_after_tokens: 12}
workload: {input_tokens: 64, output_tokens: {kind: uniform, min: 4, max: 16}, seed: 4}
slo: {ttft_ms: 2000, tpot_ms: 200, max_error_rate: 1.0}
search: {probe: {warmup_s: 0.3, min_duration_s: 1.5, min_requests: 10, early_stop: false}}
"""

BENCH_SPEC = """
name: one-word-bench
model: {source: llama-3.1-8b}
hardware: {accelerator: h100-sxm}
endpoint: {url: sim}
sim: {efficiency: 0.5, prefill_cost: false, max_num_seqs: 8}
workload: {input_tokens: 128, output_tokens: 16, seed: 3, arrival: {kind: constant}}
slo: {ttft_ms: 200, tpot_ms: 200}
search:
  start_rate_rps: 6
  growth: 2.0
  precision: 0.45
  max_probes: 2
  single_stream_requests: 2
  probe: {warmup_s: 0.5, min_duration_s: 1.5, min_requests: 15, max_duration_s: 4}
"""


def _tokenwatt(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "220"},
        timeout=240,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return " ".join(res.stdout.split())  # a table may wrap: compare words


def _truth(folder: Path, p: ProbeSummary) -> tuple[float, float]:
    """(achieved rate, T) counted by hand from the probe's own records."""
    assert p.requests_file is not None
    assert p.window_start_ns is not None and p.window_end_ns is not None
    w0, w1 = p.window_start_ns, p.window_end_ns
    records = [rec for _, rec in read_requests(folder / p.requests_file)]
    ok = sum(1 for r in records if w0 <= r.scheduled_ns < w1 and r.status == "ok")
    tokens = sum(
        k
        for r in records
        for t_ns, k in zip(r.chunk_ns, r.chunk_tokens, strict=False)
        if w0 <= t_ns < w1
    )
    window_s = (w1 - w0) / 1e9
    return ok / window_s, tokens / window_s


class _Cells(HTMLParser):
    """Every table row of an HTML page as its cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _html_probe_row(folder: Path, index: int) -> dict[str, str]:
    parser = _Cells()
    parser.feed((folder / "report.html").read_text("utf-8"))
    header = next(r for r in parser.rows if r[:4] == ["probe", "rate req/s", "achieved", "T tok/s"])
    row = next(r for r in parser.rows if len(r) == len(header) and re.match(rf"{index}\b", r[0]))
    return dict(zip(header, row, strict=True))


def _check_files(folder: Path, p: ProbeSummary) -> None:
    """result.json against the truth, then BR0.2 and the CSV against result.json (exactly)."""
    achieved, t = _truth(folder, p)
    assert p.achieved_rate_rps == pytest.approx(achieved, rel=1e-12)
    assert p.output_tokens_per_s == pytest.approx(t, rel=1e-12)
    assert p.counted_rate_rps == pytest.approx(p.requests_counted / p.window_s, rel=1e-12)
    detail = p.mbu_detail
    assert p.mbu is not None and detail is not None
    i = detail.inputs
    assert i.headline_bytes_per_s is not None
    assert p.mbu == pytest.approx(i.headline_bytes_per_s / i.node_bandwidth_bytes_per_s, rel=1e-12)
    br = yaml.safe_load((folder / br02_name(p.index)).read_text("utf-8"))
    throughput = br["results"]["request_performance"]["aggregate"]["throughput"]
    assert throughput["request_rate"]["mean"] == p.achieved_rate_rps
    assert throughput["output_token_rate"]["mean"] == p.output_tokens_per_s
    with (folder / "probes.csv").open(encoding="utf-8") as fh:
        (row,) = [r for r in csv.DictReader(fh) if r["stage"] == str(p.index)]
    assert float(row["achieved_rps"]) == p.achieved_rate_rps
    assert float(row["output_tok_s"]) == p.output_tokens_per_s
    assert float(row["mbu"]) == p.mbu


def _check_html(folder: Path, p: ProbeSummary) -> None:
    cells = _html_probe_row(folder, p.index)
    assert cells["achieved"] == fmt_float(p.achieved_rate_rps)
    assert cells["T tok/s"] == fmt_tokens_per_s(p.output_tokens_per_s)
    assert cells["MBU"] == fmt_pct(p.mbu)


def _check_mbu_words(text: str, p: ProbeSummary) -> None:
    """The decode-only figure under its one word; the seed-formula MBU where the engine's
    figures stand beside the client's (the engine table)."""
    d = p.mbu_detail
    assert d is not None and d.mbu_decode_only is not None
    assert f"{MBU_DECODE_ONLY.label} {fmt_pct(d.mbu_decode_only)}" in text
    bare = text.replace(f"{MBU_DECODE_ONLY.label} ", "")  # no second spelling of it
    assert f"decode-only {fmt_pct(d.mbu_decode_only)}" not in bare
    if p.engine is not None and p.engine.mbu is not None:
        assert MBU_SEED.label in text


def _table_rows(path: Path) -> list[list[str]]:
    rows = []
    for line in path.read_text("utf-8").splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_each_mbu_figure_has_one_definition_everywhere() -> None:
    """Methodology, glossary and result.json's field docs give each printed MBU figure the
    same word and definition, and no other row defines an MBU figure another way."""
    glossary = _table_rows(ROOT / "docs/howto/glossary.md")
    methodology = _table_rows(ROOT / "docs/methodology.md")
    fields = {
        "Mbu.mbu": Mbu.model_fields["mbu"].description or "",
        "Mbu.mbu_decode_only": Mbu.model_fields["mbu_decode_only"].description or "",
        "Mbu.seed_mbu": Mbu.seed_mbu.__doc__ or "",
        "EngineFigures.mbu": EngineFigures.model_fields["mbu"].description or "",
    }
    for f in MBU_FIGURES:
        assert [f"**{f.label}**", f.definition] in glossary, f.label
        assert [f.label, f"`{f.name}`", f.definition] in methodology, f.label
        doc = fields[f.name]
        assert doc.startswith(f.definition) or "MBU_SEED" in doc, (f.name, doc)
    labels = {f"**{f.label}**" for f in MBU_FIGURES}
    mbu_terms = [r[0] for r in glossary if "MBU" in r[0]]
    assert sorted(mbu_terms) == sorted(labels), mbu_terms
    assert len({f.label for f in MBU_FIGURES}) == len(MBU_FIGURES)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_view_of_a_probe_and_a_bench_gives_the_same_figures(tmp_path: Path) -> None:
    (tmp_path / "probe.yaml").write_text(PROBE_SPEC)
    (tmp_path / "bench.yaml").write_text(BENCH_SPEC)
    probe_dir, bench_dir = tmp_path / "probe", tmp_path / "bench"
    probe_out = _tokenwatt("probe", str(tmp_path / "probe.yaml"), "--rate", "10", "--out",
                           str(probe_dir))  # fmt: skip
    bench_out = _tokenwatt("bench", str(tmp_path / "bench.yaml"), "--out", str(bench_dir))
    assert not (probe_dir / "probe.json").exists()

    probe = load_result(probe_dir).probes[0]
    boundary = load_result(bench_dir).boundary
    assert boundary is not None
    # the case that tells the words apart: failures take achieved below counted
    assert probe.requests_failed > 0 and probe.achieved_rate_rps < probe.counted_rate_rps
    for folder, p in ((probe_dir, probe), (bench_dir, boundary)):
        _check_files(folder, p)
        _tokenwatt("report", str(folder), "--width", "200")  # rewrites report.html
        _check_html(folder, p)
    # the HTML's MBU card is the boundary's: the decode-only figure under its one word
    _check_mbu_words(" ".join((bench_dir / "report.html").read_text("utf-8").split()), boundary)

    # the probe's own terminal: offered, counted and achieved named, T, MBU
    assert (
        f"10 req/s offered (poisson), {probe.counted_rate_rps:.2f} counted, "
        f"{probe.achieved_rate_rps:.2f} achieved req/s" in probe_out
    )
    assert f"output tokens/s (T) │ {probe.output_tokens_per_s:.1f}" in probe_out
    assert f"MBU │ {fmt_pct(probe.mbu)}" in probe_out
    _check_mbu_words(probe_out, probe)
    # the bench's terminal and `tokenwatt report`'s: the probe table's row of the boundary
    report_out = _tokenwatt("report", str(bench_dir), "--no-html", "--width", "200")
    for text in (bench_out, report_out):
        achieved = fmt_float(boundary.achieved_rate_rps)
        t = fmt_tokens_per_s(boundary.output_tokens_per_s)
        row = f"{boundary.index}* {fmt_float(boundary.rate_rps)} {achieved} {t}"
        assert row in text, text[-2000:]
        assert f"{fmt_pct(boundary.mbu)} " in text.split(row)[1][:120]
    # `tokenwatt probe`'s folder through `report`: its one probe is the headline
    probe_report = _tokenwatt("report", str(probe_dir), "--no-html", "--width", "200")
    assert f"{fmt_float(probe.counted_rate_rps)} counted" in probe_report
    assert f"{fmt_float(probe.achieved_rate_rps)} achieved" in probe_report
    assert f"MBU {fmt_pct(probe.mbu)}" in probe_report
    # compare reads both commands' folders: the headline probe of each
    cmp = _tokenwatt("compare", str(probe_dir), str(bench_dir))
    achieved_row = re.search(r"achieved rate \(req/s\) (\S+) (\S+)", cmp)
    t_row = re.search(r"T \(output tok/s\) (\S+) (\S+)", cmp)
    mbu_row = re.search(r"MBU (\S+) (\S+)", cmp)
    assert achieved_row and t_row and mbu_row, cmp
    assert achieved_row.groups() == (
        fmt_float(probe.achieved_rate_rps),
        fmt_float(boundary.achieved_rate_rps),
    )
    assert t_row.groups() == (
        fmt_tokens_per_s(probe.output_tokens_per_s),
        fmt_tokens_per_s(boundary.output_tokens_per_s),
    )
    assert mbu_row.groups() == (fmt_pct(probe.mbu), fmt_pct(boundary.mbu))
