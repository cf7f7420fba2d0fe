"""The bytes an engine really reads per decode step: mixed prefill/decode steps, the batch's
spread, idle time and measured routing (docs/methodology.md, "MBU: mixed steps").

The seed's W(B) counts the experts that B decode tokens hit. With chunked prefill (vLLM,
SGLang, the simulator) a step that also carries a prompt chunk routes those prompt tokens
through the experts too, and reads the union: on many-expert models such a step reads
1.4–2× W(B). From what the client knows this module estimates, per replica:

    B_dec  = B · (1 − 1/n̄)             decode tokens per step (the first token of a request
                                          comes from its prefill step, mbu-notes §2)
    φ      = idle fraction, measured from request arrival and completion times, plus the
             share a replica ran prompts with no decode in flight (metrics.mbu.prompt_phase)
    B_busy = B_dec / (1 − φ)           mean batch of the steps that decode
    m      = λ_rep / s = λ_rep · τ     prompts admitted per decode step (Poisson arrivals:
                                          the idle share of arrivals and of steps cancel)
    X      = B' + J · L               routed tokens of a step: B' ~ Poisson(B_busy) decodes,
                                          J ~ Poisson(m) prompts of L uncached tokens each
    W̄      = dense + MoE layers × Σ_r (1 − E[(1 − π_r)^X]) × bytes per expert

and the headline weight traffic R · s · (1 − φ) · W̄ (bytes per elapsed second). The same with
J = 0 is the decode-only figure. A prompt longer than the step's free chunk budget
(C − B_busy) is split: then a fraction min(1, m·L/(C − B)) of steps carry a full chunk.
Where the records have token times the steps are counted from the gaps, each once
(``metrics.mbu.step_gaps``): the headline is then R · n_s · Σ_b share(b) · W̄(b) with n_s the
decode steps per elapsed second and share(b) the steps' own batch law, and the prompts per step
are spread over the batches in proportion to each batch's mean step. Else s from τ through the
byte law and a Poisson batch law (τ weights each step by its batch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.geometry.routing import ExpertLoad, FloatArray, GeneratingFunction
from tokenwatt.metrics.mbu.spans import RequestSweep, SpanSweep
from tokenwatt.metrics.mbu.step_gaps import StepLaw
from tokenwatt.records import RequestRecord
from tokenwatt.result import MbuMixedSteps
from tokenwatt.spec.engine import DEFAULT_CHUNK_BUDGET_TOKENS

__all__ = [
    "DEFAULT_CHUNK_BUDGET_TOKENS",
    "StepRegime",
    "StepWeights",
    "decode_batch_from_intervals",
    "estimate_mixed_steps",
    "idle_fraction_from_intervals",
    "regime_from_records",
    "step_weights",
]


@dataclass(frozen=True, slots=True)
class StepRegime:
    """What the client measured about the load, beside T and τ, plus the engine's limits."""

    request_rate_rps: float  # node: counted requests per second of window
    mean_prompt_tokens: float  # the server's usage.prompt_tokens, mean over counted requests
    mean_output_tokens: float  # n̄
    mean_cached_prompt_tokens: float = 0.0  # usage.prompt_tokens_details.cached_tokens
    idle_fraction: float | None = None  # φ measured; None: not measured (taken as 0)
    chunk_budget_tokens: int = DEFAULT_CHUNK_BUDGET_TOKENS  # C: max_num_batched_tokens
    slot_limit: int | None = None  # max_num_seqs / llama.cpp slots per replica, when known
    expert_load: ExpertLoad | None = None  # measured routing; None: uniform
    # decode batch per replica averaged over the window, from every request's first-to-last
    # token interval clipped to it (Little's law without the counted set's Poisson noise);
    # None: B·(1 − 1/n̄) from T·τ/R
    decode_batch: float | None = None
    routing_zipf: float | None = None  # a stated skew for the band (None: the fewest experts)
    # measured from the four stamps of every request (``metrics.mbu.prompt_phase``): share of the
    # window a replica ran prompts with no decode in flight (the single stream: every prompt),
    # and the share of prompt time a decode was in flight; None: not measured (0 and 1)
    prefill_only_fraction: float | None = None
    prompt_mixing_share: float | None = None
    # the decode steps each counted once, from the token gaps (``metrics.mbu.step_gaps``): their
    # mean length and batch law; None: s = 1/τ and a Poisson law through the byte law
    step_law: StepLaw | None = None


