"""Runs side by side: the headline figures of each, and their change against the first run,
and the Pareto view of every probe: output tokens/s per GPU against per-user interactivity.

A comparison is only as fair as its runs are alike, so the things that make figures
incomparable (model, precision, accelerator, GPU count, replicas, SLO, and every other
setting of the spec: workload, search, power, engine, the simulator's settings) are checked
and every difference is returned as a warning; the figures are still shown. Only the server
under test (the spec's ``endpoint``) may differ without one: it is what a comparison compares.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tokenwatt.errors import ReportError
from tokenwatt.report.format import fmt_quantile, no_boundary_text, rel_change
from tokenwatt.report.labels import describe_slo, sim_settings
from tokenwatt.report.pareto import pareto_mask
from tokenwatt.result import BenchResult, ProbeSummary, load_result, probes_left_out

__all__ = [
    "Comparison",
    "MetricRow",
    "ParetoPoint",
    "compare_results",
    "load_runs",
    "pareto_points",
]

Better = Literal["higher", "lower", "neither"]


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One figure across runs; ``changes[i]`` is run i against run 0 (None for run 0)."""

    name: str
    unit: str
    kind: Literal["tokens_per_s", "float", "fraction", "seconds", "rate"]
    better: Better
    values: tuple[float | None, ...]
    changes: tuple[float | None, ...]


@dataclass(frozen=True, slots=True)
class Comparison:
    labels: tuple[str, ...]
    rows: tuple[MetricRow, ...]
    warnings: tuple[str, ...]
    pareto: tuple[ParetoPoint, ...] = ()  # every measured probe of every run
    simulated: tuple[bool, ...] = ()  # per run: served by the built-in simulator


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    """One probe as buyers compare systems: throughput per GPU against what each user sees.

    ``interactivity_tok_s_per_user`` = 1 / median TPOT (the per-request TPOT of
    ``metrics.request``): the decode speed one stream gets. ``on_frontier``: the probe met
    the SLO and no passing probe of any run is at least as good on both axes and better on
    one (the Pareto frontier): a point that failed the SLO is no operating point to buy."""

    label: str
    probe_index: int
    rate_rps: float | None
    output_tok_s_per_gpu: float
    interactivity_tok_s_per_user: float
    slo_passed: bool
    on_frontier: bool = False
    concurrency: int | None = None  # closed loop: the requests kept in flight


def pareto_points(runs: Sequence[tuple[str, BenchResult]]) -> tuple[ParetoPoint, ...]:
    """Every probe (single stream included) with output tokens/s and a median TPOT, marked
    on or off the frontier of the passing probes of all runs; sorted by interactivity,
    highest first."""
    pts: list[ParetoPoint] = []
    for label, r in runs:
        probes = ([r.single_stream] if r.single_stream is not None else []) + list(r.probes)
        for p in probes:
            tpot = p.tpot_s.p50
            if not tpot or tpot <= 0 or p.output_tokens_per_s <= 0:
                continue
            pts.append(
                ParetoPoint(
                    label,
                    p.index,
                    p.rate_rps,
                    p.output_tokens_per_s / r.gpus,
                    1 / tpot,
                    p.slo_passed,
                    concurrency=p.concurrency,
                )
            )

    passing = [p for p in pts if p.slo_passed]
    on_front = pareto_mask(
        [(p.output_tok_s_per_gpu, p.interactivity_tok_s_per_user) for p in passing]
    )
    front_ids = {id(p) for p, on in zip(passing, on_front, strict=True) if on}
    mask = [id(p) in front_ids for p in pts]
    marked = [
        ParetoPoint(
            p.label,
            p.probe_index,
            p.rate_rps,
            p.output_tok_s_per_gpu,
            p.interactivity_tok_s_per_user,
            p.slo_passed,
            on,
            p.concurrency,
        )
        for p, on in zip(pts, mask, strict=True)
    ]
    return tuple(sorted(marked, key=lambda p: -p.interactivity_tok_s_per_user))


def _quantile(metric: Literal["ttft", "tpot"]) -> Callable[[BenchResult], float | None]:
    """The metric at the boundary (a probe's folder: its probe), at each run's own SLO
    quantile."""

    def get(r: BenchResult) -> float | None:
        h = r.headline_probe
        return h.latency_at(metric, r.slo.percentile) if h else None

    return get


def _passed(r: BenchResult) -> ProbeSummary | None:
    """The headline probe where it met the SLO and its goodput was measured: a failed probe
    has no SLO goodput, nor an import without per-request timings (goodput not measured)."""
    h = r.headline_probe
    unmeasured = h is not None and h.phase == "imported" and h.attainment is None
    return h if h is not None and h.slo_passed and not unmeasured else None


