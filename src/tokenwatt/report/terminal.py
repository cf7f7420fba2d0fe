"""The terminal report: rich renderables built from a result file; nothing here prints.

Order is the product's argument: SLO goodput and tokens per joule first, MBU beside them with
every input, then the probes that found the boundary, the single-stream latency floor, and
the self-checks. ``ResultView`` follows rich's console protocol, so ``console.print(view)``
renders it and the result models stay free of rich.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from tokenwatt.report.checks import self_checks
from tokenwatt.report.engine_view import ENGINE_HEADER, engine_probe, engine_rows
from tokenwatt.report.format import (
    DASH,
    STAR_CAPTION,
    STAR_SHORT,
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
    mbu_notes,
    raised_flags,
)
from tokenwatt.result import BenchResult, Latency, ProbeSummary, StepSummary

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

__all__ = [
    "ProbeTable",
    "ResultView",
    "checks_block",
    "cost_text",
    "describe_run",
    "describe_slo",
    "energy_text",
    "engine_block",
    "engine_table",
    "headline",
    "intervals_block",
    "mbu_block",
    "probe_summary_table",
    "probe_table",
    "single_stream_block",
    "step_rows",
]


def rate_text(p: ProbeSummary) -> str:
    """The offered rate with the counted and achieved ones beside it: Poisson noise in a short
    window moves the counted rate by several percent (the boundary is only as exact as that),
    and failures take the achieved rate (successes ÷ window) below it; counted is named only
    where it differs from achieved at the printed precision (a failure or a cancel)."""
    counted, achieved = fmt_float(p.counted_rate_rps), fmt_float(p.achieved_rate_rps)
    held = (
        f"{achieved} achieved" if counted == achieved else f"{counted} counted, {achieved} achieved"
    )
    if p.rate_rps is None:
        closed = f"concurrency {p.concurrency}, " if p.concurrency is not None else ""
        return f"{closed}{fmt_rate(p.achieved_rate_rps)} achieved"
    return f"{fmt_rate(p.rate_rps)} offered, {held}"


def energy_text(p: ProbeSummary) -> str:
    """Tokens per joule with its provenance: measured, modelled, or not measured."""
    if p.tokens_per_joule is None:
        return "not measured"
    text = f"{fmt_float(p.tokens_per_joule)} tok/J"
    e = p.energy
    if e is None:
        return text
    parts = []
    if e.joules_per_output_token is not None:
        parts.append(f"{fmt_float(e.joules_per_output_token)} J/token")
    if e.joules_per_total_token is not None:
        parts.append(f"{fmt_float(e.joules_per_total_token)} J/total token")
    mark = power_mark(e)  # beside the watts too: "398 W" alone reads like a meter
    parts.append(f"{fmt_float(e.mean_power_w)} W mean{f' ({mark})' if mark else ''}")
    parts.append(f"{e.source}, {e.scope}")
    bad = [a for a in e.audit if not a.valid]
    if e.audit:
        parts.append("audit valid" if not bad else f"audit INVALID: {bad[0].verdict}")
    return f"{text}{f' {mark}' if mark else ''}  ({'; '.join(parts)})"


def cost_text(p: ProbeSummary) -> str | None:
    """$/Mtok at the probe's goodput with its parts, or None without a price in the spec."""
    c = p.cost
    if c is None:
        return None
    if c.usd_per_mtok is None:
        return "no goodput: no cost per token"
    energy = (
        f" + {fmt_float(c.usd_per_mtok_energy)} energy at {fmt_float(c.price_per_kwh)}/kWh"
        if c.usd_per_mtok_energy is not None
        else ""
    )
    return (
        f"{fmt_float(c.usd_per_mtok)} $/Mtok  ({fmt_float(c.usd_per_mtok_gpu)} GPU time at "
        f"{fmt_float(c.price_per_gpu_hour)}/GPU-h × {c.gpus}{energy})"
    )


def _mbu_text(p: ProbeSummary) -> str:
    return mbu_figures_text(p.mbu, p.mbu_detail)


