"""Client against engine for one probe: T, B and s side by side, with a likely cause.

Why: the derivation (B = T·τ/R, s = 1/τ) is an inference from client timing; an engine that
counts its own tokens and batch is a second witness. Where both sides agree within the
stated tolerance the derived MBU rests on measured ground; where they do not, the check says
which way they part and what usually causes it, instead of silently reporting one of them.

Engine figures per replica: T is node-wide on both sides; B is the engine's busy slots per
decode (llama.cpp), else generated tokens per engine step, else its time-weighted mean of
running requests ÷ R (``engine_batch_and_steps``); s is engine steps per second ÷ R.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tokenwatt.engine.window import EngineWindow

__all__ = [
    "AGREEMENT_TOLERANCES",
    "IDLE_EXPLAINED",
    "Agreement",
    "compare_client_engine",
    "engine_batch_and_steps",
]

# the one definition of "agree": |client − engine| ≤ tolerance × engine
IDLE_EXPLAINED = "idle-explained"  # B and s part by the engine's idle share alone
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


@dataclass(frozen=True, slots=True)
class Agreement:
    """One figure on both sides. ``ok`` is None where the engine does not count it."""

    figure: str
    client: float
    engine: float | None
    rel_diff: float | None
    tolerance: float
    ok: bool | None
    cause: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def engine_batch_and_steps(
    window: EngineWindow, replicas: int
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


def _one(figure: str, client: float, engine: float | None, tol: float, extra: str) -> Agreement:
    if engine is None or engine <= 0:
        return Agreement(figure, client, engine, None, tol, None)
    rel = (client - engine) / engine
    ok = abs(rel) <= tol
    cause = None if ok else _CAUSES[(figure, rel > 0)] + extra
    return Agreement(figure, client, engine, rel, tol, ok, cause)


def compare_client_engine(
    *,
    client_tokens_per_s: float,
    client_tau_s: float,
    replicas: int,
    window: EngineWindow,
    tokens_per_chunk: float = 1.0,
    tolerances: Mapping[str, float] = AGREEMENT_TOLERANCES,
    client_decode_share: float | None = None,
    client_steps: tuple[float, float] | None = None,
) -> list[Agreement]:
    """T, B = T·τ/R and s = 1/τ from the client against the engine's counts over the window.

    ``tokens_per_chunk`` > 1 (seen by the client) is named in any disagreement's cause.
    ``client_decode_share``: the share of the window in which some request was decoding, from
    the client's own first- and last-token times (one replica); it can explain B and s.
    ``client_steps``: (acceptance length, ITL per chunk) under speculative decoding
    (``metrics.steps``): B and s then count steps and sequences, and the acceptance length is
    set beside the engine's (``alpha``).
    """
    r = max(replicas, 1)
    extra = (
        f"; the client saw {tokens_per_chunk:.2f} tokens per chunk"
        if tokens_per_chunk > 1.05
        else ""
    )
    b_engine, s_engine = engine_batch_and_steps(window, r)
    client_b = client_tokens_per_s * client_tau_s / r
    client_s = 1.0 / client_tau_s if client_tau_s > 0 else 0.0
    alpha: list[Agreement] = []
    if client_steps is not None:  # speculative decoding: steps and sequences, not tokens
        client_alpha, itl_chunk_s = client_steps
        client_s = 1.0 / itl_chunk_s
        client_b = client_tokens_per_s / client_alpha * itl_chunk_s / r
        tol = tolerances.get("alpha", AGREEMENT_TOLERANCES["alpha"])
        alpha = [_one("alpha", client_alpha, window.acceptance_length, tol, "")]
    t, b, s = (
        _one("T", client_tokens_per_s, window.generated_tokens_per_s, tolerances["T"], extra),
        _one("B", client_b, b_engine, tolerances["B"], extra),
        _one("s", client_s, s_engine, tolerances["s"], extra),
    )
    if r == 1 and client_decode_share is not None:
        return [t, *_idle_explained(t, b, s, client_decode_share), *alpha]
    return [t, b, s, *alpha]


def _idle_explained(
    t: Agreement, b: Agreement, s: Agreement, decode_share: float
) -> tuple[Agreement, Agreement]:
    """B low and s high by the share of the window in which nothing decoded: not a disagreement.

    The client's B = T·τ/R and s = 1/τ average over the elapsed window, the engine's busy
    slots and steps only over the steps that decode; with a decode share u the client reads
    B·u and s/u. When T agrees and the client's own measure of u (first- to last-token spans)
    matches 1 + ΔB within B's tolerance, both witnesses agree on everything but the time
    nothing decoded (prefill, gaps between requests: a single stream has both by
    construction); that is said, not flagged. Several tokens per engine step (speculative
    decoding) make the same pattern with u ≈ 1, and stay flagged; so does R > 1, where it may
    be a replica that got no traffic.
    """
    if not (t.ok and b.ok is False and s.ok is False):
        return b, s
    assert b.rel_diff is not None
    if not (b.rel_diff < 0 and abs(1 + b.rel_diff - decode_share) <= b.tolerance):
        return b, s
    cause = (
        f"{IDLE_EXPLAINED}: nothing decoded for {1 - decode_share:.0%} of the window (the "
        "client's first-to-last-token spans); its B and s average over elapsed time, the "
        "engine's over decode steps; T agrees"
    )
    return (
        Agreement(b.figure, b.client, b.engine, b.rel_diff, b.tolerance, True, cause),
        Agreement(s.figure, s.client, s.engine, s.rel_diff, s.tolerance, True, cause),
    )
