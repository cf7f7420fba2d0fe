"""MBU from figures somebody else measured: a published table's row, a peer tool's summary.

``metrics.mbu.compute_mbu`` needs T (output tokens/s of the node), τ (token-weighted ITL), the
KV bytes each generated token reads (from prompt and output lengths) and, for the headline, the
regime (request rate, idle share). Published tables rarely give all of them: InferenceX gives
TPOT by concurrency with fixed lengths, GuideLLM and vLLM give TPOT and throughput. This module
fills each gap by one stated assumption and returns the sentence beside the figure, so the
reader knows what was taken rather than measured:

- τ from the best figure given: the token-weighted ITL (per-request records), else the pooled
  mean ITL (every chunk gap of every request; one chunk per token makes it τ), else mean TPOT
  (a per-request mean: with mixed lengths the long requests weigh more in τ). The last two are
  flagged with the direction and size of B's bias measured on public H100 runs against the
  engine's running count (``TAU_BIAS``);
- lengths known only as means: the KV term is a band. Fixed lengths at the means give its
  lower end (output-length spread only raises the token-weighted context, n(n−1)/2 is convex),
  the file's maxima (where given) its upper end; the figure is flagged as a lower bound;
- T from a closed loop at concurrency C: every request takes TTFT + (n−1)·TPOT, so
  T = C·n / (TTFT + (n−1)·TPOT); a missing TTFT is taken as 0, which overstates T and B by
  the share TTFT/E2E;
- the request rate from T/n̄ (steady state: what arrives leaves);
- a closed loop at C ≥ R never idles and holds its batch at C: the headline is then the seed's
  formula (the mixed-step estimate's Poisson batch law does not apply); an open loop's idle
  share is unknown without per-request times, so there only the decode-only figure is given.

No formula is derived here; every number goes through ``compute_mbu``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenwatt.errors import TokenwattError
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.mixed_steps import StepRegime
from tokenwatt.result import Mbu
from tokenwatt.spec._base import MAX_COUNT, MAX_RATE_RPS, MAX_SECONDS, MAX_TOKENS

__all__ = [
    "FIGURE_BOUNDS",
    "FiguresError",
    "MbuEstimate",
    "PublishedFigures",
    "mbu_from_figures",
    "out_of_bounds",
]


class FiguresError(TokenwattError):
    """The figures given cannot make an MBU; the message names the missing one."""


@dataclass(frozen=True, slots=True)
class PublishedFigures:
    """What a table or a tool reported; None where it reported nothing."""

    output_tokens_per_s: float | None = None  # T, node
    itl_s: float | None = None  # τ: token-weighted mean ITL
    pooled_itl_s: float | None = None  # mean of every chunk gap of every request, pooled
    median_itl_s: float | None = None  # median of the pooled gaps, where no mean is published
    tpot_s: float | None = None  # mean time per output token after the first
    ttft_s: float | None = None  # mean time to first token
    concurrency: float | None = None  # closed loop: requests kept in flight
    request_rate_rps: float | None = None  # completed requests per second, node
    input_tokens: float | None = None  # mean prompt length
    output_tokens: float | None = None  # mean output length
    idle_fraction: float | None = None  # measured share of time a replica had no request
    # per request (prompt tokens, output tokens): KV bytes exactly, lengths as measured
    requests: Sequence[tuple[int, int]] | None = None
    # input_tokens/output_tokens are means of varying lengths (a summary), not fixed lengths
    lengths_are_means: bool = False
    max_input_tokens: float | None = None  # longest prompt, where the summary gives it
    max_output_tokens: float | None = None  # longest output, where the summary gives it


@dataclass(frozen=True, slots=True)
class MbuEstimate:
    """The MBU with what went in: the figures as used and each assumption in words."""

    mbu: Mbu
    headline: float | None  # all bytes per second (mixed steps, idle); None: regime unknown
    decode_only: float | None  # decode steps only (the seed's W(B) without regime)
    output_tokens_per_s: float
    itl_s: float
    request_rate_rps: float
    mean_input_tokens: float
    mean_output_tokens: float
    # which figure τ was taken from: "itl", "pooled_itl", "tpot" (lengths vary) or
    # "tpot_fixed" (every request the same output length: TPOT is τ)
    tau_source: str
    lengths: str  # how the lengths are known: per request, as means, or fixed
    regime: str  # closed loop, or open loop with the idle share measured or unknown
    assumptions: list[str] = field(default_factory=list)
    mbu_lengths_upper: float | None = None  # the band's upper end (the maxima), where known


# The largest value each figure may take (a figure past it is a typo or an overflow, never a
# measurement): the spec's own bounds where it has one, a node far beyond any real one else.
MAX_TOKENS_PER_S = 1e12  # output tokens/s of a node
FIGURE_BOUNDS: dict[str, float] = {
    "output_tokens_per_s": MAX_TOKENS_PER_S,
    "itl_s": MAX_SECONDS,
    "pooled_itl_s": MAX_SECONDS,
    "median_itl_s": MAX_SECONDS,
    "tpot_s": MAX_SECONDS,
    "ttft_s": MAX_SECONDS,
    "concurrency": MAX_COUNT,
    "request_rate_rps": MAX_RATE_RPS,
    "input_tokens": MAX_TOKENS,
    "output_tokens": MAX_TOKENS,
    "max_input_tokens": MAX_TOKENS,
    "max_output_tokens": MAX_TOKENS,
    "idle_fraction": 1.0,
}


def out_of_bounds(f: PublishedFigures) -> tuple[str, float] | None:
    """The first figure that is not a finite number within ``FIGURE_BOUNDS`` (name, value);
    None when all are."""
    for name, bound in FIGURE_BOUNDS.items():
        value = getattr(f, name)
        if value is not None and not (math.isfinite(value) and abs(value) <= bound):
            return name, value
    return None


def _positive(name: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise FiguresError(f"{name} must be > 0, got {value}")
    return value


# B's bias when τ is not the token-weighted ITL: public vLLM runs on one H100 SXM against the
# engine's running-request count (docs/methodology.md, "Summary-only files").
TAU_BIAS = {
    "pooled_itl": "B and MBU's weight term read high by +0.6…+2.3 % (pooled mean ITL against "
    "the engine's running count on public H100 runs)",
    "tpot": "B and MBU's weight term read high: mean TPOT overstated B by +12 % without "
    "preemption and +25 % with it against the engine's running count on public H100 runs",
    "median_itl": "B and MBU's weight term read low: a median ITL sits under its mean (B was "
    "0.66–0.99 × the engine's running batch on ML.ENERGY's H100 and B200 runs)",
}


def _itl(f: PublishedFigures, said: list[str]) -> tuple[float, str]:
    """τ and the figure it came from, best first: token-weighted ITL, pooled ITL, TPOT."""
    if f.itl_s is not None:
        return f.itl_s, "itl"
    if f.pooled_itl_s is not None:
        said.append(
            "τ taken as the pooled mean ITL (every chunk gap pooled; equals τ when every chunk "
            f"carries one token): {TAU_BIAS['pooled_itl']}"
        )
        return f.pooled_itl_s, "pooled_itl"
    if f.tpot_s is None and f.median_itl_s is not None:
        said.append(f"τ taken as the median ITL (no mean given): {TAU_BIAS['median_itl']}")
        return f.median_itl_s, "median_itl"
    if f.tpot_s is None:
        raise FiguresError("give the token-weighted ITL (--itl-ms) or TPOT (--tpot-ms)")
    outputs = {n for _, n in f.requests or []}
    if not f.lengths_are_means and len(outputs) <= 1:
        said.append("τ taken as TPOT: equal when every request has the same output length")
        return f.tpot_s, "tpot_fixed"
    said.append(
        "τ taken as mean TPOT (a per-request mean; τ weighs long requests more): "
        + TAU_BIAS["tpot"]
    )
    return f.tpot_s, "tpot"


def _lengths(f: PublishedFigures, said: list[str]) -> tuple[list[tuple[int, int]], float, float]:
    if f.requests:
        pairs = [(int(p), int(n)) for p, n in f.requests]
        done = [(p, n) for p, n in pairs if n > 0]
        if not done:
            raise FiguresError("the per-request lengths hold no request with output tokens")
        mean_in = sum(p for p, _ in done) / len(done)
        return pairs, mean_in, sum(n for _, n in done) / len(done)
    if f.input_tokens is None or f.output_tokens is None:
        raise FiguresError(
            "give --input-tokens and --output-tokens (the KV bytes read depend on the context)"
        )
    if f.lengths_are_means:
        said.append(
            f"lengths known only as means ({f.input_tokens:g} → {f.output_tokens:g} tokens): "
            "the KV term at fixed lengths is the lower end of its band (varying lengths read "
            "more context per token), so MBU is a lower bound"
        )
    else:
        said.append(
            f"fixed lengths: every request {f.input_tokens:g} → {f.output_tokens:g} tokens "
            "(KV read per token from that context)"
        )
    return [(round(f.input_tokens), round(f.output_tokens))], f.input_tokens, f.output_tokens


def _throughput(f: PublishedFigures, tpot_s: float, n: float, said: list[str]) -> float:
    if f.output_tokens_per_s is not None:
        return f.output_tokens_per_s
    if f.concurrency is not None:
        ttft = f.ttft_s
        if ttft is None:
            said.append(
                "TTFT not given, taken as 0: T = C·n / ((n−1)·TPOT) overstates T, B and MBU by "
                "the share TTFT/E2E"
            )
            ttft = 0.0
        e2e_s = ttft + (n - 1) * tpot_s
        said.append(
            f"closed loop at concurrency {f.concurrency:g}: T = C·n / (TTFT + (n−1)·TPOT) "
            f"= {f.concurrency:g}·{n:g} / {e2e_s:.4g} s"
        )
        return f.concurrency * n / e2e_s
    if f.request_rate_rps is not None:
        said.append("T = request rate × mean output tokens (steady state)")
        return f.request_rate_rps * n
    raise FiguresError(
        "give output tokens/s (--output-tokens-per-s), or --concurrency with TPOT, "
        "or --request-rate"
    )


def _idle(f: PublishedFigures, replicas: int, moe: bool, said: list[str]) -> float | None:
    """The measured idle share for the mixed-step headline; None where the headline is the
    seed's formula (a closed loop) or where it cannot be given (an open loop, idle unknown)."""
    if f.concurrency is not None:
        said.append(
            f"closed loop at C = {f.concurrency:g}: the batch holds at C and a replica never "
            "idles (C ≥ R), so the headline is the seed's formula; the mixed-step estimate "
            "assumes Poisson arrivals and does not apply"
            + (
                " (MoE: experts routed by prompt chunks are not counted, it reads low by "
                "their share)"
                if moe
                else ""
            )
        )
        if f.concurrency < replicas:
            said.append(f"C = {f.concurrency:g} < R = {replicas}: some replicas idle, reads high")
        return None
    if f.idle_fraction is not None:
        return f.idle_fraction
    said.append(
        "idle share unknown (open loop without per-request times): only the decode-only "
        "figure is given"
    )
    return None