def one_probe_row(b: ProbeSummary) -> tuple[str, str]:
    """The headline of a folder with one probe and no search (``tokenwatt probe``, an
    import): its own verdict, and "SLO goodput" only when it passed; the terminal and the
    HTML report both say this."""
    verdict = "SLO met" if b.slo_passed else "SLO NOT met"
    if b.interrupted:
        verdict = "interrupted"
    elif b.slo_detail is not None and b.slo_detail.error_probe:
        verdict += f" ({b.slo_detail.reason})"
    goodput = f"{fmt_tokens_per_s(b.goodput_output_tokens_per_s)} output tok/s"
    if b.phase == "imported" and b.attainment is None:  # a summary-only file: not measured
        goodput = (
            "not measured (no per-request timings in the file; "
            f"T {fmt_tokens_per_s(b.output_tokens_per_s)} output tok/s)"
        )
    text = f"{goodput}  ·  at {rate_text(b)}  ·  one probe, {verdict}"
    return ("SLO goodput" if b.slo_passed else "Goodput"), text


def _goodput_row(result: BenchResult, b: ProbeSummary, *, probe_only: bool) -> tuple[str, str]:
    """The headline's first row. A probe that failed (or was cut by an error or Ctrl-C) is
    never called "SLO goodput"; a boundary without a failure above it is a lower bound."""
    if probe_only:
        return one_probe_row(b)
    per_gpu = fmt_tokens_per_s(b.goodput_output_tokens_per_s_per_gpu)
    if b.boundary_rate_rps is None and not no_failure_seen(result):  # no fit: as measured
        text = (
            f"{fmt_tokens_per_s(b.goodput_output_tokens_per_s)} output tok/s  ·  "
            f"{per_gpu} per GPU  ·  at {rate_text(b)}"
        )
        return "SLO goodput", text
    main, detail = goodput_headline(result, b)
    text = f"{main}  ·  {per_gpu} per GPU  ·  at {rate_text(b)}"
    return "SLO goodput", text + (f"  ·  {detail}" if detail else "")


def _headline_probe(result: BenchResult) -> tuple[ProbeSummary | None, bool]:
    """The probe the headline speaks for: the boundary, or in ``tokenwatt probe``'s folder
    (one probe, no search) that probe, with its own verdict; and whether it is the latter."""
    probe_only = result.boundary is None and result.search is None and len(result.probes) == 1
    return (result.probes[0] if probe_only else result.boundary), probe_only


def _sim_mark(result: BenchResult, text: str) -> Text:
    """A section title, with the SIMULATED mark on a simulated run's."""
    title = Text(text, "bold")
    if result.simulated:
        title.append(f" · {SIMULATED}", "bold magenta")
    return title


def agent_rows(p: ProbeSummary) -> list[tuple[str, str]]:
    """An agent-trace probe's sessions held (at the SLO on a bench's boundary) and its three
    prefix-cache hit rates (methodology: "Agent sessions", "Three hit rates per probe")."""
    rows: list[tuple[str, str]] = []
    a = p.agent
    if a is not None and a.concurrent_sessions is not None:
        per = [f"{a.sessions_per_gpu:.3g}/GPU"] if a.sessions_per_gpu is not None else []
        if a.sessions_per_kw is not None:
            per.append(f"{a.sessions_per_kw:.3g}/kW")
        if a.sessions_per_usd_per_hour is not None:
            per.append(f"{a.sessions_per_usd_per_hour:.3g} per $/h")
        rows.append(("Agent sessions", f"{a.concurrent_sessions:.3g} in flight ({', '.join(per)})"))
    engine = p.engine.prefix_cache_hit_rate if p.engine is not None else None
    if p.ideal_prefix_fraction is not None or engine is not None:
        rows.append(
            (
                "Prefix-cache hits",
                f"ideal {fmt_pct(p.ideal_prefix_fraction)} · engine {fmt_pct(engine)} · "
                f"client {fmt_pct(p.cached_prompt_fraction)}",
            )
        )
    return rows


