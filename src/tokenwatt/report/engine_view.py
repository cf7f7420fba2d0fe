"""Client beside engine for one probe: the rows both the terminal and the HTML report show.

Why one module: the two views must show the same figures with the same verdicts; only the
markup differs. The rows come from the result file (``ProbeSummary.engine``), never from
in-memory state.
"""

from __future__ import annotations

from tokenwatt.metrics.mbu import RATED_BANDWIDTH_LIMIT
from tokenwatt.report.format import DASH, fmt_float, fmt_pct, fmt_signed_pct, fmt_tokens_per_s
from tokenwatt.result import MBU_ENGINE, MBU_SEED, BenchResult, EngineAgreement, ProbeSummary

__all__ = ["ENGINE_HEADER", "EngineRow", "engine_probe", "engine_rows"]

ENGINE_HEADER = ("figure", "client", "engine", "diff", "verdict")
EngineRow = tuple[str, str, str, str, str]

_LABELS = {
    "T": "T tokens/s",
    "B": "B per replica",
    "s": "s steps/s/replica",
}


def engine_probe(result: BenchResult) -> ProbeSummary | None:
    """The probe to show: the boundary, else the last probe the engine was scraped for."""
    candidates = [result.boundary, *reversed(result.probes), result.single_stream]
    for p in candidates:
        if p is not None and p.engine is not None and p.engine.unavailable is None:
            return p
    return None


def _fmt(figure: str, x: float | None) -> str:
    return fmt_tokens_per_s(x) if figure == "T" else fmt_float(x)


def _agreement_row(a: EngineAgreement) -> EngineRow:
    if a.ok is None:
        verdict = "not counted by the engine"
    elif a.ok and a.cause is not None and a.cause.startswith("idle-explained"):
        verdict = "agree after the engine's idle share"
    elif a.ok and a.cause is not None and a.cause.startswith("step-weighted"):
        verdict = "agree counted per step (τ weights steps by batch)"
    elif a.ok and a.cause is not None and a.cause.startswith("window-lives"):
        verdict = "agree over the window's own gaps (τ spans lives past it)"
    elif a.ok:
        verdict = f"agree (±{fmt_pct(a.tolerance, 0)})"
    else:
        verdict = f"DISAGREE (±{fmt_pct(a.tolerance, 0)})"
    diff = fmt_signed_pct(a.rel_diff) if a.rel_diff is not None else DASH
    return (_LABELS.get(a.figure, a.figure), _fmt(a.figure, a.client), _fmt(a.figure, a.engine),
            diff, verdict)  # fmt: skip


MBU_ROW_NOTE = (
    f"client: {MBU_SEED.label}; engine: {MBU_ENGINE.label}; (R·s·W(B) + KV/s) ÷ bandwidth on "
    "each side's own B and s; not the headline"
)


def engine_rows(p: ProbeSummary) -> list[EngineRow]:
    """Agreements first, then the counts only one side has or that explain the engine."""
    e = p.engine
    if e is None or e.unavailable is not None:
        return []
    rows = [_agreement_row(a) for a in e.agreements]
    # like with like: the engine's figure is the seed's literal formula on its own B and s,
    # so it stands beside the same formula on the client's B and s (Mbu.seed_mbu), neither
    # the headline (mixed-step bytes, busy share) nor the decode-only figure (the batch from
    # decode intervals), which each differ from it by more than B's and s's disagreement
    client = p.mbu_detail.seed_mbu if p.mbu_detail is not None else None
    rows.append((MBU_SEED.label, _mbu_cell(client), _mbu_cell(e.mbu), DASH, MBU_ROW_NOTE))
    for label, v in (
        ("requests finished", e.requests_finished),
        ("running (mean)", e.running_mean),
        ("waiting (mean)", e.waiting_mean),
        ("KV-cache usage (mean)", e.kv_usage_mean),
        ("preemptions", e.preemptions),
    ):
        shown = fmt_pct(v) if label.startswith("KV") else fmt_float(v)
        why = "" if v is not None else "not exposed over the window (never read as 0)"
        rows.append((label, DASH, shown if v is not None else "not exposed", DASH, why))
    return rows


def _mbu_cell(mbu: float | None) -> str:
    """An MBU above the rated bandwidth is an input error, never a figure, on either side
    (``metrics.mbu.check_rated_bandwidth``)."""
    if mbu is not None and mbu > RATED_BANDWIDTH_LIMIT:
        return "refused (above the rated bandwidth)"
    return fmt_pct(mbu)