def idle_fraction_from_intervals(
    intervals: Iterable[tuple[int, int]], window_start_ns: int, window_end_ns: int, replicas: int
) -> float | None:
    """Share of the window a replica had no request: from (arrival, completion) times.

    N(t) = requests in flight at t (sent, not finished), clipped to the window. One replica is
    idle exactly when N = 0; with R replicas behind a router that sends each request to the
    least loaded one, a replica can only idle while N < R, so the idle share per replica is
    E[max(0, R − N(t))] / R over the window (exact for R = 1, an estimate above).
    """
    totals = SpanSweep([(a, None, None, b) for a, b in intervals], replicas).totals(
        window_start_ns, window_end_ns
    )
    return None if totals is None else totals.idle_fraction


def _routing(geometry: ModelGeometry, load: ExpertLoad | None) -> ExpertLoad:
    if load is not None:
        return load
    return ExpertLoad.uniform(geometry.experts, geometry.experts_per_token)


def _prompt_law(
    m: float, prompt: float, free_budget: float
) -> tuple[float, float, GeneratingFunction | None]:
    """(share of steps with prompt tokens, prompt tokens in such a step, G of those tokens
    over ALL decode steps — 1 for a step without prompt tokens); None: no prompts."""
    if m <= 0 or prompt <= 0:
        return 0.0, 0.0, None
    if prompt <= free_budget:  # whole prompts: J ~ Poisson(m) of them, L tokens each
        f = -math.expm1(-m)
        return f, m * prompt / f, lambda x: np.exp(-m * (1.0 - np.power(x, prompt)))
    f = min(1.0, m * prompt / free_budget)  # split prompts: full chunks of the free budget
    return f, free_budget, lambda x: (1.0 - f) + f * np.power(x, free_budget)


def _busy_batch_law(mean_busy: float) -> tuple[FloatArray, FloatArray]:
    """(batches b ≥ 1, their share of busy time): Poisson(μ) given b ≥ 1, μ/(1 − e^−μ) = mean.

    With Poisson arrivals the number of requests decoding at a random instant is Poisson
    (M/G/∞); busy time is the part with at least one."""
    x = max(mean_busy, 1.0 + 1e-9)
    mu = x
    for _ in range(200):
        mu = x * -math.expm1(-mu)
    top = int(mu + 12.0 * math.sqrt(mu) + 12)
    b = np.arange(1, top + 1, dtype=np.float64)
    log_p = b * math.log(mu) - mu - np.array([math.lgamma(v + 1.0) for v in b])
    p = np.exp(log_p)
    return b, p / p.sum()


def _distinct_by_batch(
    load: ExpertLoad, b: FloatArray, g_prompts: Sequence[GeneratingFunction | None]
) -> tuple[FloatArray, FloatArray]:
    """(distinct experts per layer of a decode-only step, of an average step) at each batch;
    ``g_prompts[i]``: G of the prompt tokens of a step at batch b[i] (None: no prompts)."""
    dec, avg = np.zeros_like(b), np.zeros_like(b)
    for i, (v, g) in enumerate(zip(b, g_prompts, strict=True)):
        dec[i], avg[i] = load.expected_distinct_with(float(v), g)
    return dec, avg


@dataclass(frozen=True, slots=True)
class StepWeights:
    """Per batch of the step law: distinct experts and weight bytes, decode-only and average."""

    mixed_share: FloatArray  # f(b): share of steps at batch b with prompt tokens
    prompt_per_mixed: FloatArray  # prompt tokens in such a step
    d_dec: FloatArray
    d_avg: FloatArray
    w_dec: FloatArray
    w_avg: FloatArray


def step_weights(
    geometry: ModelGeometry, load: ExpertLoad | None, b: FloatArray, *, m: float | FloatArray,
    prompt: float, free: float,
) -> StepWeights:  # fmt: skip
    """W̄(b) of a decode-only and of an average step at each batch b, with m(b) prompts per
    step at that batch (one value for all, or one per batch)."""
    m_b = np.broadcast_to(np.asarray(m, dtype=np.float64), b.shape)
    laws = [_prompt_law(float(x), prompt, free) for x in m_b]
    f = np.array([law[0] for law in laws])
    p_mixed = np.array([law[1] for law in laws])
    d_dec = d_avg = np.zeros_like(b)
    if load is not None:
        d_dec, d_avg = _distinct_by_batch(load, b, [law[2] for law in laws])
    per = geometry.moe_layers * geometry.expert_bytes if geometry.is_moe else 0.0
    return StepWeights(
        f, p_mixed, d_dec, d_avg, geometry.dense_weight_bytes + per * d_dec,
        geometry.dense_weight_bytes + per * d_avg,
    )  # fmt: skip