def _compute(
    geometry: ModelGeometry,
    pairs: Sequence[tuple[int, int]],
    t: float,
    tau: float,
    *,
    regime: StepRegime | None,
    node: tuple[float, int, int],
) -> Mbu:
    """``compute_mbu`` over these lengths; ``node`` is (bandwidth per GPU, GPUs, replicas)."""
    context, kv_per_token = kv_read_per_output_token(geometry, pairs)
    bandwidth, gpus, replicas = node
    return compute_mbu(
        geometry,
        output_tokens_per_s=t,
        itl_token_weighted_s=tau,
        replicas=replicas,
        gpus=gpus,
        bandwidth_bytes_per_s=bandwidth,
        mean_context_per_token=context,
        kv_bytes_per_output_token=kv_per_token,
        regime=regime,
    )


def _named(mbu: Mbu, closed_loop: bool, tau_source: str, means: bool) -> Mbu:
    """The figures under the names every command uses: ``mbu`` the headline (None where the
    regime is unknown), ``mbu_decode_only`` the seed's decode-only figure (in a closed loop
    they are one figure); the flags of what the figures could not know."""
    withdrawn = mbu.flags.above_rated_bandwidth or mbu.flags.over_slot_limit
    regime_known = mbu.mbu_decode_only is not None
    headline = mbu.mbu if regime_known or closed_loop else None
    decode_only = mbu.mbu_decode_only if regime_known else mbu.mbu
    flags = mbu.flags.model_copy(
        update={
            "tau_from_pooled_itl": tau_source == "pooled_itl",
            "tau_from_tpot": tau_source == "tpot",
            "tau_from_median_itl": tau_source == "median_itl",
            "kv_lengths_from_means": means,
        }
    )
    notes = list(mbu.notes)
    if tau_source in TAU_BIAS:
        label = {
            "pooled_itl": "the pooled mean ITL",
            "tpot": "mean TPOT",
            "median_itl": "the median ITL",
        }[tau_source]
        notes.append(f"τ from {label}: {TAU_BIAS[tau_source]}")
    if means:
        notes.append("lengths known only as means: the KV term is a lower bound, so is MBU")
    return mbu.model_copy(
        update={
            "mbu": headline,
            "mbu_decode_only": None if withdrawn else decode_only,
            "flags": flags,
            "notes": notes,
        }
    )


