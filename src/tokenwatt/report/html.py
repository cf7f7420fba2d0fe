"""``DIR/report.html``: one self-contained file rendered from the result file.

Everything is inline: CSS, figures (SVG from ``report.plots``) and the result JSON itself, so
the file opens offline, can be mailed, and can be re-analysed without the run directory.
No element references anything outside the file.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.report import plots
from tokenwatt.report.checks import self_checks
from tokenwatt.report.engine_view import ENGINE_HEADER, engine_probe, engine_rows
from tokenwatt.report.format import (
    DASH,
    STAR_CAPTION,
    fmt_bytes,
    fmt_bytes_per_s,
    fmt_float,
    fmt_ms,
    fmt_pct,
    fmt_quantile,
    fmt_rate,
    fmt_tokens_per_s,
    goodput_headline,
    no_boundary_text,
    no_failure_seen,
    safe_rate_text,
)
from tokenwatt.report.intervals_text import interval_caption, interval_rows
from tokenwatt.report.labels import (
    SIMULATED,
    SIMULATED_NOTE,
    accuracy_text,
    bandwidth_provenance,
    describe_run,
    describe_slo,
    power_mark,
)
from tokenwatt.report.mbu_text import (
    HEADLINE_NUMERATOR,
    distinct_experts_at,
    mbu_figures_text,
    mbu_missing_reason,
    mbu_notes,
    raised_flags,
)
from tokenwatt.report.terminal import cost_text, energy_text, one_probe_row
from tokenwatt.result import BenchResult, ProbeSummary

__all__ = ["REPORT_FILE", "SECTION_IDS", "render_html", "write_html"]

REPORT_FILE = "report.html"
# Every report has these sections, in this order (the tests check them).
SECTION_IDS = (
    "headline",
    "checks",
    "latency",
    "goodput",
    "mbu",
    "experts",
    "power",
    "probes",
    "single-stream",
    "inputs",
    "spec",
)

_CSS = """
:root { --ink:#1d2733; --muted:#6c757d; --line:#dde2e8; --pass:#2a9d5c; --fail:#d1495b;
        --warn:#b7791f; --bg:#f7f8fa; --card:#ffffff; --accent:#1d3557; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
       font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1040px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 0 0 10px; color: var(--accent); }
.sub { color: var(--muted); margin: 0 0 2px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
          padding: 16px 18px; margin: 16px 0; }
.cards { display: grid; grid-template-columns: repeat(3, 1fr); gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase;
               letter-spacing: .04em; }