def _byte_law(
    geometry: ModelGeometry, load: ExpertLoad | None, *, tau: float, lam_busy: float,
    prompt: float, free: float, kv_bytes_per_output_token: float, busy: float, b_dec: float,
) -> tuple[float, float, FloatArray, FloatArray, StepWeights]:  # fmt: skip
    """Without the gaps' step law: (steps per busy second, prompts per step, batches, step
    shares, weights) from the Poisson busy-time law, steps lasting in proportion to the bytes
    they read, h(b) = W̄(b) + KV·b, scaled so that the law reproduces the measured τ."""
    b, pt = _busy_batch_law(b_dec / busy)
    m = lam_busy * busy * tau  # first pass: prompts per step at the batch-weighted step time
    for _ in range(3):  # m depends on the step rate, which depends on m: a few passes converge
        sw = step_weights(geometry, load, b, m=m, prompt=prompt, free=free)
        h = sw.w_avg + kv_bytes_per_output_token * b
        scale = tau * float((pt * b / h).sum()) / float((pt * b).sum())  # seconds per byte
        steps_busy = float((pt / h).sum()) / scale  # decode steps per busy second
        m = lam_busy / steps_busy if steps_busy > 0 else 0.0
    return steps_busy, m, b, pt / h / float((pt / h).sum()), sw


def estimate_mixed_steps(
    geometry: ModelGeometry,
    *,
    batch_per_replica: float,
    steps_per_s: float,
    replicas: int,
    regime: StepRegime,
    kv_bytes_per_output_token: float = 0.0,
) -> MbuMixedSteps:
    """The mixed-step estimate (module doc) from B = T·τ/R, s = 1/τ and the measured regime.

    s and the steps' batch law come from the token gaps when the regime has them
    (``metrics.mbu.step_gaps``: each step counted once); else from B = T·τ/R, the *time*-averaged
    decode batch, as a Poisson law over busy time with steps lasting in proportion to their
    bytes (``_byte_law``). The weight bytes per busy second are s · E_steps[W̄(b)].
    """
    n = regime.mean_output_tokens
    b_dec = b_counted = batch_per_replica * (1.0 - 1.0 / n) if n > 1 else batch_per_replica
    if regime.decode_batch is not None and regime.decode_batch > 0:
        b_dec = regime.decode_batch
    # decode-busy share: neither idle nor running prompts alone (prompt_phase)
    not_decoding = max(regime.idle_fraction or 0.0, 0.0) + (regime.prefill_only_fraction or 0.0)
    busy = 1.0 - min(not_decoding, 0.99)
    prompt = max(0.0, regime.mean_prompt_tokens - regime.mean_cached_prompt_tokens)
    mixing = 1.0 if regime.prompt_mixing_share is None else regime.prompt_mixing_share
    lam_busy = regime.request_rate_rps / replicas * mixing / busy  # prompts riding in steps
    g = geometry
    load = _routing(g, regime.expert_load) if g.is_moe else None
    free = max(1.0, regime.chunk_budget_tokens - max(b_dec / busy, 1.0))  # C − B: prompt room
    law = regime.step_law
    if law is None:
        steps_busy, m, b, step_w, sw = _byte_law(
            g, load, tau=1.0 / steps_per_s, lam_busy=lam_busy, prompt=prompt, free=free,
            kv_bytes_per_output_token=kv_bytes_per_output_token, busy=busy, b_dec=b_dec,
        )  # fmt: skip
        rate = replicas * busy * steps_busy
    else:  # counted: no busy share needed (prompt-only steps are not decode steps)
        rate, b, step_w = replicas * law.steps_per_s, law.batches, law.shares
        m = lam_busy * busy / law.steps_per_s  # prompts per decode step, on average
        # a step admits the prompts that arrived during the step before it: m(b) ∝ its length
        m_b = m * law.step_s / law.mean_step_s
        sw = step_weights(g, load, b, m=m_b, prompt=prompt, free=free)
    return _summary(
        regime, sw, step_w, b, busy=busy, m=m, prompt=prompt, rate=rate,
        b_counted=b_counted, b_dec=b_dec, moe=load is not None, g=g,
    )  # fmt: skip