def headline(result: BenchResult) -> RenderableType:
    """SLO goodput, tokens per joule and MBU at the boundary, in that order."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    b, probe_only = _headline_probe(result)
    if b is None:
        grid.add_row("SLO goodput", Text(no_boundary_text(result), "bold red"))
        grid.add_row("Tokens per joule", Text(DASH))
        grid.add_row("MBU", Text(DASH))
    else:
        label, good = _goodput_row(result, b, probe_only=probe_only)
        grid.add_row(label, Text(good, "bold green" if b.slo_passed else "bold red"))
        safe = None if probe_only else safe_rate_text(result, b)
        if safe is not None:
            grid.add_row("Safe rate", Text(safe, "yellow" if b.safe_rate_flag else ""))
        tpj = energy_text(b)
        grid.add_row("Tokens per joule", Text(tpj, "yellow" if b.tokens_per_joule is None else ""))
        cost = cost_text(b)
        if cost is not None:
            grid.add_row("Cost", Text(cost))
        for label, text in agent_rows(b):
            grid.add_row(label, Text(text))
        # A refusal's reason is the self-checks' warning, said once there.
        refused = b.mbu_detail is not None and b.mbu_detail.flags.above_rated_bandwidth
        grid.add_row("MBU", Text(_mbu_text(b), "bold red" if refused else ""))
        if b.accuracy is not None:
            grid.add_row("Accuracy", Text(accuracy_text(b.accuracy)))
    title = Text(describe_run(result), "bold")
    slo = Text(f"SLO: {describe_slo(result.slo)}", "dim")
    return Group(title, slo, Text(""), grid)


def intervals_block(result: BenchResult) -> RenderableType | None:
    """The headline probe's figures with their intervals (``report.intervals_text``); None
    when it has none (an older file, too few requests, no boundary)."""
    b = result.boundary
    if b is None and result.search is None and len(result.probes) == 1:
        b = result.probes[0]
    rows = [] if b is None else interval_rows(b)
    if b is None or not rows:
        return None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for label, text in rows:
        grid.add_row(label, text)
    notes = [Text(f"note: {n}", "yellow") for n in (b.intervals.notes if b.intervals else [])]
    return Group(Text(interval_caption(b) or "", "dim"), grid, *notes)


def mbu_block(result: BenchResult, p: ProbeSummary | None = None) -> RenderableType:
    """MBU = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth): every input, each raised flag
    and each note, once; the figure itself is the headline's row, not repeated here."""
    p = p if p is not None else _headline_probe(result)[0]
    if p is None or p.mbu_detail is None:
        return Text("MBU inputs: not available (no boundary)", "dim")
    i = p.mbu_detail.inputs
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
    t.add_column("input", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("meaning")
    rows: list[tuple[str, str, str]] = [
        ("T", f"{fmt_tokens_per_s(i.output_tokens_per_s)} tok/s", "output tokens/s, node"),
        ("τ", fmt_ms(i.itl_token_weighted_s), "token-weighted mean inter-token latency"),
        ("R", str(i.replicas), "data-parallel replicas"),
        ("s = 1/τ", f"{fmt_float(i.steps_per_s_per_replica)} /s", "decode steps/s per replica"),
        ("B = T·τ/R", fmt_float(i.batch_per_replica), "sequences per step per replica"),
    ]
    if i.experts:
        rows.append(
            (
                "E[experts]",
                f"{fmt_float(i.expected_distinct_experts)} of {i.experts}",
                f"distinct experts per MoE layer {distinct_experts_at(i)}",
            )
        )
    if i.speculation is not None:  # speculative decoding: s, B from steps (metrics.mbu.spec_mbu)
        sp = i.speculation
        rows += [
            ("α", fmt_float(sp.acceptance_length, 3), "acceptance length: tokens per step"),
            ("τ_c", fmt_ms(sp.itl_chunk_s), "ITL per chunk: one verify step (s = 1/τ_c)"),
            (
                "W_t",
                fmt_bytes(sp.target_weight_bytes_per_step),
                f"verify pass, k = {sp.num_tokens}",
            ),
            ("W_d", fmt_bytes(sp.draft_weight_bytes_per_step), f"drafter ({sp.method})"),
        ]
    rows += [
        ("W(B)", fmt_bytes(i.weight_bytes_per_step), "weight bytes per step"),
        ("R·s·W(B)", fmt_bytes_per_s(i.weight_bytes_per_s), "weight traffic"),
        ("context", f"{fmt_float(i.mean_context_per_token, 4)} tok", "mean per generated token"),
        ("KV/token", fmt_bytes(i.kv_bytes_per_output_token), "KV bytes read per output token"),
        ("KV/s", fmt_bytes_per_s(i.kv_bytes_per_s), "KV traffic"),
        (
            "N·BW",
            fmt_bytes_per_s(i.node_bandwidth_bytes_per_s),
            f"{i.gpus} GPU × {fmt_bytes_per_s(i.bandwidth_bytes_per_s_per_gpu)} "
            + bandwidth_provenance(result.accelerator),
        ),
    ]
    if i.headline_bytes_per_s is not None:  # files before schema 3 lack it
        rows.append(("numerator", fmt_bytes_per_s(i.headline_bytes_per_s), HEADLINE_NUMERATOR))
    for name, value, meaning in rows:
        t.add_row(Text(name), Text(value), Text(meaning))
    label = "boundary" if p is result.boundary else f"probe {p.index}"
    title = _sim_mark(result, f"MBU inputs at the {label}")
    lines = [Text(f"flag {f}", "yellow") for f in raised_flags(p.mbu_detail)]
    lines += [Text(f"note: {n}", "dim") for n in mbu_notes(p.mbu_detail)]
    return Group(title, t, *lines)


def _slo_cell(p: ProbeSummary) -> Text:
    if p.interrupted:
        return Text("interrupted", "yellow")
    if p.slo_passed:
        return Text("pass", "green")
    # "ttft_p99" → "ttft": the column header already says which quantile.
    why = ", ".join(f.split("_p")[0] for f in p.slo_detail.failed)
    return Text(f"FAIL {why}".strip(), "red")


# Below this width the optional columns (B, tokens/J) are left out, so that the verdict
# column keeps room in an 80-column terminal.
WIDE_TABLE_MIN_WIDTH = 92


def _probe_grid(result: BenchResult, *, wide: bool) -> Table:
    q = fmt_quantile(result.slo.percentile)
    qv = result.slo.percentile
    # One space between columns (collapsed padding).
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    t.add_column("#", justify="right", no_wrap=True, min_width=3)
    names = ["rate", "achieved", "T tok/s", "B", f"TTFT {q}", f"TPOT {q}", "attain", "MBU"]
    names += ["tok/J"]
    optional = {"B", "tok/J"}
    shown = [n for n in names if wide or n not in optional]
    for name in shown:
        t.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    # The only column allowed to wrap, so the numbers never get cut.
    t.add_column("SLO", overflow="fold", ratio=1, min_width=4)
    boundary = result.boundary.index if result.boundary is not None else None
    for p in result.probes:
        ttft = p.latency_at("ttft", qv)
        tpot = p.latency_at("tpot", qv)
        cells = {
            "rate": fmt_float(p.rate_rps),
            "achieved": fmt_float(p.achieved_rate_rps),
            "T tok/s": fmt_tokens_per_s(p.output_tokens_per_s),
            "B": fmt_float(p.batch_per_replica),
            f"TTFT {q}": fmt_ms(ttft),
            f"TPOT {q}": fmt_ms(tpot),
            "attain": fmt_pct(p.attainment),
            "MBU": fmt_pct(p.mbu),
            "tok/J": fmt_float(p.tokens_per_joule),
        }
        label = f"{p.index}{'*' if p.index == boundary else ''}"
        t.add_row(Text(label), *(Text(cells[n]) for n in shown), _slo_cell(p))
    return t


class ProbeTable:
    """One row per probe in the order run, the boundary marked; fits the console's width."""

    def __init__(self, result: BenchResult) -> None:
        self.result = result

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield _sim_mark(self.result, f"Probes (rates in req/s; {STAR_SHORT})")
        yield _probe_grid(self.result, wide=options.max_width >= WIDE_TABLE_MIN_WIDTH)
        yield Padding(Text(STAR_CAPTION, "dim"), (0, 0, 0, 4))


def probe_table(result: BenchResult) -> RenderableType:
    return ProbeTable(result)


def single_stream_block(result: BenchResult) -> RenderableType:
    """The latency floor: one request at a time."""
    s = result.single_stream
    if s is None:
        return Text("Single stream: not measured", "dim")
    grid = Table.grid(padding=(0, 2))
    for _ in range(5):
        grid.add_column(no_wrap=True)
    grid.add_row(
        f"TTFT p50 {fmt_ms(s.ttft_s.p50)}",
        f"TPOT p50 {fmt_ms(s.tpot_s.p50)}",
        f"ITL p50 {fmt_ms(s.itl_s.p50)}",
        f"E2E p50 {fmt_ms(s.e2e_s.p50)}",
        f"{fmt_tokens_per_s(s.output_tokens_per_s)} tok/s",
    )
    n = s.requests_ok + s.requests_failed
    title = _sim_mark(result, f"Single stream (latency floor, {n} requests one at a time)")
    return Group(title, grid)


def engine_table(p: ProbeSummary, *, simulated: bool = False) -> Table | None:
    """Client beside engine for one probe (the simulated mark on the simulator's); None
    when the engine was not scraped."""
    rows = engine_rows(p)
    if not rows:
        return None
    label = "single stream" if p.index == 0 else f"probe {p.index}"
    mark = f" · [bold magenta]{SIMULATED}[/]" if simulated else ""
    t = Table(title=f"Client vs engine /metrics ({label}){mark}", box=box.SIMPLE_HEAD)
    for i, h in enumerate(ENGINE_HEADER):
        t.add_column(h, justify="left" if i in (0, 4) else "right")
    for row in rows:
        style = "yellow" if row[4].startswith("DISAGREE") else None
        t.add_row(*row, style=style)
    return t


def engine_block(result: BenchResult) -> Iterator[RenderableType]:
    """The boundary's (else the last scraped probe's) client-vs-engine table, if any."""
    p = engine_probe(result)
    table = None if p is None else engine_table(p, simulated=result.simulated)
    if table is not None:
        yield table


def checks_block(result: BenchResult) -> RenderableType:
    checks = self_checks(result)
    if not checks:
        return Text("Self-checks: nothing to report", "dim")
    lines = [Text("Self-checks", "bold")]
    for c in checks:
        style = "yellow" if c.level == "warning" else "dim"
        lines.append(Text(f"{'!' if c.level == 'warning' else 'i'} {c.message}", style))
    return Group(*lines)


class ResultView:
    """A whole result as one renderable: ``console.print(ResultView(result))``."""

    def __init__(self, result: BenchResult) -> None:
        self.result = result

    def sections(self) -> Iterator[RenderableType]:
        r = self.result
        yield headline(r)
        if (intervals := intervals_block(r)) is not None:
            yield intervals
        yield mbu_block(r)
        yield probe_table(r)
        yield single_stream_block(r)
        yield from engine_block(r)
        yield checks_block(r)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for i, section in enumerate(self.sections()):
            if i:
                yield Text("")
            yield section


# The probe command's table: one column of figures for one probe, in ms with one decimal.
def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1e3:.1f}"


