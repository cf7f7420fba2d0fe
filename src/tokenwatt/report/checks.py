"""Self-checks: the tool says when its own figures deserve less trust, and what to do.

Each check reads only the result file. Warnings are about a figure's validity; notes explain
how to read one. Every message is one line and names the remedy where there is one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from tokenwatt.metrics.latency import LATENESS_FLOOR_S, LATENESS_SHARE_OF_GAP, sent_late
from tokenwatt.report.format import fmt_count, fmt_float, fmt_ms, fmt_quantile, fmt_signed_pct
from tokenwatt.result import BenchResult, EngineAgreement, ProbeSummary

__all__ = ["MIN_TAIL_SAMPLES", "Check", "client_bound_probes", "self_checks"]

# A q-quantile needs at least this many samples beyond it before it is more than the
# sample maximum: p99 over 200 requests has 2 requests beyond it.
MIN_TAIL_SAMPLES = 2

_ENERGY_FLAGS = {
    "window_short": "the window is shorter than a few update periods of the power source; "
    "lengthen search.probe.min_duration_s",
    "partial": "power covers only part of the window",
    "counter_reset": "the energy counter reset or wrapped during the window",
    "gap": "power samples are missing for part of the window",
    "zero_energy": "the source reported no energy over the window",
    "missing_device": "a device serving the model gave no reading",
    "no_samples": "no power samples fell inside the window",
}


@dataclass(frozen=True, slots=True)
class Check:
    level: Literal["warning", "note"]
    message: str


def _labels(probes: list[ProbeSummary]) -> str:
    nums = [str(i) for i in sorted({p.index for p in probes if p.index != 0})]
    head = ("probe " if len(nums) == 1 else "probes ") + ", ".join(nums) if nums else ""
    single = "single stream" if any(p.index == 0 for p in probes) else ""
    return " and ".join(x for x in (head, single) if x)


def _all_probes(result: BenchResult) -> list[ProbeSummary]:
    """Single stream, probes and the boundary (normally a copy of one probe; checked too, in
    case it carries what its probe does not)."""
    out = [result.single_stream] if result.single_stream is not None else []
    out += result.probes
    return out + ([result.boundary] if result.boundary is not None else [])


def _few_requests(result: BenchResult) -> list[Check]:
    """Probes whose verdict rests on a p99 with too few requests beyond it. A verdict the
    sequential test decided (``slo_detail.sequential``) rests on that test's stated error
    rates instead, not on the point estimate: a failure decided on 108 requests is the test
    working, not a window too short, so it is not named here."""
    q = result.slo.percentile
    need = math.ceil(MIN_TAIL_SAMPLES / (1.0 - q) - 1e-9)
    short = [
        p
        for p in result.probes
        if p.ttft_s.count is not None
        and p.ttft_s.count * (1.0 - q) < MIN_TAIL_SAMPLES - 1e-9
        and p.slo_detail.sequential is None
    ]
    if not short:
        return []
    counts = ", ".join(fmt_count(p.ttft_s.count) for p in short)
    return [
        Check(
            "warning",
            f"{_labels(short)}: {fmt_quantile(q)} rests on fewer than {MIN_TAIL_SAMPLES} "
            f"requests beyond it ({counts} requests); raise search.probe.min_requests to "
            f"≥ {need}",
        )
    ]


def _lateness(result: BenchResult) -> list[Check]:
    late: list[tuple[ProbeSummary, float]] = []
    for p in result.probes:
        s = p.send_lateness_s
        if s is not None and s.p99 is not None and sent_late(s.p99, p.counted_rate_rps):
            late.append((p, s.p99))
    if not late:
        return []
    worst = max(v for _, v in late)
    return [
        Check(
            "warning",
            f"{_labels([p for p, _ in late])}: the client sent requests late (p99 up to "
            f"{fmt_ms(worst)} behind schedule, over {LATENESS_SHARE_OF_GAP:.0%} of the mean gap "
            f"between arrivals and {fmt_ms(LATENESS_FLOOR_S)}): the client shaped the load; use "
            "more workers (--workers N) or a quieter machine",
        )
    ]


def _multi_token(result: BenchResult) -> list[Check]:
    hit = [
        p
        for p in _all_probes(result)
        if "multi_token_chunks" in p.flags
        or (p.mbu_detail is not None and p.mbu_detail.flags.multi_token_chunks)
    ]
    if not hit:
        return []
    return [
        Check(
            "warning",
            f"{_labels(hit)}: several tokens per chunk (speculative decoding or coalesced "
            "chunks): one step is not one token per sequence, so s = 1/τ and MBU are overstated",
        )
    ]


def _energy(result: BenchResult) -> list[Check]:
    out: list[Check] = []
    by_flag: dict[str, list[ProbeSummary]] = {}
    modelled = False
    for p in _all_probes(result):
        if p.energy is None:
            continue
        modelled = modelled or p.energy.is_modelled
        for flag in p.energy.flags:
            by_flag.setdefault(flag, []).append(p)
    for flag, probes in by_flag.items():
        what = _ENERGY_FLAGS.get(flag, flag.replace("_", " "))
        out.append(Check("warning", f"{_labels(probes)} energy: {what}"))
    if modelled:
        out.append(
            Check(
                "note",
                "energy is modelled from a stated constant wattage, not measured; tokens per "
                "joule shows the model's assumption, not the machine",
            )
        )
    return out


def _search(result: BenchResult) -> list[Check]:
    out: list[Check] = []
    if result.interrupted:
        out.append(
            Check(
                "warning",
                "the run was interrupted: figures cover the probes that finished, and the "
                "boundary may be looser than the precision asked for",
            )
        )
    s = result.search
    if s is None or s.stop_reason in ("converged", "interrupted", "single_stream_fails"):
        return out  # single_stream_fails: its warning says why and what to do, once
    remedy = {
        "max_probes": "raise search.max_probes",
        "max_time": "raise --max-time (search.max_time_s) or ask a wider --precision",
        "max_rate": "the SLO held up to search.max_rate_rps; raise it",
        "failed_at_start": "the SLO failed at the lowest rate; lower search.start_rate_rps "
        "or relax the SLO",
    }.get(s.stop_reason, "see the warnings above")
    if s.precision_reached is not None and s.precision_reached < s.precision_target:
        # The bracket did close (a confirm re-run used the last probe): no precision claim.
        message = f"the search stopped ({s.stop_reason}) before confirming the boundary"
    else:
        reached = f" (reached {s.precision_reached:.1%})" if s.precision_reached is not None else ""
        message = (
            f"the search stopped ({s.stop_reason}) before the bracket closed to "
            f"{s.precision_target:.0%}{reached}"
        )
    if s.unclosed:
        message += f"; {s.unclosed}"
    out.append(Check("warning", f"{message}: {remedy}"))
    return out


def _engine_disagrees(result: BenchResult) -> list[Check]:
    """Client and engine parting beyond tolerance, one warning per figure and direction,
    with the likely cause the comparison named (``tokenwatt.engine.compare``)."""
    groups: dict[tuple[str, str], list[tuple[ProbeSummary, EngineAgreement]]] = {}
    for p in _all_probes(result):
        for a in [] if p.engine is None else p.engine.agreements:
            if a.ok is False and a.rel_diff is not None:
                groups.setdefault((a.figure, a.cause or ""), []).append((p, a))
    out: list[Check] = []
    for (figure, cause), hits in groups.items():
        probes = list({id(p): p for p, _ in hits}.values())
        _, a = hits[0]
        assert a.engine is not None and a.rel_diff is not None
        out.append(
            Check(
                "warning",
                f"{_labels(probes)}: client and engine disagree on {figure} (client "
                f"{fmt_float(a.client)} vs engine {fmt_float(a.engine)}, "
                f"{fmt_signed_pct(a.rel_diff)} beyond ±{a.tolerance:.0%}); likely cause: "
                f"{cause or 'unknown'}",
            )
        )
    return out


def client_bound_probes(result: BenchResult) -> list[ProbeSummary]:
    """The probes a boundary rests on (the boundary probe, and the failed probes at the
    search's upper bracket) whose load generator was the bottleneck (``load.keepup``)."""
    hi = result.search.hi_rps if result.search is not None else None
    rests_on = [result.boundary] if result.boundary is not None else []
    rests_on += [p for p in result.probes if hi is not None and p.rate_rps == hi]
    out: list[ProbeSummary] = []
    for p in rests_on:
        lg = p.load_generator
        if lg is not None and lg.bottleneck and all(p is not q for q in out):
            out.append(p)
    return out


def _keep_up(result: BenchResult) -> list[Check]:
    """The client could not drive the load a boundary rests on: no boundary is called."""
    bound = client_bound_probes(result)
    if not bound:
        return []
    gens = [p.load_generator for p in bound if p.load_generator is not None]
    busiest = max((w.busy_fraction or 0.0 for g in gens for w in g.per_worker), default=0.0)
    n = max(g.workers for g in gens)
    return [
        Check(
            "warning",
            f"{_labels(bound)}: the load generator was the bottleneck (a sending process "
            f"{busiest:.0%} busy with {n} worker{'s' if n != 1 else ''}), not the server: "
            "the boundary is not called; use more workers (search.probe.workers or "
            "--workers N)",
        )
    ]


def _failures(result: BenchResult) -> list[Check]:
    b = result.boundary
    if b is None or b.requests_failed == 0:
        return []
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(b.errors_by_kind.items()))
    total = b.requests_ok + b.requests_failed
    return [
        Check(
            "warning",
            f"{b.requests_failed} of {total} requests failed at the boundary"
            + (f" ({kinds})" if kinds else "")
            + "; see the probe's requests file",
        )
    ]