def _summary(
    regime: StepRegime, sw: StepWeights, step_w: FloatArray, b: FloatArray, *, busy: float,
    m: float, prompt: float, rate: float, b_counted: float, b_dec: float, moe: bool,
    g: ModelGeometry,
) -> MbuMixedSteps:  # fmt: skip
    """The estimate's figures: step-weighted means of the weights, times the step rate."""
    d_dec_mean = float((step_w * sw.d_dec).sum())
    d_avg_mean = float((step_w * sw.d_avg).sum())
    f = float((step_w * sw.mixed_share).sum())
    p_mixed = float((step_w * sw.mixed_share * sw.prompt_per_mixed).sum()) / f if f > 0 else 0.0
    d_mixed = d_dec_mean + (d_avg_mean - d_dec_mean) / f if f > 0 else d_dec_mean
    per = g.moe_layers * g.expert_bytes if g.is_moe else 0.0
    w_dec_mean = float((step_w * sw.w_dec).sum())
    w_avg_mean = float((step_w * sw.w_avg).sum())
    return MbuMixedSteps(
        batch_counted=b_counted,
        batch_decode=b_dec,
        busy_fraction=busy,
        batch_busy=float((step_w * b).sum()),
        prompts_per_step=m,
        uncached_prompt_tokens=prompt,
        mixed_step_fraction=f,
        prompt_tokens_per_mixed_step=p_mixed,
        distinct_experts_decode_only=d_dec_mean if moe else None,
        distinct_experts_mixed_step=d_mixed if moe else None,
        weight_bytes_decode_only=w_dec_mean,
        weight_bytes_mixed_step=g.dense_weight_bytes + per * d_mixed,
        weight_bytes_mean_step=w_avg_mean,
        weight_bytes_per_s=rate * w_avg_mean,
        decode_only_weight_bytes_per_s=rate * w_dec_mean,
        routing=regime.expert_load.source if regime.expert_load is not None else "uniform",
        # T·τ/R of the counted requests, not the window's decode intervals: an engine never
        # decodes more than its slots, but a window that is not steady shows B above them
        over_slot_limit=regime.slot_limit is not None and b_counted > regime.slot_limit * 1.02,
        decode_step_s=None if regime.step_law is None else regime.step_law.mean_step_s,
        decode_steps_per_s=None if regime.step_law is None else regime.step_law.steps_per_s,
    )


def regime_from_records(
    records: Sequence[RequestRecord],
    counted: Sequence[RequestRecord],
    window_start_ns: int,
    window_end_ns: int,
    *,
    replicas: int,
    chunk_budget_tokens: int = DEFAULT_CHUNK_BUDGET_TOKENS,
    slot_limit: int | None = None,
    expert_load: ExpertLoad | None = None,
    routing_zipf: float | None = None,
    sweep: RequestSweep | None = None,
) -> StepRegime | None:
    """The regime of one probe window from the client's records: request rate and mean prompt
    and output lengths of the counted requests, idle share from every request's (sent, done)
    interval, decode batch from every request's first-to-last-token interval. None when no
    counted request has a prompt length or output. ``sweep``: the probe's records already
    swept (``spans.RequestSweep``: a window and its blocks share it); else ``records``'."""
    window_s = (window_end_ns - window_start_ns) / 1e9
    known = [r for r in counted if r.prompt_tokens is not None and r.output_tokens > 0]
    if window_s <= 0 or not known:
        return None
    swept = sweep if sweep is not None else RequestSweep(records, replicas)
    totals = swept.spans.totals(window_start_ns, window_end_ns)
    return StepRegime(
        request_rate_rps=len(counted) / window_s,
        mean_prompt_tokens=sum(r.prompt_tokens or 0 for r in known) / len(known),
        mean_output_tokens=sum(r.output_tokens for r in known) / len(known),
        idle_fraction=None if totals is None else totals.idle_fraction,
        chunk_budget_tokens=chunk_budget_tokens,
        slot_limit=slot_limit,
        expert_load=expert_load,
        routing_zipf=routing_zipf,
        prefill_only_fraction=None if totals is None else totals.prefill_only_fraction,
        prompt_mixing_share=None if totals is None else totals.prompt_mixing_share,
        decode_batch=None if totals is None else totals.decode_batch,
        step_law=swept.gaps.law(window_start_ns, window_end_ns, replicas),
    )


def decode_batch_from_intervals(
    intervals: Sequence[tuple[int | None, int | None]],
    window_start_ns: int,
    window_end_ns: int,
    replicas: int,
) -> float | None:
    """Mean number of requests decoding per replica over the window: Σ overlap of each
    (first token, last token) interval with the window ÷ (window × R). None: no window."""
    totals = SpanSweep([(None, a, b, None) for a, b in intervals], replicas).totals(
        window_start_ns, window_end_ns
    )
    return None if totals is None else totals.decode_batch