def _num(v: float | None, fmt: str = ".2f") -> str:
    return "–" if v is None or not math.isfinite(v) else format(v, fmt)


def probe_summary_table(result: BenchResult) -> Table:
    """The probe's figures from its ``result.json`` record, with the words every view uses:
    offered (asked for), counted (in the window), achieved (succeeded) per second."""
    p = result.probes[0]
    t = Table(title=_probe_title(result), show_header=True, header_style="bold")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("load", _load_text(p))
    t.add_row("window", f"{p.window_s:.1f} s, {p.requests_counted} requests counted")
    t.add_row("output tokens/s (T)", _num(p.output_tokens_per_s, ".1f"))
    t.add_row("τ token-weighted ITL, ms", _ms(p.itl_token_weighted_s))
    for name, d in (("TTFT", p.ttft_s), ("TPOT", p.tpot_s), ("chunk ITL", p.itl_s),
                    ("E2E", p.e2e_s)):  # fmt: skip
        t.add_row(f"{name} ms (mean / p50 / p99)", f"{_ms(d.mean)} / {_ms(d.p50)} / {_ms(d.p99)}")
    step_rows(t, p.steps)
    t.add_row("mean concurrency (Little)", _num(p.mean_concurrency))
    t.add_row("mean context per token", _num(p.mean_context_per_token, ".1f"))
    for label, text in agent_rows(p):  # agent traces: sessions held, prefix-cache hit rates
        t.add_row(label, text)
    if p.attainment is not None:
        t.add_row("SLO attainment", f"{p.attainment:.1%}")
        good_rps = _num(p.run.goodput_requests_per_s if p.run is not None else None)
        good_tps = _num(p.goodput_output_tokens_per_s, ".1f")
        t.add_row("goodput req/s / tokens/s", f"{good_rps} / {good_tps}")
    reason = escape(str(p.slo_detail.reason))
    if p.accuracy is not None:
        t.add_row("graded answers (accuracy)", accuracy_text(p.accuracy))
    t.add_row("SLO verdict", "[green]pass[/]" if p.slo_passed else f"[red]fail[/] ({reason})")
    errors = ", ".join(f"{k} {v}" for k, v in p.errors_by_kind.items()) or "none"
    t.add_row("failed requests", f"{p.requests_failed} ({errors})")
    # cancelled by the client (still running at the probe's end, or an early stop): their own
    # kind, neither failures nor judged for attainment
    t.add_row("cancelled requests", f"{p.requests_cancelled} (not failures, not judged)")
    lat = p.send_lateness_s or Latency()
    t.add_row("send lateness ms (p50 / p99)", f"{_ms(lat.p50)} / {_ms(lat.p99)}")
    _mbu_rows(t, p)
    _energy_rows(t, p)
    return t