.card .value { font-size: 26px; font-weight: 650; margin: 2px 0; }
.card .detail { color: var(--muted); font-size: 12.5px; }
.card.first .value { color: var(--pass); }
.none { color: var(--warn); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
table.inputs { width: auto; min-width: 60%; margin-top: 10px; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: right;
         white-space: nowrap; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
td.l, th.l { text-align: left; white-space: normal; }
td:first-child { white-space: nowrap; }
tr.boundary td { background: #eef3fb; font-weight: 600; }
.pass { color: var(--pass); } .fail { color: var(--fail); }
ul.checks { margin: 0; padding-left: 20px; }
ul.checks li.warning { color: var(--warn); } ul.checks li.note { color: var(--muted); }
figure { margin: 0; } figure svg { width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12.5px; margin-top: 4px; }
pre { background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 10px;
      overflow-x: auto; font-size: 12px; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
@media (max-width: 760px) { .cards, .grid2 { grid-template-columns: 1fr; } }
footer { color: var(--muted); font-size: 12px; text-align: center; }
.sim { display: inline-block; background: #8e44ad; color: #fff; font-weight: 700;
       font-size: 11px; letter-spacing: .06em; border-radius: 4px; padding: 0 6px;
       margin-left: 6px; text-transform: none; vertical-align: middle; }
caption { caption-side: top; text-align: left; padding: 0 0 4px; }
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _mark(r: BenchResult) -> str:
    """The SIMULATED badge of a simulated run ('' otherwise), on every card, figure and
    table: each can be copied out of the page alone (``labels.SIMULATED_NOTE`` on hover)."""
    if not r.simulated:
        return ""
    return f'<span class="sim" title="{_e(SIMULATED_NOTE)}">{SIMULATED}</span>'


def _table(
    headers: Iterable[str],
    rows: Iterable[Iterable[str]],
    *,
    left: Iterable[int] = (0,),
    row_classes: Iterable[str] | None = None,
    cls: str = "",
    mark: str = "",
) -> str:
    """A table of already-escaped cells; columns numbered in ``left`` align left; ``mark``
    (the simulated badge) as its caption."""
    hs = list(headers)
    lefts = set(left)
    head = "".join(f'<th class="{"l" if i in lefts else ""}">{h}</th>' for i, h in enumerate(hs))
    classes = list(row_classes) if row_classes is not None else []
    body = []
    for r, row in enumerate(rows):
        cls = f' class="{classes[r]}"' if r < len(classes) and classes[r] else ""
        cells = "".join(
            f'<td class="{"l" if i in lefts else ""}">{c}</td>' for i, c in enumerate(row)
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    attr = f' class="{cls}"' if cls else ""
    caption = f"<caption>{mark}</caption>" if mark else ""
    return (
        f"<table{attr}>{caption}<thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{_e(title)}</h2>{body}</section>'


def _figure(svg: str, caption: str, mark: str = "") -> str:
    text = f"{mark} {_e(caption)}" if mark else _e(caption)
    return f"<figure>{svg}<figcaption>{text}</figcaption></figure>"


def _one_probe(b: ProbeSummary) -> str:
    """The goodput card of a one-probe folder: the probe's own verdict, as the terminal's."""
    _, text = one_probe_row(b)
    figure, _, rest = text.partition("  ·  ")
    return (
        f'<div class="value{"" if b.slo_passed else " none"}">{_e(figure)}</div>'
        f'<div class="detail">{_e(rest)}</div>'
    )


def _headline(r: BenchResult) -> str:
    b = r.headline_probe
    if b is None:
        lowest = min((p.rate_rps for p in r.probes if p.rate_rps is not None), default=None)
        why = no_boundary_text(r)
        first = (
            '<div class="value none">SLO not met</div>'
            f'<div class="detail">at any probed rate (lowest {_e(fmt_rate(lowest))})</div>'
            if why.startswith("SLO not met")
            else f'<div class="value none">no boundary</div><div class="detail">{_e(why)}</div>'
        )
        energy = mbu = f'<div class="value">{DASH}</div>'
    else:
        first = (
            f'<div class="value">{_e(fmt_tokens_per_s(b.goodput_output_tokens_per_s))} '
            f'<small>tok/s</small></div><div class="detail">'
            f"{_e(fmt_tokens_per_s(b.goodput_output_tokens_per_s_per_gpu))} tok/s per GPU · "
            f"at {_e(fmt_rate(b.rate_rps))}</div>"
        )
        if r.boundary is None:
            first = _one_probe(b)
        elif no_failure_seen(r) or b.boundary_rate_rps is not None:
            main, detail = goodput_headline(r, b)
            first = (
                f'<div class="value">{_e(main)}</div><div class="detail">'
                f"{_e(fmt_tokens_per_s(b.goodput_output_tokens_per_s_per_gpu))} tok/s per GPU · "
                f"at {_e(fmt_rate(b.rate_rps))}</div>"
                + (f'<div class="detail">{_e(detail)}</div>' if detail else "")
            )
            if (safe := safe_rate_text(r, b)) is not None:  # beside the headline, flag included
                flagged = " none" if b.safe_rate_flag is not None else ""  # the warning colour
                first += f'<div class="detail{flagged}">safe rate {_e(safe)}</div>'
        cost = cost_text(b)
        if cost is not None:
            first += f'<div class="detail">{_e(cost)}</div>'
        if b.tokens_per_joule is None:
            energy = (
                '<div class="value none">not measured</div>'
                '<div class="detail">no power source (spec: power.sources)</div>'
            )
        else:
            tpj, _, rest = energy_text(b).partition("  ")
            figure, _, mark = tpj.partition(" tok/J")  # "1.93", " simulated" or ""
            energy = (
                f'<div class="value">{_e(figure)} <small>tok/J{_e(mark)}</small></div>'
                f'<div class="detail">{_e(rest.strip("()"))}</div>'
            )
        mbu = _mbu_card(b)
    m = _mark(r)
    label = "SLO goodput" if b is None or b.slo_passed or r.boundary is not None else "Goodput"
    cards = (
        f'<div class="card first"><div class="label">{label}{m}</div>{first}</div>'
        f'<div class="card"><div class="label">Tokens per joule{m}</div>{energy}</div>'
        f'<div class="card"><div class="label">MBU (decode bandwidth){m}</div>{mbu}</div>'
    )
    if b is not None and b.accuracy is not None:  # the graded answers (graded:)
        cards += (
            f'<div class="card"><div class="label">Accuracy{m}</div>'
            f'<div class="detail">{_e(accuracy_text(b.accuracy))}</div></div>'
        )
    return f'<section id="headline"><div class="cards">{cards}</div>{_intervals(b)}</section>'


def _intervals(b: ProbeSummary | None) -> str:
    """The headline probe's figures with their intervals, under the cards."""
    rows = [] if b is None else interval_rows(b)
    if b is None or not rows:
        return ""
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)
    notes = "".join(
        f'<div class="detail">{_e(n)}</div>' for n in (b.intervals.notes if b.intervals else [])
    )
    caption = _e(interval_caption(b) or "")
    return f'<div class="intervals"><p>{caption}</p><table>{body}</table>{notes}</div>'


def _checks(r: BenchResult) -> str:
    checks = self_checks(r)
    if not checks:
        return _section("checks", "Self-checks", "<p>Nothing to report.</p>")
    items = "".join(f'<li class="{c.level}">{_e(c.message)}</li>' for c in checks)
    return _section("checks", "Self-checks", f'<ul class="checks">{items}</ul>')


def _short(failed: list[str]) -> list[str]:
    """``ttft_p99`` → ``ttft``: the column headers already name the quantile."""
    return [f.split("_p")[0] for f in failed]


def _probe_rows(r: BenchResult) -> tuple[list[list[str]], list[str]]:
    q = r.slo.percentile
    rows, classes = [], []
    bi = r.boundary.index if r.boundary is not None else None
    for p in r.probes:
        verdict = (
            '<span class="pass">pass</span>'
            if p.slo_passed
            else f'<span class="fail">FAIL {_e(", ".join(_short(p.slo_detail.failed)))}</span>'
        )
        rows.append(
            [
                _e(f"{p.index}{' ★' if p.index == bi else ''}"),
                _e(fmt_float(p.rate_rps)),
                _e(fmt_float(p.achieved_rate_rps)),
                _e(fmt_tokens_per_s(p.output_tokens_per_s)),
                _e(fmt_float(p.batch_per_replica)),
                _e(fmt_ms(p.latency_at("ttft", q))),
                _e(fmt_ms(p.latency_at("tpot", q))),
                _e(fmt_pct(p.attainment)),
                _e(fmt_pct(p.mbu)),
                _e(fmt_float(p.tokens_per_joule)),
                _e(f"{p.requests_ok:,}/{p.requests_failed:,}"),
                _e(fmt_float(p.window_s)),
                verdict,
            ]
        )
        classes.append("boundary" if p.index == bi else "")
    return rows, classes


def _probes(r: BenchResult) -> str:
    q = fmt_quantile(r.slo.percentile)
    rows, classes = _probe_rows(r)
    headers = [
        "probe",
        "rate req/s",
        "achieved",
        "T tok/s",
        "B",
        f"TTFT {q}",
        f"TPOT {q}",
        "attain",
        "MBU",
        "tok/J",
        "ok/failed",
        "window s",
        "SLO",
    ]
    table = _table(headers, rows, left=(0, len(headers) - 1), row_classes=classes, mark=_mark(r))
    note = f'<p class="sub">{_e(STAR_CAPTION.replace("*", "★", 1))}.</p>'
    return _section("probes", "Probes", table + note)


def _mbu_card(b: ProbeSummary) -> str:
    """The headline MBU card: the figure, its split and the decode-only figure, or the reason
    there is none (an MBU above 100 % is refused, never shown)."""
    d = b.mbu_detail
    if b.mbu is None:  # a refusal's detail is the self-checks' warning, said once there
        return f'<div class="value none">{_e(mbu_missing_reason(d))}</div>'

    figures = mbu_figures_text(b.mbu, d).split("  ", 1)
    split = figures[1].strip() if len(figures) > 1 else "split not available"
    return (
        f'<div class="value">{_e(fmt_pct(b.mbu))}</div>'
        f'<div class="detail">{_e(split)} · diagnostic, not the headline</div>'
    )


def _mbu_inputs(r: BenchResult, p: ProbeSummary) -> str:
    if p.mbu_detail is None:
        return "<p>MBU inputs not available.</p>"
    i = p.mbu_detail.inputs
    rows = [
        ("T", f"{fmt_tokens_per_s(i.output_tokens_per_s)} tok/s", "output tokens/s, node"),
        ("τ", fmt_ms(i.itl_token_weighted_s), "token-weighted mean inter-token latency"),
        ("R", str(i.replicas), "data-parallel replicas"),
        ("s = 1/τ", f"{fmt_float(i.steps_per_s_per_replica)} /s", "steps/s per replica"),
        ("B = T·τ/R", fmt_float(i.batch_per_replica), "sequences per step per replica"),
        (
            "E[distinct experts]",
            f"{fmt_float(i.expected_distinct_experts)} of {i.experts}" if i.experts else DASH,
            f"per MoE layer {distinct_experts_at(i)}",
        ),
        ("W(B)", fmt_bytes(i.weight_bytes_per_step), "weight bytes per step"),
        ("R·s·W(B)", fmt_bytes_per_s(i.weight_bytes_per_s), "weight traffic"),
        ("context", f"{fmt_float(i.mean_context_per_token, 4)} tok", "mean per output token"),
        ("KV/token", fmt_bytes(i.kv_bytes_per_output_token), "KV bytes read per output token"),
        ("KV/s", fmt_bytes_per_s(i.kv_bytes_per_s), "KV traffic"),
        (
            "N·BW",
            fmt_bytes_per_s(i.node_bandwidth_bytes_per_s),
            f"{i.gpus} GPU(s), {bandwidth_provenance(r.accelerator)}",
        ),
    ]
    if i.headline_bytes_per_s is not None:  # files before schema 3 lack it
        rows.append(("numerator", fmt_bytes_per_s(i.headline_bytes_per_s), HEADLINE_NUMERATOR))
    table = _table(
        ["input", "value", "meaning"],
        [[_e(a), _e(b), _e(c)] for a, b, c in rows],
        left=(0, 2),
        cls="inputs",
        mark=_mark(r),
    )
    # The figure and its split are the headline card's; here the inputs, flags and notes.
    flags = "".join(f"<li>flag {_e(f)}</li>" for f in raised_flags(p.mbu_detail))
    notes = "".join(f"<li>{_e(n)}</li>" for n in mbu_notes(p.mbu_detail))
    listed = flags + notes
    return table + (f'<ul class="checks">{listed}</ul>' if listed else "")


def _single_stream(r: BenchResult) -> str:
    s = r.single_stream
    if s is None:
        return _section("single-stream", "Single stream (latency floor)", "<p>Not measured.</p>")
    rows = [
        [_e(name), *(_e(fmt_ms(getattr(summary, k))) for k in ("mean", "p50", "p90", "p99"))]
        for name, summary in (
            ("TTFT", s.ttft_s),
            ("TPOT", s.tpot_s),
            ("ITL (chunks)", s.itl_s),
            ("E2E", s.e2e_s),
        )
    ]
    n = s.requests_ok + s.requests_failed
    body = (
        f"<p>{n} requests one at a time: "
        f"{_e(fmt_tokens_per_s(s.output_tokens_per_s))} output tok/s.</p>"
        + _table(["latency", "mean", "p50", "p90", "p99"], rows, cls="inputs", mark=_mark(r))
    )
    return _section("single-stream", "Single stream (latency floor)", body)


def _kv_rows(pairs: Iterable[tuple[str, object]]) -> list[list[str]]:
    return [[_e(k), _e(DASH if v is None else v)] for k, v in pairs]


def _inputs(r: BenchResult, geometry: ModelGeometry, acc: Accelerator) -> str:
    g = geometry
    model = _kv_rows(
        [
            ("model", g.name),
            ("type", g.model_type),
            ("total parameters", f"{g.total_params / 1e9:.2f} B"),
            ("active parameters", f"{g.active_params / 1e9:.2f} B"),
            ("layers (MoE)", f"{g.layers} ({g.moe_layers})"),
            ("experts, top-k", f"{g.experts}, {g.experts_per_token}" if g.is_moe else "dense"),
            ("weight / KV dtype", f"{g.weight_dtype} / {g.kv_dtype}"),
            ("dense weight bytes/step", fmt_bytes(g.dense_weight_bytes)),
            ("bytes per expert", fmt_bytes(g.expert_bytes) if g.is_moe else DASH),
            ("KV bytes/token, full-context layers", fmt_bytes(g.kv_bytes_per_token_full_context)),
        ]
    )
    s = r.search
    node = _kv_rows(
        [
            ("accelerator", acc.display_name or acc.name),
            (
                f"{'measured' if acc.confidence == 'measured' else 'rated'} bandwidth / GPU",
                fmt_bytes_per_s(acc.bandwidth_bytes_per_s),
            ),
            ("source", acc.source),
            ("N_GPU, R", f"{r.gpus}, {r.replicas}"),
            ("SLO", describe_slo(r.slo)),
            ("search stop", s.stop_reason if s else DASH),
            (
                "precision reached / target",
                f"{fmt_pct(s.precision_reached)} / {fmt_pct(s.precision_target, 0)}" if s else DASH,
            ),
            ("tokenwatt", r.tool_version),
            ("started", r.started_at.isoformat()),
            ("client", f"{r.machine.hostname}, {r.machine.os}, {r.machine.python}"),
            ("clock", f"{r.machine.clock}; stamps: {r.machine.timestamp_source}"),
        ]
    )
    body = (
        '<div class="grid2"><div>'
        + _table(["model", ""], model, left=(0, 1), mark=_mark(r))
        + "</div><div>"
        + _table(["node and run", ""], node, left=(0, 1), mark=_mark(r))
        + "</div></div>"
    )
    return _section("inputs", "Inputs", body)


def _engine(result: BenchResult) -> str:
    """Client beside engine for the boundary (else the last scraped probe); '' if none."""
    p = engine_probe(result)
    rows = [] if p is None else engine_rows(p)
    if p is None or not rows:
        return ""
    label = "single stream" if p.index == 0 else f"probe {p.index}"
    classes = ["fail" if r[4].startswith("DISAGREE") else "" for r in rows]
    body = _table(
        [_e(h) for h in ENGINE_HEADER],
        [[_e(c) for c in r] for r in rows],
        left=(0, 4),
        row_classes=classes,
        mark=_mark(result),
    )
    return _section("engine", f"Client vs engine /metrics ({label})", body)


def _json_script(data: Any) -> str:
    # "</" would end the script element early; JSON allows the escaped form.
    text = json.dumps(data, indent=1, ensure_ascii=False).replace("</", "<\\/")
    return f'<script type="application/json" id="result-json">{text}</script>'


def _geometry_sections(result: BenchResult, b: ProbeSummary | None) -> list[str]:
    """MBU and distinct experts, drawn from the geometry; a line saying why where the run
    has none (a probe of an endpoint whose config.json could not be read)."""
    geometry = result.geometry
    if geometry is None:
        why = result.mbu_unavailable or "no model geometry in this result"
        return [_section("mbu", "MBU", f"<p>Not derived: {_e(why)}</p>")]
    parts: list[str] = []
    m = _mark(result)
    mbu_title = "MBU at the boundary" if b is not None else "MBU (no boundary)"
    parts.append(
        _section(
            "mbu",
            mbu_title,
            _figure(
                plots.mbu_plot(result, geometry),
                "MBU = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth). Left: per probe, shaded "
                "bar = weights part. Right: W(B) from the geometry, probes marked.",
                m,
            )
            + (_mbu_inputs(result, b) if b is not None else ""),
        )
    )
    if geometry.is_moe:
        experts = _figure(
            plots.experts_plot(result, geometry),
            "Uniform routing is an upper bound on distinct experts: real, skewed routing "
            "touches fewer at small batch, so MBU reads high there.",
            m,
        )
    else:
        experts = "<p>Dense model: every weight is read every step, W(B) is constant.</p>"
    parts.append(_section("experts", "Expected distinct experts against batch", experts))
    return parts


def render_html(result: BenchResult) -> str:
    """The whole report as one HTML string."""
    q = fmt_quantile(result.slo.percentile)
    b = result.boundary
    m = _mark(result)
    parts = [_headline(result), _checks(result)]
    parts.append(
        _section(
            "latency",
            "Latency against throughput",
            _figure(
                plots.latency_plot(result),
                f"TTFT and TPOT {q} per probe against output tokens/s; dashed: the SLO; "
                f"green passed, red failed; {STAR_CAPTION.replace('*', 'star', 1)}.",
                m,
            ),
        )
    )
    parts.append(
        _section(
            "goodput",
            "Goodput and attainment against achieved rate",
            _figure(
                plots.goodput_plot(result),
                "SLO goodput (output tokens/s of the requests that met every limit) and "
                "attainment (the fraction of requests that did) against each probe's achieved "
                "rate; dotted: all output tokens/s, T. Green probes passed the SLO, red failed; "
                f"{STAR_CAPTION.replace('*', 'star', 1)}.",
                m,
            ),
        )
    )
    parts += _geometry_sections(result, b)
    power_svg = plots.power_plot(result)
    power = (
        _figure(power_svg, _power_caption(result), m)
        if power_svg
        else "<p>Not measured: no power samples in this result.</p>"
    )
    parts.append(_section("power", "Power over time", power))
    parts.append(_probes(result))
    parts.append(_single_stream(result))
    parts.append(_engine(result))
    if result.geometry is not None and result.accelerator is not None:
        parts.append(_inputs(result, result.geometry, result.accelerator))
    spec_text = json.dumps(result.spec.model_dump(mode="json"), indent=2, ensure_ascii=False)
    parts.append(_section("spec", "Spec (secrets removed)", f"<pre>{_e(spec_text)}</pre>"))
    return _page(result, parts)


def _power_caption(result: BenchResult) -> str:
    """The power figure's caption: sampled, or the simulator's or a stated model."""
    probes = [*([result.single_stream] if result.single_stream else []), *result.probes]
    mark = next((w for p in probes if (w := power_mark(p.energy))), "")
    if mark == "simulated":
        return "The simulator's modelled power over each probe's window: not a measurement."
    if mark == "modelled":
        return "Modelled power (a stated wattage) over each probe's window: not a measurement."
    return "Sampled power over each probe's measurement window."


def _page(result: BenchResult, parts: list[str]) -> str:
    """The document around the sections: title, header, footer and the embedded result."""
    title = f"TokenWatt Bench · {describe_run(result)}"
    header = (
        f"<header><h1>{_e(result.name)}</h1>"
        f'<p class="sub">{_e(describe_run(result))}{_mark(result)}</p>'
        f'<p class="sub">SLO: {_e(describe_slo(result.slo))} · started '
        f"{_e(result.started_at.strftime('%Y-%m-%d %H:%M:%S %Z').strip())}"
        f"{' · INTERRUPTED' if result.interrupted else ''}</p></header>"
    )
    footer = (
        f"<footer>tokenwatt {_e(result.tool_version)} · result schema "
        f"v{result.schema_version} · the result JSON is embedded in this file "
        "(script#result-json)</footer>"
    )
    data = json.loads(result.model_dump_json())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>"
        f"<body><main>{header}{''.join(parts)}{footer}</main>"
        f"{_json_script(data)}</body></html>\n"
    )


def write_html(result: BenchResult, out_dir: str | Path) -> Path:
    """Write ``DIR/report.html`` and return its path."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / REPORT_FILE
    path.write_text(render_html(result), "utf-8")
    return path