def _upper_pairs(f: PublishedFigures) -> list[tuple[int, int]] | None:
    """The KV band's upper end: one request at the longest prompt and output (no request's
    token reads more context than L_max + n_max − 1, so the token-weighted mean is at most
    that request's)."""
    if not f.lengths_are_means or f.requests:
        return None
    if f.max_input_tokens is None or f.max_output_tokens is None:
        return None
    return [(round(f.max_input_tokens), round(f.max_output_tokens))]


def _lengths_said(f: PublishedFigures, mean_in: float, mean_out: float) -> str:
    """How the lengths behind the KV term are known, in a few words."""
    if f.requests:
        return f"per request ({len(f.requests)} requests; means {mean_in:.1f} → {mean_out:.1f})"
    if f.lengths_are_means:
        return f"means only ({mean_in:g} → {mean_out:g}, lengths vary): KV a lower bound"
    return f"fixed ({mean_in:g} → {mean_out:g} tokens, every request)"


def _regime_said(f: PublishedFigures) -> str:
    """The load regime the headline rests on, in a few words."""
    if f.concurrency is not None:
        return f"closed loop at concurrency {f.concurrency:g} (batch held, no idle)"
    if f.idle_fraction is not None:
        return f"open loop, idle share {f.idle_fraction:g} (measured)"
    return "open loop, idle share unknown (decode-only figure only)"


