"""The HTML report: every section present, nothing fetched from outside, data embedded.

The ``browser`` test renders the file in Debian's headless chromium (`.ci/setup-browser`).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tokenwatt.report.html import SECTION_IDS, render_html, write_html
from tokenwatt.result import BenchResult

FIXTURES = Path(__file__).parent / "fixtures" / "report"
_URL_ATTRS = {"src", "href", "xlink:href", "srcset", "action", "formaction", "data", "poster"}
_REMOTE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)


def _data() -> dict[str, Any]:
    return json.loads((FIXTURES / "result-v1.json").read_text("utf-8"))


class _Survey(HTMLParser):
    """Collects what the checks need: section ids, resource references, scripts, styles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.references: list[tuple[str, str, str]] = []
        self.tags: dict[str, int] = {}
        self.scripts: list[dict[str, str | None]] = []
        self.styles: list[str] = []
        self.json_text: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.sections.append(a["id"] or "")
        for name, value in attrs:
            if name in _URL_ATTRS and value is not None:
                self.references.append((tag, name, value))
            if name == "style" and value:
                self.styles.append(value)
        if tag == "script":
            self.scripts.append(a)
            self._in = "json" if a.get("type") == "application/json" else "script"
        elif tag == "style":
            self._in = "style"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "style":
            self.styles.append(data)
        elif self._in == "json":
            self.json_text.append(data)


def _survey(text: str) -> _Survey:
    s = _Survey()
    s.feed(text)
    s.close()
    return s


def _assert_offline(s: _Survey) -> None:
    remote = [r for r in s.references if _REMOTE.match(r[2])]
    assert not remote, remote
    assert all(v.startswith(("#", "data:")) for _, _, v in s.references), s.references
    assert "link" not in s.tags and "iframe" not in s.tags and "img" not in s.tags
    assert all(sc.get("type") == "application/json" and "src" not in sc for sc in s.scripts)
    for css in s.styles:
        assert "url(" not in css and "@import" not in css


def test_golden_report_has_every_section_and_no_outside_reference() -> None:
    text = render_html(BenchResult.model_validate(_data()))
    s = _survey(text)
    assert s.sections == list(SECTION_IDS)
    _assert_offline(s)
    assert "http://" not in text and "https://" not in text
    # One inline figure each: latency, goodput, MBU, experts (MoE), power (measured).
    assert s.tags.get("svg") == 5
    assert text.startswith("<!DOCTYPE html>")


def test_headline_and_tables_carry_the_figures() -> None:
    text = render_html(BenchResult.model_validate(_data()))
    headline = text[text.index('id="headline"') : text.index('id="checks"')]
    # Goodput first, then tokens per joule, then MBU.
    assert (
        headline.index("SLO goodput") < headline.index("Tokens per joule") < headline.index("MBU")
    )
    assert "2,368 <small>tok/s</small>" in headline
    assert "1,184 tok/s per GPU · at 9.25 req/s" in headline
    assert "1.93 <small>tok/J simulated</small>" in headline and "41.0%" in headline
    assert "weights 36.9% + KV 4.1%" in headline
    probes = text[text.index('id="probes"') : text.index('id="single-stream"')]
    assert probes.count("<tr") == 11  # header + 10 probes
    assert '<tr class="boundary"><td class="l">10 ★</td>' in probes
    assert "FAIL ttft, tpot, trend" in probes
    mbu = text[text.index('id="mbu"') : text.index('id="experts"')]
    for needle in ("B = T·τ/R", "56.8", "125 of 128", "W(B)", "59.0 GB", "272 GB/s"):
        assert needle in mbu


def test_embedded_json_is_the_result(tmp_path: Path) -> None:
    data = _data()
    data["name"] = "a </script><script>alert(1)</script> run"
    data["spec"]["endpoint"]["url"] = "http://127.0.0.1:8000/v1"
    result = BenchResult.model_validate(data)
    path = write_html(result, tmp_path)
    text = path.read_text("utf-8")
    s = _survey(text)
    assert len(s.scripts) == 1  # the name did not open a script element
    _assert_offline(s)  # the endpoint URL is text, not a reference
    embedded = json.loads("".join(s.json_text))
    assert BenchResult.model_validate(embedded) == result
    assert "&lt;/script&gt;" in text


def test_dense_model_without_power_or_boundary() -> None:
    data = _data()
    g = data["geometry"]
    g.update(name="dense-8b", moe_layers=0, experts=0, experts_per_token=0, expert_params=0)
    g.update(expert_bytes=0, dense_weight_bytes=16_060_000_000)
    for p in [*data["probes"], data["single_stream"]]:
        p["power_series"] = None
        p["energy"] = None
        p["tokens_per_joule"] = None
    data["boundary"] = None
    for p in data["probes"]:
        p["slo_passed"] = False  # no boundary because nothing passed (not a stopped search)
    text = render_html(BenchResult.model_validate(data))
    s = _survey(text)
    assert s.sections == list(SECTION_IDS)
    _assert_offline(s)
    assert s.tags.get("svg") == 3  # latency, goodput, MBU; no experts, no power
    assert "Dense model: every weight is read every step" in text
    assert "Not measured: no power samples" in text
    assert "SLO not met" in text