def _metric_specs(q_label: str) -> list[tuple[str, str, Any, Better, Callable[..., Any]]]:
    return [
        (
            "SLO goodput",
            "output tok/s",
            "tokens_per_s",
            "higher",
            lambda r: h.goodput_output_tokens_per_s if (h := _passed(r)) else None,
        ),
        (
            "goodput per GPU",
            "output tok/s",
            "tokens_per_s",
            "higher",
            lambda r: h.goodput_output_tokens_per_s_per_gpu if (h := _passed(r)) else None,
        ),
        (
            "tokens per joule",
            "tok/J",
            "float",
            "higher",
            lambda r: h.tokens_per_joule if (h := r.headline_probe) else None,
        ),
        ("MBU", "", "fraction", "higher", lambda r: h.mbu if (h := r.headline_probe) else None),
        (
            "boundary rate",
            "req/s offered",
            "rate",
            "higher",
            lambda r: h.rate_rps if (h := r.headline_probe) else None,
        ),
        (
            "achieved rate",
            "req/s",
            "rate",
            "higher",
            lambda r: h.achieved_rate_rps if (h := r.headline_probe) else None,
        ),
        (
            "T",
            "output tok/s",
            "tokens_per_s",
            "higher",
            lambda r: h.output_tokens_per_s if (h := r.headline_probe) else None,
        ),
        (f"TTFT {q_label}", "at boundary", "seconds", "lower", _quantile("ttft")),
        (f"TPOT {q_label}", "at boundary", "seconds", "lower", _quantile("tpot")),
    ]


def _model_key(r: BenchResult) -> str:
    g = r.geometry
    if g is None:
        return f"{r.model_name} (no geometry)"
    return f"{g.name} ({g.weight_dtype} weights, {g.kv_dtype} KV)"


def _slo_key(r: BenchResult) -> str:
    return describe_slo(r.slo)


_CHECKED: tuple[tuple[str, Callable[[BenchResult], str]], ...] = (
    ("models", _model_key),
    ("accelerators", lambda r: r.accelerator.name if r.accelerator else r.accelerator_name),
    ("GPU counts", lambda r: str(r.gpus)),
    ("replicas", lambda r: str(r.replicas)),
    ("SLOs", _slo_key),
)

# The spec's sections compared key by key, with the words a warning names them by. Not
# compared: ``endpoint`` (the server under test: what a comparison is for), ``name``, and
# ``server_metrics`` (how the engine's witness is read; no figure of the headline moves).
_SPEC_SECTIONS: tuple[tuple[str, str], ...] = (
    ("model", "model settings"),
    ("hardware", "hardware settings"),
    ("workload", "workloads"),
    ("slo", "SLO settings"),
    ("search", "search settings"),
    ("power", "power settings"),
    ("engine", "engine settings"),
    ("sim", "simulator settings"),
)
# Keys the checks above already name in their own words (the resolved model, accelerator,
# GPU count, replicas and SLO): one warning per difference, never two.
_NAMED_ABOVE = frozenset(
    {"model.weight_dtype", "model.kv_dtype", "hardware.accelerator", "hardware.gpus"}
    | {"hardware.replicas", "slo.kind", "slo.preset", "slo.ttft_ms", "slo.tpot_ms"}
    | {"slo.e2e_ms", "slo.percentile", "slo.attainment"}
)
_SHOWN_KEYS = 4  # differing keys named per section; the rest counted
_SHOWN_VALUE = 40  # characters of one value shown


def _flat(prefix: str, value: Any) -> dict[str, str]:
    """Dotted key → compact JSON of each leaf (lists are leaves)."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out |= _flat(f"{prefix}.{k}", v)
        return out
    return {prefix: json.dumps(value, sort_keys=True, separators=(",", ":"))}


def _spec_sections(r: BenchResult) -> dict[str, dict[str, str]]:
    """Each compared section of the run's spec, flattened; the simulator's settings only
    for a simulated run (an endpoint run's ``sim`` section served nothing)."""
    spec = r.spec.model_dump(mode="json")
    sim = sim_settings(r)
    spec["sim"] = None if sim is None else sim.model_dump(mode="json")
    return {name: _flat(name, spec.get(name)) for name, _ in _SPEC_SECTIONS}


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 1] + "…"


def _spec_differences(labels: Sequence[str], results: Sequence[BenchResult]) -> list[str]:
    """One warning per spec section whose settings differ between the runs, naming the
    keys and each run's value: the spec diff behind "not like for like"."""
    flat = [_spec_sections(r) for r in results]
    all_simulated = all(sim_settings(r) is not None for r in results)
    out = []
    for section, words in _SPEC_SECTIONS:
        if section == "sim" and not all_simulated:
            continue  # beside a measured run (``_served_by`` says so) or a standalone simulator
        keys = sorted(set().union(*(f[section] for f in flat)) - _NAMED_ABOVE)
        differ = [k for k in keys if len({f[section].get(k, "—") for f in flat}) > 1]
        if not differ:
            continue
        shown = [
            f"{k}: "
            + "; ".join(
                f"{lab} {_cut(f[section].get(k, '—'))}" for lab, f in zip(labels, flat, strict=True)
            )
            for k in differ[:_SHOWN_KEYS]
        ]
        more = f"; and {len(differ) - _SHOWN_KEYS} more" if len(differ) > _SHOWN_KEYS else ""
        out.append(
            f"runs differ in {words} ({' | '.join(shown)}{more}): differences are not like for like"
        )
    return out


