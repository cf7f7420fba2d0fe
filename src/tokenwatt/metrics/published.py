"""MBU from figures somebody else measured: a published table's row, a peer tool's summary.

``metrics.mbu.compute_mbu`` needs T (output tokens/s of the node), τ (token-weighted ITL), the
KV bytes each generated token reads (from prompt and output lengths) and, for the headline, the
regime (request rate, idle share). Published tables rarely give all of them: InferenceX gives
TPOT by concurrency with fixed lengths, GuideLLM and vLLM give TPOT and throughput. This module
fills each gap by one stated assumption and returns the sentence beside the figure, so the
reader knows what was taken rather than measured:

- τ from TPOT: equal when every request has the same output length (TPOT is a per-request
  mean, τ a per-token one; with mixed lengths the long requests weigh more in τ);
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

from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenwatt.errors import TokenwattError
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mixed_steps import StepRegime
from tokenwatt.result import Mbu

__all__ = ["FiguresError", "MbuEstimate", "PublishedFigures", "mbu_from_figures"]


class FiguresError(TokenwattError):
    """The figures given cannot make an MBU; the message names the missing one."""


@dataclass(frozen=True, slots=True)
class PublishedFigures:
    """What a table or a tool reported; None where it reported nothing."""

    output_tokens_per_s: float | None = None  # T, node
    itl_s: float | None = None  # τ: token-weighted mean ITL
    tpot_s: float | None = None  # mean time per output token after the first
    ttft_s: float | None = None  # mean time to first token
    concurrency: float | None = None  # closed loop: requests kept in flight
    request_rate_rps: float | None = None  # completed requests per second, node
    input_tokens: float | None = None  # mean prompt length
    output_tokens: float | None = None  # mean output length
    idle_fraction: float | None = None  # measured share of time a replica had no request
    # per request (prompt tokens, output tokens): KV bytes exactly, lengths as measured
    requests: Sequence[tuple[int, int]] | None = None


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
    assumptions: list[str] = field(default_factory=list)


def _positive(name: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise FiguresError(f"{name} must be > 0, got {value}")
    return value


def _itl(f: PublishedFigures, said: list[str]) -> float:
    if f.itl_s is not None:
        return f.itl_s
    if f.tpot_s is None:
        raise FiguresError("give the token-weighted ITL (--itl-ms) or TPOT (--tpot-ms)")
    said.append(
        "τ taken as TPOT: equal when every request has the same output length; with mixed "
        "lengths τ weighs long requests more"
    )
    return f.tpot_s


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
    for name in ("output_tokens_per_s", "itl_s", "tpot_s", "concurrency", "request_rate_rps"):
        _positive(name, getattr(f, name))
    said: list[str] = []
    tau = _itl(f, said)
    pairs, mean_in, mean_out = _lengths(f, said)
    t = _throughput(f, f.tpot_s if f.tpot_s is not None else tau, mean_out, said)
    rate = f.request_rate_rps if f.request_rate_rps is not None else t / mean_out
    context, kv_per_token = kv_read_per_output_token(geometry, pairs)
    idle = _idle(f, replicas, geometry.is_moe, said)
    regime = None
    if idle is not None:
        regime = StepRegime(
            request_rate_rps=rate,
            mean_prompt_tokens=mean_in,
            mean_output_tokens=mean_out,
            idle_fraction=idle,
        )
    mbu = compute_mbu(
        geometry,
        output_tokens_per_s=t,
        itl_token_weighted_s=tau,
        replicas=replicas,
        gpus=gpus,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        mean_context_per_token=context,
        kv_bytes_per_output_token=kv_per_token,
        regime=regime,
    )
    withdrawn = mbu.flags.above_rated_bandwidth or mbu.flags.over_slot_limit
    return MbuEstimate(
        mbu=mbu,
        headline=mbu.mbu if regime is not None or f.concurrency is not None else None,
        decode_only=None if withdrawn else (mbu.mbu_decode_only if regime else mbu.mbu),
        output_tokens_per_s=t,
        itl_s=tau,
        request_rate_rps=rate,
        mean_input_tokens=mean_in,
        mean_output_tokens=mean_out,
        assumptions=said,
    )