def _probe_title(result: BenchResult) -> str:
    """The table's title: a simulated probe says so on the table itself."""
    return f"probe · [bold magenta]{SIMULATED}[/] (tokenwatt sim)" if result.simulated else "probe"


def _load_text(p: ProbeSummary) -> str:
    """One line for the load: what was asked for, what the window held, what succeeded (they
    differ by Poisson noise and failures; the verdict speaks for the counted rate)."""
    unit = {"sessions": "sessions/s", "turns": "turns/s"}.get(p.rate_unit, "req/s")
    held = f"{_num(p.counted_rate_rps)} counted, {_num(p.achieved_rate_rps)} achieved req/s"
    if p.rate_rps is not None:
        arrival = p.run.arrival if p.run is not None else "poisson"
        return f"{p.rate_rps:g} {unit} offered ({arrival}), {held}"
    return f"concurrency {p.concurrency}, {held}"


def _energy_rows(t: Table, p: ProbeSummary) -> None:
    """Tokens per joule (or why not), both J-per-token figures, each source's audit verdict
    and $/Mtok: the rows ``bench``'s report has, from the same ``EnergySummary``."""
    e = p.energy
    if e is None:
        t.add_row("tokens per joule", "not measured (no power source in the spec)")
    else:
        mark = power_mark(e)
        t.add_row(
            "tokens per joule",
            f"{_num(e.tokens_per_joule, '.3g')} ({e.scope} scope, {e.source}, "
            f"{e.kind}{f', {mark}' if mark else ''})",
        )
        t.add_row(
            "J per output / total token",
            f"{_num(e.joules_per_output_token, '.3g')} / {_num(e.joules_per_total_token, '.3g')}",
        )
        for a in e.audit:
            verdict = "[green]valid[/]" if a.valid else f"[red]{escape(a.verdict)}[/]"
            t.add_row(f"power {a.source} ({a.scope}, {a.method})", verdict)
    if p.cost is not None and p.cost.usd_per_mtok is not None:
        t.add_row("$/Mtok at this goodput", _num(p.cost.usd_per_mtok, ".4g"))