def _server_kind(r: BenchResult) -> str:
    """What served a run: the simulator the run started (its settings recorded), a standalone
    simulator found at the URL (its settings unknown to the run, its version named), or an
    endpoint."""
    if not r.simulated:
        return "an endpoint"
    t = r.target
    if t is not None and t.server_identity is not None:
        return f"a standalone {t.server_identity}"
    return "tokenwatt simulator"


def _served_by(labels: Sequence[str], results: Sequence[BenchResult]) -> list[str]:
    """Runs served differently: a simulated run beside a measured one (the difference is the
    simulator's model), or simulators whose settings cannot be compared (a standalone one
    records none) or whose versions differ."""
    kinds = [_server_kind(r) for r in results]
    if len(set(kinds)) < 2:
        return []
    shown = "; ".join(f"{lab}: {k}" for lab, k in zip(labels, kinds, strict=True))
    if all(r.simulated for r in results):
        return [
            f"runs differ in the simulator that served them ({shown}): a standalone "
            "simulator's settings are not recorded, so its figures may not be like for like"
        ]
    return [f"runs differ in what served them ({shown}): simulated figures are not measured"]


def _differences(labels: Sequence[str], results: Sequence[BenchResult]) -> list[str]:
    out = _served_by(labels, results)
    for what, key in _CHECKED:
        values = [key(r) for r in results]
        if len(set(values)) > 1:
            shown = "; ".join(f"{lab}: {v}" for lab, v in zip(labels, values, strict=True))
            out.append(f"runs differ in {what} ({shown}): differences are not like for like")
    out += _spec_differences(labels, results)
    for lab, r in zip(labels, results, strict=True):
        h = r.headline_probe
        if r.boundary is None and h is not None:
            verdict = "SLO met" if h.slo_passed else "SLO NOT met"
            reason = h.slo_detail.reason if h.slo_detail is not None else None
            out.append(f"{lab}: one probe, {verdict}" + (f" ({reason})" if reason else ""))
        elif r.boundary is None:
            out.append(f"{lab}: {no_boundary_text(r)}")
        if r.interrupted:
            out.append(f"{lab}: the run was interrupted; its boundary may be loose")
        if (note := probes_left_out(r)) is not None:
            out.append(f"{lab}: {note}; the frontier below is drawn from those")
        if r.boundary is not None and (flag := r.boundary.safe_rate_flag) is not None:
            out.append(f"{lab}: {flag.line()}; no verdict is called on its safe rate")
    return out


def compare_results(runs: Sequence[tuple[str, BenchResult]]) -> Comparison:
    """Headline figures of every run and their relative change against the first."""
    if len(runs) < 2:
        raise ReportError("compare needs at least two run directories")
    labels = tuple(label for label, _ in runs)
    results = [r for _, r in runs]
    q = results[0].slo.percentile
    rows = []
    for name, unit, kind, better, get in _metric_specs(fmt_quantile(q)):
        values = tuple(get(r) for r in results)
        base = values[0]
        changes = (None, *(rel_change(v, base) for v in values[1:]))
        rows.append(MetricRow(name, unit, kind, better, values, changes))
    return Comparison(
        labels,
        tuple(rows),
        tuple(_differences(labels, results)),
        pareto_points(runs),
        tuple(r.simulated for r in results),
    )


def _labels_for(paths: Sequence[Path]) -> list[str]:
    """Each run's directory name; parents added until the labels are distinct."""
    parts = [p.resolve().parts for p in paths]
    depth = 1
    while True:
        labels = ["/".join(ps[-depth:]) for ps in parts]
        if len(set(labels)) == len(labels) or depth >= max(len(ps) for ps in parts):
            break
        depth += 1
    if len(set(labels)) < len(labels):
        labels = [f"{i + 1}:{lab}" for i, lab in enumerate(labels)]
    return labels


def load_runs(paths: Sequence[str | Path]) -> list[tuple[str, BenchResult]]:
    """Load each run (directory or result.json), labelled by its directory."""
    ps = [Path(p) for p in paths]
    dirs = [p if p.is_dir() else p.parent for p in ps]
    return list(zip(_labels_for(dirs), (load_result(p) for p in ps), strict=True))