class _Marks(HTMLParser):
    """Each card, table, figure and svg of the page with the text inside it (nested ones
    included), for the simulated mark's checks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.done: list[tuple[str, str]] = []
        self._stack: list[tuple[str, str | None, list[str]]] = []  # tag, kind, texts

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        card = tag == "div" and "card" in (dict(attrs).get("class") or "").split()
        kind = "card" if card else tag if tag in ("table", "figure", "svg") else None
        self._stack.append((tag, kind, []))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            open_tag, kind, texts = self._stack.pop()
            if kind is not None:
                self.done.append((kind, " ".join(texts)))
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, kind, texts in self._stack:
            if kind is not None:
                texts.append(data)


def _marks(text: str) -> list[tuple[str, str]]:
    body = text.split('<script type="application/json"', 1)[0]
    m = _Marks()
    m.feed(body)
    m.close()
    return m.done


def test_a_simulated_run_is_marked_on_every_card_chart_and_table() -> None:
    """A card, chart or table copied out of the page alone still says SIMULATED; the
    simulator's power is marked beside its watts."""
    data = _data()  # served by the simulator (endpoint url: sim)
    text = render_html(BenchResult.model_validate(data))
    found = _marks(text)
    kinds = [k for k, _ in found]
    assert kinds.count("card") == 3 and kinds.count("svg") == 5 and kinds.count("figure") == 5
    assert kinds.count("table") >= 5  # probes, MBU inputs, single stream, model, node
    unmarked = [(k, t[:60]) for k, t in found if "SIMULATED" not in t]
    assert not unmarked, unmarked
    headline = text[text.index('id="headline"') : text.index('id="checks"')]
    assert "W mean (simulated)" in headline
    assert "modelled power over each probe's window: not a measurement" in html.unescape(text)


def test_a_measured_run_carries_no_simulated_mark() -> None:
    data = _data()
    data["spec"]["endpoint"]["url"] = "http://127.0.0.1:8000/v1"
    data["target"] = {"kind": "endpoint", "base_url": "http://127.0.0.1:8000/v1"}
    for p in [*data["probes"], data["single_stream"], data["boundary"]]:
        if p.get("energy"):
            p["energy"]["source"] = "nvml"
    text = render_html(BenchResult.model_validate(data))
    page = text.split('<script type="application/json"', 1)[0]
    assert "SIMULATED" not in page and "(simulated)" not in page
    assert "Sampled power over each probe" in page


def test_goodput_chart_plots_achieved_rate() -> None:
    """A probe that achieved more than a higher offered one sits to its right, not as a dip."""
    from tokenwatt.report.plots import goodput_plot, goodput_probes

    data = _data()
    first, second = data["probes"][0], data["probes"][1]
    # schema 3: achieved (successes ÷ window) beside counted, so the loader keeps them as set
    first["rate_rps"], first["achieved_rate_rps"], first["counted_rate_rps"] = 8.0, 12.0, 12.0
    second["rate_rps"], second["achieved_rate_rps"], second["counted_rate_rps"] = 10.0, 9.0, 9.0
    result = BenchResult.model_validate(data)
    order = [p.index for p in goodput_probes(result)]
    assert order.index(second["index"]) < order.index(first["index"])
    assert [p.achieved_rate_rps for p in goodput_probes(result)] == sorted(
        p.achieved_rate_rps for p in result.probes if p.rate_rps is not None
    )
    assert "achieved rate (req/s)" in goodput_plot(result)


def _chromium() -> str | None:
    override = os.environ.get("TOKENWATT_CHROMIUM")
    if override:
        return override
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _chromium_cmd(binary: str, profile: Path) -> list[str]:
    return [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
    ]


@pytest.mark.browser
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        pytest.skip("chromium not installed (run .ci/setup-browser, or set TOKENWATT_CHROMIUM)")
    path = write_html(BenchResult.model_validate(_data()), tmp_path / "run")
    url = path.resolve().as_uri()
    base = _chromium_cmd(binary, tmp_path / "profile")
    dom = subprocess.run(
        [*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    s = _survey(dom)
    assert s.sections == list(SECTION_IDS)
    assert s.tags.get("svg") == 5
    assert "2,368" in dom
    shot = tmp_path / "report.png"
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1100,2400", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2400, 1100)
    # Not a blank page: the figures and text give plenty of distinct colours.
    flat = (pixels[..., :3] * 255).astype(int).reshape(-1, 3)
    distinct = {tuple(px) for px in flat[:: max(1, len(flat) // 200_000)]}
    assert len(distinct) > 50
    keep = os.environ.get("TOKENWATT_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
