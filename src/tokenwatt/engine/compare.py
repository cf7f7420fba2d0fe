"""Client against engine for one probe: T, B and s side by side, with a likely cause.

Why: the derivation (B = T·τ/R, s = 1/τ, ``tokenwatt.batch_steps``, the one the client's MBU
uses) is an inference from client timing; an engine that
counts its own tokens and batch is a second witness. Where both sides agree within the
stated tolerance the derived MBU rests on measured ground; where they do not, the check says
which way they part and what usually causes it, instead of silently reporting one of them.

Engine figures per replica: T is node-wide on both sides; B is the engine's busy slots per
decode (llama.cpp), else generated tokens per engine step, else its time-weighted mean of
running requests ÷ R (``engine_batch_and_steps``); s is engine steps per second ÷ R.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tokenwatt.batch_steps import batch_and_steps
from tokenwatt.result import EngineAgreement, EngineFigures

__all__ = [
    "AGREEMENT_TOLERANCES",
    "IDLE_EXPLAINED",
    "PREEMPTION_EXPLAINED",
    "STEP_WEIGHTED",
    "WINDOW_LIVES",
    "ClientMechanisms",
    "compare_client_engine",
    "counter_resolution",
    "engine_batch_and_steps",
    "scrape_edge_share",
]

# the one definition of "agree": |client − engine| ≤ tolerance × engine
IDLE_EXPLAINED = "idle-explained"  # B and s part by the measured time nothing decoded
PREEMPTION_EXPLAINED = "preemption-explained"  # B and s part by the measured stalls
STEP_WEIGHTED = "step-weighted"  # B and s part by τ's batch weighting; the client's steps agree
WINDOW_LIVES = "window-lives"  # B and s part by τ over lives longer than the window
UNEXPLAINED = " (no measured mechanism of this size: a disagreement)"
AGREEMENT_TOLERANCES: dict[str, float] = {"T": 0.02, "B": 0.05, "s": 0.05, "alpha": 0.03}

_CAUSES: dict[tuple[str, bool], str] = {
    ("T", False): "the engine served traffic the client did not send (other clients, "
    "warm-up) or counted requests finished outside the client's window",
    ("T", True): "the endpoint fronts more engines than this /metrics covers, or the engine "
    "counts tokens only when a request ends and some were still running at the window's end",
    ("B", True): "client saturation or network delay stretches τ (B = T·τ/R grows with it), "
    "or R in the spec is lower than the engines actually serving",
    ("B", False): "idle replicas or idle time: the client's B averages over elapsed time, "
    "busy slots per decode only over decode calls; or R counts replicas that got no traffic",
    ("s", True): "the engine idled (its steps/s averages over elapsed time, 1/τ only over "
    "decoding), or several tokens per engine step (multi-token chunks or speculative "
    "decoding): 1/τ counts tokens, not steps",
    ("s", False): "the engine counts prefill-only steps too",
    ("alpha", True): "the engine verifies drafts the client never sees (other clients), or "
    "coalesces steps into chunks",
    ("alpha", False): "the engine counts accepted tokens past a request's length (its last "
    "step), which the client never receives: short outputs read lower on the client",
}


def engine_batch_and_steps(
    window: EngineFigures, replicas: int
) -> tuple[float | None, float | None]:
    """(B, s) per replica from the engine alone, for a second MBU next to the client's.

    B, best first: llama.cpp's busy slots per decode call; generated tokens per engine step
    (each decode step emits one token per running sequence, so this is the mean decode
    batch; prefill-only steps pull it down slightly); the time-weighted mean of running
    requests ÷ R (counts a request as running during its prefill too).
    """
    r = max(replicas, 1)
    steps = window.decode_steps
    batch: float | None
    if window.busy_slots_per_decode is not None:
        batch = window.busy_slots_per_decode
    elif steps and window.spec_drafts:  # speculative: one draft per sequence per verify step
        batch = window.spec_drafts / steps
    elif steps and window.generated_tokens is not None:
        batch = window.generated_tokens / steps
    elif window.running_mean is not None:
        batch = window.running_mean / r
    else:
        batch = None
    rate = window.decode_steps_per_s
    return batch, (rate / r if rate is not None else None)


def _one(
    figure: str, client: float, engine: float | None, tol: float, extra: str
) -> EngineAgreement:
    if engine is None or engine <= 0:
        return EngineAgreement(figure=figure, client=client, engine=engine, tolerance=tol)
    rel = (client - engine) / engine
    ok = abs(rel) <= tol
    cause = None if ok else _CAUSES[(figure, rel > 0)] + extra + UNEXPLAINED
    return EngineAgreement(
        figure=figure, client=client, engine=engine, rel_diff=rel, tolerance=tol, ok=ok, cause=cause
    )


def counter_resolution(
    window: EngineFigures, requests_in_window: int | None = None
) -> dict[str, float]:
    """The counters' own resolution over the window: ±1 count of N is 1/N of a figure (T
    from generated tokens; s from steps; B from both); a counter that moves in whole requests
    (llama.cpp's tokens) resolves to two requests. This, not the scrape interval, is what the
    witness adds to each figure's tolerance."""

    def inv(n: float | None) -> float:
        return 1.0 / n if n is not None and n >= 1 else 0.0

    tokens, steps = inv(window.generated_tokens), inv(window.decode_steps)
    finished = window.requests_finished or requests_in_window
    if window.engine == "llamacpp" and finished:
        # llama.cpp adds a request's tokens to its counter when the request ends: the counter
        # moves in whole requests, and each window edge (interpolated between scrapes) can
        # misplace one of them, so T resolves to 2 requests of those finished, not 1 token
        # (llama.cpp counts no finished requests: the client's count in the window stands in)
        tokens = max(tokens, 2.0 / finished)
    return {"T": tokens, "B": tokens + steps, "s": steps}


def scrape_edge_share(client_tokens_per_s: float, on_engine_clock: float | None) -> float:
    """The scrape timing's share of a rate over the window, measured in this probe: the
    client's tokens counted as the engine's counters count them (at its scrapes, interpolated
    to the window's edges) against its own window count. The engine's steps per second are
    read through the same interpolation, so s carries the same edge error; B (tokens ÷ steps,
    both interpolated alike) and T (compared on the engine's clock) do not."""
    if on_engine_clock is None or on_engine_clock <= 0 or client_tokens_per_s <= 0:
        return 0.0
    return abs(on_engine_clock / client_tokens_per_s - 1.0)


@dataclass(frozen=True, slots=True)
class ClientMechanisms:
    """What the client measured that makes its figures part from the engine's, each a share.

    ``decode_share``: of the window, time some request was decoding (first to last token);
    ``idle_share`` and ``prompt_only_share`` split the rest (nothing in flight; prompts with no
    decode in flight, ``metrics.mbu.prompt_phase``); ``stalled_share``: of decode time, streams
    silent while others decoded (preemption, ``metrics.mbu.kv_pressure``)."""

    decode_share: float | None = None
    idle_share: float | None = None
    prompt_only_share: float | None = None
    stalled_share: float | None = None
    steps_per_s: float | None = None  # decode steps/s per replica, each once (step_gaps)
    step_batch: float | None = None  # their mean batch, each step once
    window_tau_s: float | None = None  # τ over the window's own token gaps (StepGaps.tau_s)


def compare_client_engine(
    *,
    client_tokens_per_s: float,
    client_tau_s: float,
    replicas: int,
    window: EngineFigures,
    tokens_per_chunk: float = 1.0,
    tolerances: Mapping[str, float] = AGREEMENT_TOLERANCES,
    client_decode_share: float | None = None,
    client_tokens_per_s_engine_clock: float | None = None,
    mechanisms: ClientMechanisms | None = None,
    client_steps: tuple[float, float] | None = None,
    requests_in_window: int | None = None,
) -> list[EngineAgreement]:
    """T, B = T·τ/R and s = 1/τ from the client against the engine's counts over the window.

    Tolerance: ``tolerances`` plus the counters' resolution (``counter_resolution``), never
    the scrape interval. T is compared on the engine's clock when
    ``client_tokens_per_s_engine_clock`` is given (``engine.align``): the edge effect is then
    measured, and named with its size. ``tokens_per_chunk`` > 1 (seen by the client) is named
    in any disagreement's cause. ``mechanisms`` (or ``client_decode_share`` alone, one replica)
    can explain B and s by a measured mechanism with its size; an unexplained difference is a
    disagreement. ``client_steps``: (acceptance length, ITL per chunk) under speculative
    decoding (``metrics.steps``): B and s then count steps and sequences, and the acceptance
    length is set beside the engine's (``alpha``).
    """
    r = max(replicas, 1)
    extra = (
        f"; the client saw {tokens_per_chunk:.2f} tokens per chunk"
        if tokens_per_chunk > 1.05
        else ""
    )
    res = counter_resolution(window, requests_in_window)
    tol = {k: tolerances[k] + res[k] for k in ("T", "B", "s")}
    tol["s"] += scrape_edge_share(client_tokens_per_s, client_tokens_per_s_engine_clock)
    b_engine, s_engine = engine_batch_and_steps(window, r)
    client_b, client_s = batch_and_steps(client_tokens_per_s, client_tau_s, r)
    alpha: list[EngineAgreement] = []
    if client_steps is not None:  # speculative decoding: steps and sequences, not tokens
        client_alpha, itl_chunk_s = client_steps
        client_b, client_s = batch_and_steps(client_tokens_per_s / client_alpha, itl_chunk_s, r)
        tol_alpha = tolerances.get("alpha", AGREEMENT_TOLERANCES["alpha"])
        alpha = [_one("alpha", client_alpha, window.acceptance_length, tol_alpha, "")]
    t = _one("T", client_tokens_per_s, window.generated_tokens_per_s, tol["T"], extra)
    aligned = client_tokens_per_s_engine_clock
    if aligned is not None and aligned > 0 and client_tokens_per_s > 0:
        t = _on_engine_clock(t, aligned, window.generated_tokens_per_s, extra)
    b = _one("B", client_b, b_engine, tol["B"], extra)
    s = _one("s", client_s, s_engine, tol["s"], extra)
    mech = mechanisms or ClientMechanisms(decode_share=client_decode_share)
    if r == 1 or mech.stalled_share is not None:
        b, s = _explained(t, b, s, mech, r)
    if client_steps is None:
        b, s = _window_lives(t, b, s, mech, client_tau_s)
        b, s = _step_weighted(t, b, s, mech)
        b, s = _step_weighted_by_running(t, b, s, window, r)
    return [t, b, s, *alpha]


def _window_lives(
    t: EngineAgreement,
    b: EngineAgreement,
    s: EngineAgreement,
    mech: ClientMechanisms,
    client_tau_s: float,
) -> tuple[EngineAgreement, EngineAgreement]:
    """B and s off because τ spans the counted requests' whole lives while T and the engine's
    counters span the window: a request counted in a short window decodes partly in the
    warm-up before it and the drain after it, at another load, so τ over its life is not the
    window's. Explained when T agrees and τ over the window's own token gaps
    (``window_tau_s``) gives the engine's B and s within their tolerances, the pair parting as
    τ ÷ that τ predicts (B by it, s by its inverse); both sizes are in the cause."""
    tau_w = mech.window_tau_s
    if not (t.ok and b.ok is False and s.ok is False) or tau_w is None or tau_w <= 0:
        return b, s
    if client_tau_s <= 0:
        return b, s
    window_b, window_s = b.client * tau_w / client_tau_s, s.client * client_tau_s / tau_w
    rels = _as_engine(b, s, window_b, window_s)
    if rels is None:
        return b, s
    b_rel, s_rel = rels
    cause = (
        f"{WINDOW_LIVES}: τ over the counted requests' lives reads "
        f"{client_tau_s * 1e3:.1f} ms, over the window's own token gaps {tau_w * 1e3:.1f} ms "
        f"(their lives run past the window, into the warm-up and the drain at another load); "
        f"from the window's τ, B = {window_b:.3g} ({b_rel:+.1%}) and s = {window_s:.3g}/s "
        f"({s_rel:+.1%}), as the engine counts them; T agrees"
    )
    return _explain(b, cause), _explain(s, cause)


def _as_engine(
    b: EngineAgreement, s: EngineAgreement, client_b: float, client_s: float
) -> tuple[float, float] | None:
    """A client B and s read another way (``client_b``, ``client_s``) against the engine's:
    their relative differences, or None when either lies beyond its tolerance."""
    if not b.engine or not s.engine:
        return None
    b_rel, s_rel = client_b / b.engine - 1.0, client_s / s.engine - 1.0
    if abs(b_rel) > b.tolerance or abs(s_rel) > s.tolerance:
        return None
    return b_rel, s_rel


def _explain(a: EngineAgreement, cause: str) -> EngineAgreement:
    """``a`` explained by a measured mechanism: agreeing, with the mechanism as its cause."""
    return a.model_copy(update={"ok": True, "cause": cause})


def _step_weighted(
    t: EngineAgreement, b: EngineAgreement, s: EngineAgreement, mech: ClientMechanisms
) -> tuple[EngineAgreement, EngineAgreement]:
    """B and s off because τ weights each step by its batch: τ = Σ B_i·d_i ÷ Σ B_i exceeds the
    mean step Σ d_i ÷ N by Cov(B, d) ÷ E[B] when steps that carry more streams last longer, so
    1/τ reads fewer steps and T·τ a larger batch than the engine's per-step counts; the product
    (T) is the same. Explained only when T agrees and the client's own step count (each step
    once, from its token gaps) gives the engine's s and B within their tolerances, and the
    pair parts the way a positive covariance parts it (client B higher, s lower). One of the
    pair past its tolerance is enough: the covariance moves both by about the same share, so
    near the line one crosses it and the other does not, by the same mechanism."""
    if not (t.ok and (b.ok is False or s.ok is False)) or mech.steps_per_s is None:
        return b, s
    if mech.step_batch is None or not s.engine or not b.engine or b.rel_diff is None:
        return b, s
    if b.rel_diff <= 0 or (s.rel_diff or 0.0) >= 0:  # a positive covariance parts them this way
        return b, s
    rels = _as_engine(b, s, mech.step_batch, mech.steps_per_s)
    if rels is None:
        return b, s
    b_rel, s_rel = rels
    cause = (
        f"{STEP_WEIGHTED}: τ weights each step by its batch, and steps with more streams "
        f"lasted longer (T·τ reads {b.rel_diff:+.1%} against the engine's tokens per step); "
        f"counted once each from the client's token gaps the steps read s = "
        f"{mech.steps_per_s:.1f}/s ({s_rel:+.1%}) and B = {mech.step_batch:.1f} ({b_rel:+.1%}), "
        "as the engine counts them; T agrees"
    )
    return _explain(b, cause), _explain(s, cause)


def _step_weighted_by_running(
    t: EngineAgreement, b: EngineAgreement, s: EngineAgreement, window: EngineFigures, r: int
) -> tuple[EngineAgreement, EngineAgreement]:
    """The step weighting confirmed by the engine's own time-weighted batch where the client's
    step count cannot (its token gaps blur when its machine is loaded): T·τ is a time-weighted
    batch, as the engine's running-requests gauge is, while tokens per step weight each step
    once. When T agrees, the pair parts the covariance's way (client B higher, s lower) and
    the client's B lies within B's tolerance plus two standard errors of the gauge's mean of
    the engine's running mean ÷ R, the two count the same batch: explained, both sizes in the
    cause. The gauge also counts requests in prefill, so where prompts are long it reads
    above the decode batch and this check is looser there; the gap-based count
    (``_step_weighted``) is tried first."""
    if not (t.ok and (b.ok is False or s.ok is False)) or b.rel_diff is None:
        return b, s
    running, sem = window.running_mean, window.running_sem
    if running is None or running <= 0 or sem is None or b.rel_diff <= 0:
        return b, s
    if (s.rel_diff or 0.0) >= 0:
        return b, s
    time_weighted = running / r
    rel = b.client / time_weighted - 1.0
    allowed = b.tolerance + 2.0 * sem / running
    if abs(rel) > allowed:
        return b, s
    cause = (
        f"{STEP_WEIGHTED}: τ weights each step by its batch, and steps with more streams "
        f"lasted longer (T·τ reads {b.rel_diff:+.1%} against the engine's tokens per step); "
        f"the engine's own time-weighted running requests read B = {time_weighted:.1f} "
        f"({rel:+.1%} from the client's, within ±{allowed:.1%}: the tolerance and two standard "
        "errors of the gauge's mean); T agrees"
    )
    explained = {"ok": True, "cause": cause}
    return (
        b if b.ok else b.model_copy(update=explained),
        s if s.ok else s.model_copy(update=explained),
    )


def _on_engine_clock(
    t: EngineAgreement, aligned: float, engine: float | None, extra: str
) -> EngineAgreement:
    """T against the client's tokens counted the way the engine counts them; the edge effect
    (aligned − window count) is stated with its size."""
    edge = aligned / t.client - 1.0
    if engine is None or engine <= 0:
        return t
    rel = (aligned - engine) / engine
    ok = abs(rel) <= t.tolerance
    note = (
        f"compared on the engine's clock (its counter at the scrapes, interpolated to the "
        f"window's edges): the edge effect is {edge:+.1%} of the client's window count"
    )
    cause = note if ok else f"{_CAUSES[('T', rel > 0)]}{extra}{UNEXPLAINED}; {note}"
    return t.model_copy(update={"engine": engine, "rel_diff": rel, "ok": ok, "cause": cause})


def _explained(
    t: EngineAgreement,
    b: EngineAgreement,
    s: EngineAgreement,
    mech: ClientMechanisms,
    replicas: int,
) -> tuple[EngineAgreement, EngineAgreement]:
    """B and s off by a mechanism the client measured, with its size: not a disagreement.

    Time nothing decoded (idle, prompts alone; one replica): the client's B = T·τ/R and s = 1/τ
    average over elapsed time, the engine's busy slots and steps only over the steps that
    decode; with a decode share u the client reads B·u and s/u. Preemption: τ counts the
    stalled share σ of decode time, so the client reads B/(1 − σ) and s·(1 − σ). A mechanism
    explains the pair when T agrees and the measured size predicts B's difference within B's
    tolerance. Several tokens per engine step (speculative decoding) make the idle pattern with
    u ≈ 1 and stay a disagreement; so does everything no measured mechanism sizes.
    """
    if not (t.ok and b.ok is False and s.ok is False) or b.rel_diff is None:
        return b, s
    ratio = 1.0 + b.rel_diff  # client B ÷ engine B
    u, sigma = mech.decode_share, mech.stalled_share
    cause = None
    if replicas == 1 and u is not None and ratio < 1 and abs(ratio - u) <= b.tolerance:
        split = ""
        if mech.idle_share is not None and mech.prompt_only_share is not None:
            split = (
                f": idle {mech.idle_share:.0%}, prompts with no decode in flight "
                f"{mech.prompt_only_share:.0%}"
            )
        cause = (
            f"{IDLE_EXPLAINED}: nothing decoded for {1 - u:.0%} of the window{split} (the "
            "client's stamps); its B and s average over elapsed time, the engine's over "
            "decode steps; T agrees"
        )
    elif (
        sigma is not None
        and sigma > 0
        and ratio > 1
        and abs(ratio * (1 - sigma) - 1) <= b.tolerance
    ):
        cause = (
            f"{PREEMPTION_EXPLAINED}: streams stalled (preempted) for {sigma:.0%} of decode "
            "time (the client's chunk stamps); τ counts the stalls, the engine's batch does "
            "not; T agrees"
        )
    if cause is None:
        return b, s
    explained = {"ok": True, "cause": cause}
    return b.model_copy(update=explained), s.model_copy(update=explained)