def step_rows(t: Table, steps: StepSummary | None) -> None:
    """Engine steps as the chunks show them (methodology "Speculative decoding"): shown when
    a step is not one token (speculation or coalescing), where ITL per chunk ≠ per token."""
    if steps is None or (steps.speculation == "none" and not steps.coalesced):
        return
    kind = "coalesced chunks" if steps.coalesced else f"speculation {steps.speculation}"
    t.add_row("ITL per chunk / per token, ms",
              f"{_ms(steps.itl_chunk_s)} / {_ms(steps.itl_token_s)} ({kind})")  # fmt: skip
    alpha = _num(steps.acceptance_length, ".3f")
    if steps.engine_acceptance_length is not None:
        alpha += f" (engine {steps.engine_acceptance_length:.3f})"
    t.add_row("steps/s per sequence, acceptance length", f"{_num(steps.steps_per_s)}, {alpha}")


def _mbu_rows(t: Table, p: ProbeSummary) -> None:
    """Both MBU figures, every raised flag with its direction, and the refusal line of an MBU
    above 100 % (``metrics.mbu.check_rated_bandwidth``)."""
    detail = p.mbu_detail
    if detail is None and p.mbu is None:
        return
    refused = detail is not None and detail.flags.above_rated_bandwidth
    text = escape(mbu_figures_text(p.mbu, detail))
    t.add_row("MBU", f"[bold red]{text}[/]" if refused else text)
    for f in raised_flags(detail):
        t.add_row("MBU flag", escape(f))
    if refused and detail is not None:
        t.add_row("MBU error", f"[red]{escape(detail.notes[0])}[/]")