def _stray_answers(result: BenchResult) -> list[Check]:
    stray = [p for p in _all_probes(result) if p.stray_answers]
    if not stray:
        return []
    n = sum(p.stray_answers for p in stray)
    return [
        Check(
            "warning",
            f"{_labels(stray)}: the server wrote {n} answer(s) no request was waiting for (a "
            "late second answer, or a stale one on a reused connection); each connection that "
            "carried one was closed and none was reused after the first; requests whose answer "
            "could not be told from an earlier one are protocol errors ('stale answer'); check "
            "a proxy or load balancer that retries or replays responses",
        )
    ]


def _above_rated(result: BenchResult) -> list[Check]:
    """MBU above 100 % is an input error (``metrics.mbu.check_rated_bandwidth``): a warning
    naming the likely wrong input, once for all the probes it hit."""
    hit = [
        p
        for p in _all_probes(result)
        if p.mbu_detail is not None and p.mbu_detail.flags.above_rated_bandwidth
    ]
    if not hit:
        return []
    assert hit[0].mbu_detail is not None
    return [Check("warning", f"MBU refused at {_labels(hit)}: {hit[0].mbu_detail.notes[0]}")]


def self_checks(result: BenchResult) -> list[Check]:
    """Every check, warnings first, without duplicates; the run's own warnings included."""
    checks = [
        *_search(result),
        *_few_requests(result),
        *_lateness(result),
        *_keep_up(result),
        *_multi_token(result),
        *_above_rated(result),
        *_stray_answers(result),
        *_failures(result),
        *_engine_disagrees(result),
        *_energy(result),
        *(Check("warning", w) for w in result.warnings),
    ]
    # MBU's own flags and notes are the MBU section's (``mbu_text.mbu_notes``), said there once.
    seen: set[str] = set()
    unique: list[Check] = []
    for c in sorted(checks, key=lambda c: c.level != "warning"):
        if c.message not in seen:
            seen.add(c.message)
            unique.append(c)
    return unique