def mbu_from_figures(
    geometry: ModelGeometry,
    figures: PublishedFigures,
    *,
    bandwidth_bytes_per_s: float,
    gpus: int,
    replicas: int = 1,
) -> MbuEstimate:
    """MBU (headline where the regime is known, decode-only always) from reported figures."""
    f = figures
    bad = out_of_bounds(f)
    if bad is not None:
        name, value = bad
        raise FiguresError(
            f"{name} must be a finite number up to {FIGURE_BOUNDS[name]:g}, got {value:g}"
        )
    for name in ("output_tokens_per_s", "itl_s", "pooled_itl_s", "median_itl_s", "tpot_s"):
        _positive(name, getattr(f, name))
    _positive("request_rate_rps", f.request_rate_rps)
    _positive("concurrency", f.concurrency)
    said: list[str] = []
    tau, tau_source = _itl(f, said)
    pairs, mean_in, mean_out = _lengths(f, said)
    t = _throughput(f, f.tpot_s if f.tpot_s is not None else tau, mean_out, said)
    rate = f.request_rate_rps if f.request_rate_rps is not None else t / mean_out
    idle = _idle(f, replicas, geometry.is_moe, said)
    regime = None
    if idle is not None:
        regime = StepRegime(
            request_rate_rps=rate,
            mean_prompt_tokens=mean_in,
            mean_output_tokens=mean_out,
            idle_fraction=idle,
        )
    node = (bandwidth_bytes_per_s, gpus, replicas)
    means = f.lengths_are_means and not f.requests
    closed = f.concurrency is not None
    mbu = _named(
        _compute(geometry, pairs, t, tau, regime=regime, node=node), closed, tau_source, means
    )
    upper_pairs = _upper_pairs(f)
    upper = None
    if upper_pairs is not None:
        high = _named(
            _compute(geometry, upper_pairs, t, tau, regime=regime, node=node), closed, "", False
        )
        upper = high.mbu if high.mbu is not None else high.mbu_decode_only
        mbu = mbu.model_copy(update={"mbu_lengths_upper_bound": upper})
    return MbuEstimate(
        mbu=mbu,
        headline=mbu.mbu,
        decode_only=mbu.mbu_decode_only,
        output_tokens_per_s=t,
        itl_s=tau,
        request_rate_rps=rate,
        mean_input_tokens=mean_in,
        mean_output_tokens=mean_out,
        tau_source=tau_source,
        lengths=_lengths_said(f, mean_in, mean_out),
        regime=_regime_said(f),
        assumptions=said,
        mbu_lengths_upper=upper,
    )
