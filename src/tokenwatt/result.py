"""The result of a run, ``DIR/result.json``: the measurement types themselves, versioned.

This is the base of the house: ``metrics`` returns these types (``summarize() -> Latency``),
``load`` assembles them into a ``BenchResult`` and writes it, and every view (terminal, HTML,
``compare``) is rendered from the file, never from in-memory state, so a result can be
re-rendered or compared years later. Every field is declared: unknown keys are an error at
every level (a typo must not silently vanish, and nothing is read back through extras).

Schema changelog (bump ``SCHEMA_VERSION`` and add a line for any change a reader of an
older file must know about; ``load_result`` accepts exactly the versions listed here):

    1 - (tokenwatt 0.1.0) first version: spec (redacted), geometry, accelerator, gpus,
        replicas, slo, machine, single_stream, probes[], boundary, search, interrupted,
        warnings. Sub-records accepted undeclared extra keys.
    2 - every field declared (probe: phase, seed, concurrency, warmup_s, window_start_ns,
        window_end_ns, mean_concurrency, requests_counted, requests_cancelled, interrupted;
        slo_detail: quantiles_s, trend_*; search: lo_rps, hi_rps; search step: seed,
        reason); extras forbidden; latency summaries always carry ``count``; cancelled
        requests are their own count (``requests_cancelled``), not failures; T
        (``output_tokens_per_s``) is the tokens received inside the window ÷ window.
        A version-1 file still loads (its extras are exactly the fields declared here).
        Added within 2 (defaults keep older files loading): slo.max_error_rate;
        slo_detail.error_probe, error_rate, load_generator_saturated; probe.late_sends,
        max_send_lag_s; search stop reasons "error" and "saturated"; probe.load_generator
        (sending processes, per-worker keep-up, whether the client was the bottleneck).
        (+) ``target``: what was driven, ``{kind: sim|endpoint, base_url, model, sim_mode,
        sim}`` with the simulator's settings, so a simulated result says so (None: older
        file; readers then look at ``spec.endpoint.url``).
        (additive, optional) probe: ``rate_unit`` (what ``rate_rps`` counts:
        requests, sessions or turns /s), ``sessions`` (``SessionStats``) and
        ``cached_prompt_fraction``; absent in earlier version-2 files.
        MBU (all with defaults so earlier v2 files load): ``mbu_detail.mbu``
        counts every byte the engine drew (prompt-routed experts in mixed steps, busy share)
        and ``mbu_decode_only`` is the seed's decode-only W(B)·s beside it;
        ``inputs.mixed_steps`` holds the mixed-step estimate; flags ``mixed_steps``, ``idle``,
        ``over_slot_limit``, ``small_batch``, ``routing_skew`` and ``above_rated_bandwidth``
        (MBU over 100 %: no figure, the note names the likely wrong input).
        (additive, optional) ``mbu_detail.inputs.speculation``
        (``MbuSpeculation``: s and B from steps, acceptance length, drafter bytes) and flags
        ``speculative_steps``, ``drafter_bytes_unknown``, ``coalesced_chunks``; probe
        ``steps`` (``StepSummary``: ITL per chunk and per token, steps/s, acceptance length).
        (additive, optional) MBU without a measured expert load is a band:
        ``mbu_lower_bound``, ``mbu_decode_only_lower_bound`` and ``routing_reference`` (the
        skew of the lower bound); flags ``routing_unmeasured``, ``prefill_only`` and
        ``kv_pressure`` (each with its note).
        Additive, same version: probe ``engine`` (``EngineFigures``: the engine's own
        /metrics over the window, client-vs-engine ``agreements``, the engine-side MBU) and
        ``engine_series_file``; absent in older files (None).
        Typed, same JSON: ``spec`` is read as a ``BenchSpec``, ``geometry`` as a
        ``ModelGeometry``, ``accelerator`` as an ``Accelerator`` and ``target`` as a
        ``RunTarget``, so a bad copy is refused at load in one line; version 1's
        ``geometry.kv_bytes_per_token`` is written back as ``kv_bytes_per_token_full_context``
        and a version-1 spec without ``endpoint``/``hardware`` gets the simulator and the
        file's own accelerator, gpus and replicas (version 1's defaults).
        Additive, same version: ``target.kind`` may be ``imported`` (a result
        read from another tool's file by ``tokenwatt import``), with ``source_tool``,
        ``source_tool_version``, ``source_format`` and ``source_file``; absent before (None).
        (additive, optional) energy: ``input_tokens``, ``joules_per_total_token``
        and ``audit`` (per source: method, achieved period, devices, validity checks,
        busy/idle and prefill/decode energy); probe ``cost`` ($/Mtok from
        ``hardware.price_per_gpu_hour`` and ``price_per_kwh``). Sweeps write their own
        ``sweep.json`` (``tokenwatt.sweep_result``).
        Additive, same version: ``slo_detail.load_generator_failed`` (a
        sending worker died: its requests are ``worker_lost``, the probe has no SLO verdict);
        ``load_generator.per_worker[].clock_drift_ppm`` and ``clock_samples`` (a Ray actor's
        offset re-measured during the probe).
        (additive, default 0) probe ``stray_answers``: answers the server wrote
        that no request was waiting for, or a stale one refused; flag ``stray_answers``.
        (additive, optional) slo_detail ``judged``, ``misses`` (requests over each
        limit) and ``sequential`` (the sequential test's decision); the boundary probe's
        ``boundary_rate_rps``, ``rate_interval_rps``, ``goodput_tokens_per_s_at_boundary``,
        ``goodput_interval_tokens_per_s`` and ``confidence`` (the fitted boundary with its
        interval); search phases ``fit`` and ``check``, stop reason ``changed``, ``drift``
        (the confirmation and re-test after the search) and ``start`` (how the first rate
        was found).
    3 - one file per run and one word per figure. ``tokenwatt probe`` writes
        ``result.json`` only (no ``probe.json``): what only it held is typed here, probe
        ``run`` (``ProbeDetail``: arrival, prompt format, the window's ends and drain, the
        counts and chunk figures the summary lacks, the client's clock and connections) and
        ``mbu_unavailable``; ``geometry`` and ``accelerator`` may be None (a remote endpoint
        whose config.json could not be read: no MBU). Rates: ``rate_rps`` is the offered
        rate, ``counted_rate_rps`` the requests counted in the window ÷ window (version 2
        called it ``achieved_rate_rps``) and ``achieved_rate_rps`` is now the successes ÷
        window (a version-2 file's value moves to ``counted_rate_rps`` and achieved is
        recomputed from ``requests_ok`` ÷ ``window_s``). ``MbuInputs.kv_bytes_per_token`` is
        ``kv_bytes_per_token_full_context`` (full-attention and MLA layers only) and
        ``headline_bytes_per_s`` holds the headline's own numerator (``bytes_per_s`` is the
        seed's decode-only one; the engine table sets ``EngineFigures.mbu`` beside
        ``bytes_per_s`` ÷ ``node_bandwidth_bytes_per_s``, the same literal formula). Versions
        1 and 2 still load, and a folder holding only an old ``probe.json`` loads as a
        one-probe result. Added beside: probe ``steps.tokens`` (all tokens of the stepped
        requests, first chunks included: what MBU from steps divides by) and
        ``load_generator.per_worker[].exit_code`` (a worker process's exit status; the
        sender returns this type directly).
        (optional) probe ``intervals`` (``FigureIntervals``): T, τ, the
        p99s of TTFT and TPOT, goodput, MBU (headline and decode-only) and tokens per joule
        as ``[low, high]`` at ``confidence`` (batch means over time blocks of the window,
        ``metrics.intervals``), and ``mbu_window_for_1pt_s``; absent in older files (None).
        (optional) ``mbu_detail.inputs.mixed_steps.decode_step_s`` and
        ``decode_steps_per_s``: the decode steps counted once from the token gaps (weight
        1/batch; ``metrics.mbu.step_gaps``), whose count and batch law the headline's weight terms
        now use; None where the byte law was used (no token times).
        (optional) ``slo_detail.medians_s``: nearest-rank medians of TTFT
        and TPOT over the judged requests (a failed one as +inf; None: over half failed),
        the latency level the drift checks compare; ``search.drift`` lines now read by it.
        (additive, default 0) probe ``run.clock.realtime_steps``: steps of the realtime
        clock the client saw (a kernel stamp after its read or before its send) and corrected.
        (optional) ``slo_detail.in_flight_misses``: requests still in flight
        at an early stop whose first token was already past the TTFT limit, per limit, where
        the sequential test counted them (``metrics.sequential``); None in older files and
        where the decision read finished requests only.
        (optional) probe ``fit_role``: whether it joined the boundary fit, and why not;
        the boundary probe's ``safe_rate_rps`` and
        ``goodput_tokens_per_s_at_safe_rate`` (the reported interval's low end, goodput
        scaled there); ``search.unclosed`` (which end of the boundary's interval the search
        did not establish, and why) and ``search.max_time_s``; stop reason ``max_time``.
        None in older files.
        (optional) the boundary probe's ``safe_rate_flag`` (``SafeRateFlag``): a drift
        check at or below the search's safe rate failed the SLO; ``safe_rate_rps`` and its
        goodput are then the corrected ones (None: withdrawn). None in older files and where
        no check contradicted it.
        (optional) the boundary probe's ``boundary_rate_leans``: "high" where a point was
        fitted, the direction it may be wrong in (short windows read the boundary high);
        ``search.low_end_min_below``, the two-sided low end's distance below the point (farther
        for short outputs). None in older files.

Units are in the names: ``_s`` seconds, ``_rps`` requests/s, ``_w`` watts, ``_j`` joules,
``_bytes`` bytes. Fractions (MBU, attainment) are in [0, 1], never percent.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tokenwatt.bounded import (
    MAX_MAGNITUDE,
    RESULT_MAX_BYTES,
    RESULT_WHOLE_MAX_BYTES,
    load_document,
    stream_indented_array,
)
from tokenwatt.clock import ClientClock
from tokenwatt.errors import ReportError
from tokenwatt.geometry.model import ModelGeometry, upgrade_geometry_dict
from tokenwatt.hardware import Accelerator
from tokenwatt.result_probe_json import PROBE_JSON, probe_json_to_result
from tokenwatt.simsettings import SimSettings
from tokenwatt.spec import BenchSpec, redact
from tokenwatt.spec.slo import SLO

__all__ = [
    "MBU_FIGURES",
    "RESULT_FILE",
    "SCHEMA_VERSION",
    "SUPPORTED_VERSIONS",
    "AgentFigures",
    "BenchResult",
    "ClientClock",
    "ContextTtft",
    "CostFigures",
    "EnergyAudit",
    "EnergyCheck",
    "EnergySummary",
    "EngineAgreement",
    "EngineFigures",
    "FigureIntervals",
    "Latency",
    "LoadGenerator",
    "MachineInfo",
    "Mbu",
    "MbuFigure",
    "MbuFlags",
    "MbuInputs",
    "MbuMixedSteps",
    "ProbeDetail",
    "ProbeSummary",
    "RunTarget",
    "SafeRateFlag",
    "ScopeEnergy",
    "SearchStep",
    "SearchSummary",
    "SessionStats",
    "SloDetail",
    "SloSettings",
    "WorkerKeepUp",
    "figure_problem",
    "load_result",
    "probe_figure_problem",
    "probes_left_out",
    "result_path",
    "write_result",
]

SCHEMA_VERSION = 3
SUPPORTED_VERSIONS: frozenset[int] = frozenset({1, 2, 3})
RESULT_FILE = "result.json"
PROBES_KEPT = 64  # probes a streamed (over 16 MiB) result keeps for the views


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Latency(_Strict):
    """Count, mean, interpolated percentiles and max of one per-request or per-gap quantity,
    in the unit of its key (None: no samples). ``metrics.stats.summarize`` returns it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(0, description="samples the summary rests on")
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


class GradedAccuracy(_Strict):
    """A probe's graded answers (``graded:``): how many were judged, how many right, and the
    accuracy with its Wilson score interval. ``metrics.accuracy.probe_accuracy`` returns it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    graded: int = Field(description="graded requests whose answers were judged (stream ok)")
    right: int = Field(description="of those, answers judged right")
    unjudged: int = Field(0, description="graded requests that failed before an answer")
    accuracy: float | None = Field(description="right ÷ graded (None: none judged)")
    accuracy_low: float | None = Field(description="Wilson interval, lower end")
    accuracy_high: float | None = Field(description="Wilson interval, upper end")
    confidence: float = Field(0.95, description="the interval's confidence level")
    by_task: dict[str, tuple[int, int]] = Field(
        default_factory=dict, description="task kind → (right, graded)"
    )


class MbuMixedSteps(_Strict):
    """The mixed prefill/decode estimate per replica (``metrics.mbu.mixed_steps``), so that the
    headline MBU can be redone by hand."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_counted: float = Field(description="B·(1 − 1/n̄) from T·τ/R of the counted requests")
    batch_decode: float = Field(description="B_dec from decode intervals (else batch_counted)")
    busy_fraction: float = Field(description="1 − φ: share of the window a replica was busy")
    batch_busy: float = Field(description="B_busy: decode batch per busy step")
    prompts_per_step: float = Field(description="m: prompts admitted per decode step")
    uncached_prompt_tokens: float = Field(description="L: uncached prompt tokens per request")
    mixed_step_fraction: float = Field(description="f: share of steps carrying prompt tokens")
    prompt_tokens_per_mixed_step: float
    distinct_experts_decode_only: float | None = None
    distinct_experts_mixed_step: float | None = None
    weight_bytes_decode_only: float = Field(description="W_dec per decode-only step")
    weight_bytes_mixed_step: float = Field(description="per step that carries prompt tokens")
    weight_bytes_mean_step: float = Field(description="W̄: what an average decode step reads")
    weight_bytes_per_s: float = Field(description="R · s · (1 − φ) · W̄; counted: R · n_s · W̄")
    decode_only_weight_bytes_per_s: float = Field(
        description="R · s · (1 − φ) · W_dec; counted: R · n_s · W_dec"
    )
    routing: str = Field(description='"uniform" or the expert-load source')
    over_slot_limit: bool = Field(description="B_dec above the engine's slot limit")
    decode_step_s: float | None = Field(
        None,
        description="the mean decode step, each step counted once from the token gaps "
        "(weight 1/batch); None: s from τ through the byte law (no token times)",
    )
    decode_steps_per_s: float | None = Field(
        None,
        description="decode steps per elapsed second per replica, counted from the token gaps "
        "(Σ k/b ÷ window ÷ R): the weight terms are R × it × the steps' mean W̄; None: the "
        "byte law",
    )


class MbuSpeculation(_Strict):
    """Speculative decoding as MBU counted it (``metrics.mbu.spec_mbu``): s and B from the
    client's steps (one chunk per verify step), the target's bytes for k + 1 positions and
    the drafter's bytes, with the assumption behind them named."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["declared", "detected"] = Field(
        description="declared in the spec, or detected from varying tokens per chunk"
    )
    method: Literal["draft", "eagle", "eagle3", "mtp", "ngram", "unknown"] = Field(
        description="the drafter"
    )
    num_tokens: int = Field(description="k: tokens proposed per step (detected: max chunk − 1)")
    acceptance_length: float = Field(description="α: decode tokens ÷ decode steps")
    itl_chunk_s: float = Field(description="ITL per chunk: decode time ÷ decode steps")
    decode_steps_per_s: float = Field(description="node: T × decode steps ÷ tokens")
    target_weight_bytes_per_step: float = Field(description="W(B·(k + 1)): the verify pass")
    draft_weight_bytes_per_step: float = Field(description="the drafter's weights, k passes")
    draft_kv_bytes_per_s: float = Field(0.0, description="a draft model's own KV reads")
    prompts_per_step: float = Field(0.0, description="m: prompts riding along a verify step")
    routing: str = Field(
        "uniform",
        description="the expert load the verify pass's distinct experts were counted under: "
        "uniform, or the measured load's source",
    )
    assumption: str = Field(description="how the drafter's bytes were counted")


class MbuInputs(_Strict):
    """Every input of MBU = (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth per GPU).

    The quantities that only exist when decode was measured (s, B, W(B), …) are None
    otherwise. ``bytes_per_s`` is the seed's literal numerator; the headline counts more
    (``headline_bytes_per_s``), so the headline is redone as that ÷ the node's bandwidth.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    output_tokens_per_s: float = Field(description="T: output tokens/s for the node")
    itl_token_weighted_s: float = Field(description="τ: token-weighted mean inter-token latency")
    replicas: int = Field(description="R: data-parallel engine replicas")
    gpus: int = Field(description="N_GPU")
    bandwidth_bytes_per_s_per_gpu: float = Field(description="rated memory bandwidth per GPU")
    steps_per_s_per_replica: float | None = Field(None, description="s = 1/τ")
    batch_per_replica: float | None = Field(None, description="B = T·τ/R")
    experts: int = Field(0, description="E per MoE layer (0: dense)")
    moe_layers: int = 0
    expected_distinct_experts: float | None = Field(
        None, description="E·(1−(1−k/E)^B) per MoE layer, uniform routing"
    )
    dense_weight_bytes: float | None = None
    expert_bytes: float | None = None
    weight_bytes_per_step: float | None = Field(None, description="W(B)")
    weight_bytes_per_s: float | None = Field(None, description="R·s·W(B)")
    mean_context_per_token: float | None = None
    kv_bytes_per_token_full_context: float | None = Field(
        None,
        validation_alias=AliasChoices("kv_bytes_per_token_full_context", "kv_bytes_per_token"),
        description="per cached token, the layers whose cache grows with the whole context "
        "(full attention, MLA) only; windowed layers read less (kv_bytes_per_output_token)",
    )
    kv_bytes_per_output_token: float | None = Field(
        None, description="exact per layer kind (MLA, sliding windows)"
    )
    kv_bytes_per_s: float | None = Field(None, description="KV/s = T × KV bytes per output token")
    bytes_per_s: float | None = Field(
        None, description="the seed's decode-only numerator R·s·W(B) + KV/s (not the headline's)"
    )
    headline_bytes_per_s: float | None = Field(
        None,
        description="the headline's numerator: mbu = headline_bytes_per_s ÷ "
        "node_bandwidth_bytes_per_s (mixed steps, busy share, drafter bytes counted)",
    )
    node_bandwidth_bytes_per_s: float = Field(description="N_GPU × rated bandwidth")
    estimated_idle_fraction: float | None = Field(None, description="e^(−B)")
    mixed_steps: MbuMixedSteps | None = Field(
        None, description="the measured regime's mixed-step estimate (None: seed formula only)"
    )
    speculation: MbuSpeculation | None = Field(
        None, description="speculative decoding: s and B from steps (None: not detected)"
    )


class MbuFlags(_Strict):
    """Where MBU's assumptions bend. True means "read the figure with this in mind"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    multi_token_chunks: bool = Field(
        False, description="several tokens per chunk: s = 1/τ overstates steps/s"
    )
    moe_uniform_routing_upper_bound: bool = Field(
        False, description="small batch: uniform routing overstates W(B)"
    )
    low_load_busy_bias: bool = Field(
        False, description="replicas idle part of the time: the weight term is per busy time"
    )
    no_decode: bool = Field(False, description="T or τ not measured: MBU undefined")
    # From the measured regime; each comes with a note (Mbu.notes) stating direction and size.
    mixed_steps: bool = Field(False, description="a visible share of steps carry prompt chunks")
    idle: bool = Field(False, description="replicas measurably idle: weights scaled by busy share")
    over_slot_limit: bool = Field(
        False, description="B above the engine's slot limit: window not steady, no MBU"
    )
    small_batch: bool = Field(False, description="B below SMALL_BATCH: outside ±2 pt validation")
    routing_skew: bool = Field(
        False, description="measured expert load: uniform routing would read visibly differently"
    )
    prefill_only: bool = Field(
        False,
        description="prompts ran alone (no decode in flight) a visible share of the window, "
        "measured and taken out of the decode-busy time (the single stream)",
    )
    kv_pressure: bool = Field(
        False,
        description="preemption seen (streams stalled while others decoded, or the engine's "
        "counter): τ and B corrected for the stalls; uncorrected they read high",
    )
    routing_unmeasured: bool = Field(
        False,
        description="MoE routing not measured: MBU is the uniform upper bound and the band "
        "down to the fewest experts any routing reads is wider than 1 pt",
    )
    above_rated_bandwidth: bool = Field(
        False,
        description="derived MBU over 100 % (beyond the noise margin): an input is wrong, no MBU",
    )
    speculative_steps: bool = Field(
        False, description="speculative decoding: s, B and W from steps and the drafter's bytes"
    )
    drafter_bytes_unknown: bool = Field(
        False, description="speculation detected, drafter unknown: its bytes left out, reads low"
    )
    coalesced_chunks: bool = Field(
        False, description="chunks carry several steps: steps not measurable from the client"
    )
    tau_from_pooled_itl: bool = Field(
        False, description="τ taken as a summary's pooled mean ITL: B and MBU read slightly high"
    )
    tau_from_tpot: bool = Field(
        False, description="τ taken as a summary's mean TPOT: B and MBU read high"
    )
    tau_from_median_itl: bool = Field(
        False, description="τ taken as a published median ITL (no mean): B and MBU read low"
    )
    kv_lengths_from_means: bool = Field(
        False,
        description="lengths known only as means: the KV term at fixed lengths is the lower "
        "end of its band, MBU a lower bound",
    )

    def notes(self) -> list[str]:
        """One line per raised flag, for people."""
        out = []
        if self.no_decode:
            out.append("no decode measured (T or τ missing): MBU undefined")
        if self.multi_token_chunks:
            out.append(
                "several tokens per chunk (speculative decoding or coalescing): one engine step "
                "is not one token per sequence, so s = 1/τ and MBU are overstated"
            )
        if self.moe_uniform_routing_upper_bound:
            out.append(
                "small MoE batch: uniform routing is an upper bound on distinct experts; "
                "skewed routing reads fewer, so MBU reads high"
            )
        if self.speculative_steps:
            out.append(
                "speculative decoding: s and B counted from steps (one chunk per verify step), "
                "W from the target's k + 1 positions plus the drafter's bytes (see "
                "inputs.speculation.assumption)"
            )
        if self.drafter_bytes_unknown:
            out.append(
                "speculation detected but the drafter is not declared (engine.drafter): its "
                "bytes are left out, so MBU reads low"
            )
        if self.coalesced_chunks:
            out.append(
                "chunks carry several engine steps (equal multi-token chunks, or more than "
                "k + 1 tokens): steps are not measurable from the client; read the engine's "
                "counters"
            )
        if self.low_load_busy_bias:
            out.append(
                "low load: replicas idle part of the window; the weight term counts busy time, "
                "so MBU exceeds bytes ÷ (elapsed × bandwidth)"
            )
        return out


@dataclass(frozen=True, slots=True)
class MbuFigure:
    """One printed MBU figure: where it lives, the one word every view prints for it, and its
    one definition (the field docs here, docs/methodology.md "The printed MBU figures" and
    docs/howto/glossary.md say it word for word; tests/test_one_word.py holds them to it)."""

    name: str  # where it lives: a field or property of ``Mbu``, or ``EngineFigures.mbu``
    label: str  # the word every view prints
    definition: str


MBU_HEADLINE = MbuFigure(
    "Mbu.mbu",
    "MBU",
    "every byte the decode steps read (the weights their decode and prompt tokens route to, "
    "and the KV cache) per elapsed second ÷ (N_GPU × rated bandwidth per GPU)",
)
MBU_DECODE_ONLY = MbuFigure(
    "Mbu.mbu_decode_only",
    "decode-only MBU",
    "the same decode steps charged only the weights their decode tokens route to, and the KV "
    "cache, per elapsed second ÷ (N_GPU × rated bandwidth per GPU): MBU less the experts that "
    "prompt chunks riding in those steps route to",
)
MBU_SEED = MbuFigure(
    "Mbu.seed_mbu",
    "seed-formula MBU",
    "the seed's formula as written, (R·s·W(B) + KV/s) ÷ (N_GPU × rated bandwidth per GPU) with "
    "s = 1/τ, B = T·τ/R and uniform routing, on the client's T and τ",
)
MBU_ENGINE = MbuFigure(
    "EngineFigures.mbu",
    "engine MBU",
    "the seed's formula on the engine's own counters: (R·s·W(B) + KV/s) ÷ (N_GPU × rated "
    "bandwidth per GPU) with B and s from its running sequences and its steps",
)
MBU_FIGURES = (MBU_HEADLINE, MBU_DECODE_ONLY, MBU_SEED, MBU_ENGINE)


class Mbu(_Strict):
    """MBU, its split (``mbu = mbu_weights + mbu_kv``), every input and where it bends.
    ``metrics.mbu.compute_mbu`` returns it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mbu: float | None = Field(description=MBU_HEADLINE.definition)
    mbu_weights: float | None
    mbu_kv: float | None
    inputs: MbuInputs
    mbu_decode_only: float | None = Field(
        None, description=MBU_DECODE_ONLY.definition + "; None without a measured regime"
    )
    mbu_lower_bound: float | None = Field(
        None,
        description="routing not measured: MBU at the fewest experts any routing reads "
        "(``mbu`` is the uniform value, the upper bound); None for dense models or a measured "
        "expert load",
    )
    mbu_decode_only_lower_bound: float | None = Field(
        None, description="the decode-only figure at the fewest experts any routing reads"
    )
    routing_reference: str | None = Field(
        None, description='the lower bound\'s skew, e.g. "zipf:1.2"'
    )
    mbu_lengths_upper_bound: float | None = Field(
        None,
        description="lengths known only as means: MBU at the file's longest prompt and output "
        "(the KV band's upper end; ``mbu`` is its lower end); None where no maxima are known",
    )
    flags: MbuFlags = Field(default_factory=MbuFlags)
    notes: list[str] = Field(default_factory=list, description="one line per raised flag")

    @property
    def seed_mbu(self) -> float | None:
        """``MBU_SEED``, from ``inputs`` (None: no decode, or s and B counted from speculative
        steps): the formula the engine's own MBU uses, so the two compare like with like."""
        i = self.inputs
        if i.bytes_per_s is None or i.speculation is not None:
            return None
        return i.bytes_per_s / i.node_bandwidth_bytes_per_s


class ScopeEnergy(_Strict):
    """One scope's energy over the window (``tokenwatt.metrics.energy.scope_efficiency``)."""

    scope: str
    source: str
    kind: str | None = None
    measured: bool = True
    modelled: bool = False
    energy_j: float | None = None
    mean_power_w: float | None = None
    output_tokens: int | None = None
    window_s: float | None = None
    tokens_per_joule: float | None = None
    joules_per_output_token: float | None = None
    flags: list[str] = Field(default_factory=list)
    valid: bool = True


class EnergyCheck(_Strict):
    """One validity check of one power source over a window (``power.audit``)."""

    name: str = Field(description="enough_samples, monotone_counter, no_gaps, idle_floor, ceiling")
    passed: bool | None = Field(description="None: the source cannot be checked this way")
    detail: str = ""


class EnergyAudit(_Strict):
    """How one power source measured one scope over a window, and whether to trust it.

    Two public figures for the same model, GPUs and load differed by 1.47× through method
    alone (energy counter or sampled power, the window, GPUs only or the node): this record
    is the figure's error bar (``power.audit``; docs/methodology.md *Energy you can audit*).
    """

    source: str
    scope: str
    method: Literal["energy_counter", "sampled_power", "modelled"]
    gpus_only: bool = Field(description="the scope is the accelerators alone (gpu, memory)")
    devices: list[str] = Field(default_factory=list)
    window_s: float
    samples_in_window: int = Field(description="readings inside the window (distinct values)")
    expected_period_s: float = Field(description="the source's stated refresh period")
    achieved_period_s: float | None = Field(
        None, description="median gap between value changes seen; None: under two changes"
    )
    min_power_w: float | None = Field(None, description="lowest per-device power seen")
    max_power_w: float | None = Field(None, description="highest per-device power seen")
    tdp_w: float | None = Field(None, description="the catalog's board power per device")
    checks: list[EnergyCheck] = Field(default_factory=list)
    valid: bool
    verdict: str = Field(description="'valid', or the failed checks in one line")
    busy_s: float | None = Field(None, description="window time with a request in flight")
    idle_s: float | None = None
    busy_energy_j: float | None = None
    idle_energy_j: float | None = None
    prefill_s: float | None = Field(None, description="time some request awaited its first token")
    decode_s: float | None = Field(None, description="busy time with every request decoding")
    prefill_energy_j: float | None = None
    decode_energy_j: float | None = None
    split_note: str | None = Field(None, description="why a split is absent (resolution)")


class CostFigures(_Strict):
    """Cost per million output tokens at a probe's goodput (``metrics.cost``).

    usd_per_mtok_gpu    = price_per_gpu_hour × gpus ÷ (goodput × 3600) × 10⁶
    usd_per_mtok_energy = joules_per_output_token × 10⁶ ÷ 3.6·10⁶ J/kWh × price_per_kwh
    usd_per_mtok        = their sum (rental alone without a kWh price)

    "usd" names the spec's currency; the price is whatever the spec states.
    """

    price_per_gpu_hour: float
    gpus: int
    goodput_output_tokens_per_s: float
    usd_per_mtok_gpu: float | None = Field(None, description="None: no goodput")
    price_per_kwh: float | None = None
    usd_per_mtok_energy: float | None = Field(None, description="None: no kWh price or energy")
    usd_per_mtok: float | None = None


_HEADLINE_KEYS = (
    "energy_j",
    "mean_power_w",
    "joules_per_output_token",
    "tokens_per_joule",
    "source",
    "scope",
    "modelled",
    "measured",
    "window_s",
    "flags",
)


class EnergySummary(_Strict):
    """Energy over exactly a probe's measurement window.

    ``metrics.energy.energy_metrics`` returns it. The flat fields describe the headline scope;
    a dict with only ``primary_scope`` + ``scopes`` has them filled from the primary scope; the
    per-scope figures stay under ``scopes``.
    """

    energy_j: float | None = None
    mean_power_w: float | None = None
    joules_per_output_token: float | None = None
    tokens_per_joule: float | None = None
    source: str = Field("none", description="nvml, amdsmi, prometheus, redfish, rapl, constant")
    scope: str = Field("none", description="gpu, module, memory, cpu, dram, node or wall")
    modelled: bool = Field(False, description="true for the constant source: not a measurement")
    measured: bool | None = None
    window_s: float | None = None
    flags: list[str] = Field(default_factory=list, description="e.g. window_short, gap")
    primary_scope: str | None = None
    scopes: dict[str, ScopeEnergy] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    output_tokens: int | None = Field(None, description="tokens the energy is divided by")
    kind: str | None = Field(None, description="the headline source's kind, e.g. energy_counter")
    valid: bool = Field(True, description="false: the headline scope's energy is unusable")
    input_tokens: int | None = Field(
        None, description="prompt tokens whose prefill ended in the window (first token inside)"
    )
    joules_per_total_token: float | None = Field(
        None, description="energy ÷ (output + input tokens of the window), headline scope"
    )
    audit: list[EnergyAudit] = Field(
        default_factory=list, description="per source and scope: method, checks, busy/idle split"
    )

    @property
    def primary(self) -> ScopeEnergy | None:
        """The headline scope's figures, when the per-scope figures are kept."""
        return self.scopes.get(self.primary_scope) if self.primary_scope else None

    @property
    def is_modelled(self) -> bool:
        """Not a measurement: the constant source, or flagged as modelled or unmeasured."""
        return self.modelled or self.measured is False or self.source == "constant"

    @model_validator(mode="before")
    @classmethod
    def _from_primary_scope(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        scopes = data.get("scopes")
        primary = data.get("primary_scope")
        if isinstance(scopes, dict) and primary in scopes and isinstance(scopes[primary], dict):
            head = scopes[primary]
            data = {**{k: head[k] for k in _HEADLINE_KEYS if k in head}, **data}
            for k in _HEADLINE_KEYS:
                if data.get(k) is None and head.get(k) is not None:
                    data[k] = head[k]
        return data


class ContextTtft(_Strict):
    """TTFT of the counted, answered requests whose context (prompt tokens the client sent)
    lies in [min_tokens, max_tokens) (``metrics.agent``)."""

    min_tokens: int
    max_tokens: int | None = Field(description="None: no upper end")
    requests: int
    ttft_mean_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None


class AgentFigures(_Strict):
    """A probe over agent conversations (``metrics.agent``): the sessions it held and its TTFT
    by context length. On a bench's boundary probe, ``concurrent_sessions`` is the sessions at
    the SLO."""

    concurrent_sessions: float | None = Field(
        description="time-weighted mean conversations in flight over the window (first "
        "request's send to last answer's end, tool gaps included)"
    )
    sessions_per_gpu: float | None = None
    sessions_per_kw: float | None = Field(None, description="÷ mean power in kW (measured)")
    sessions_per_usd_per_hour: float | None = Field(
        None, description="÷ (hardware.price_per_gpu_hour × gpus)"
    )
    ttft_by_context: list[ContextTtft] = Field(default_factory=list)


class SessionStats(_Strict):
    """Per-session figures of a conversation probe. A session belongs to the probe's window
    when its first turn was scheduled in it; its later turns count wherever they fall (they
    were due by the conversation, not by the window)."""

    sessions_started: int = Field(description="sessions whose first turn was in the window")
    sessions_completed: int = Field(description="of those, sessions with every turn answered")
    turns_per_session_mean: float | None = Field(
        description="answered turns per started session (cut sessions included)"
    )
    ttft_first_turn_mean_s: float | None = Field(
        description="mean TTFT of counted first turns (no history: system prompt + message)"
    )
    ttft_later_turns_mean_s: float | None = Field(
        description="mean TTFT of counted later turns (history resent; a prefix cache helps)"
    )


class WorkerKeepUp(_Strict):
    """One sending process's keep-up over a probe (``send.figures.worker_stats``)."""

    worker: int
    core: int | None = Field(None, description="the core it was pinned to")
    dealt: int = Field(description="requests dealt to it")
    lost: int = Field(0, description="of those, never reported: failures (worker_lost)")
    send_lateness_p50_s: float | None = None
    send_lateness_p99_s: float | None = None
    busy_fraction: float | None = Field(None, description="its CPU time ÷ wall time")
    coalesced_reads: int = Field(0, description="reads that returned more than one event")
    events: int = 0
    exact_share: float | None = Field(None, description="events alone in their read")
    cause: str | None = Field(None, description="why it ended early, if it did")
    exit_code: int | None = Field(
        None, description="its process's exit status (None: still running, or a Ray actor)"
    )
    node_id: str | None = Field(None, description="a Ray actor's node (None: a local process)")
    clock_offset_ns: int | None = Field(
        None,
        description="a Ray actor's monotonic clock minus the coordinator's, ns (the sample "
        "with the shortest round trip)",
    )
    clock_uncertainty_ns: int | None = Field(
        None,
        description="± of clock_offset_ns: the worst exchange's half round trip plus what "
        "interpolating between the samples misses, ns",
    )
    clock_drift_ppm: float | None = Field(
        None, description="how fast that offset moved over the probe, µs per s (ppm)"
    )
    clock_samples: int | None = Field(
        None, description="offset measurements: before, every second during, after"
    )


class LoadGenerator(_Strict):
    """Who sent a probe's load and whether it kept up (docs: "Workers and clocks")."""

    workers: int = Field(1, description="sending processes (1: the benchmark's own)")
    bottleneck: bool = Field(
        False, description="the client, not the server, limited the load: no verdict on it"
    )
    problems: list[str] = Field(default_factory=list, description="failed keep-up checks")
    per_worker: list[WorkerKeepUp] = Field(default_factory=list)


class SloDetail(_Strict):
    """Why a probe passed or failed its SLO."""

    kind: Literal["percentile", "attainment"] = "percentile"
    failed: list[str] = Field(
        default_factory=list,
        description="limits that failed, e.g. ttft_p99, tpot_p99, e2e_p99, attainment, "
        "trend, errors",
    )
    trend_rising: bool = Field(False, description="queue or TTFT grew across the window")
    early_stopped: bool = Field(False, description="the probe stopped early, clearly failing")
    reason: str | None = Field(None, description="one line a person can read")
    quantiles_s: dict[str, float | None] = Field(
        default_factory=dict,
        description="nearest-rank quantile per limit, e.g. ttft_p99 (None: failed requests)",
    )
    medians_s: dict[str, float | None] = Field(
        default_factory=dict,
        description="nearest-rank median of ttft and tpot over the judged requests, a failed "
        "one as +inf (None: over half failed); the drift checks' latency level",
    )
    trend_first_third_ttft_s: float | None = Field(None, description="median TTFT, first third")
    trend_last_third_ttft_s: float | None = Field(None, description="median TTFT, last third")
    trend_rise_s: float | None = Field(None, description="Theil–Sen slope × span of send times")
    trend_rank_correlation: float | None = Field(None, description="Spearman, TTFT vs send time")
    error_probe: bool = Field(
        False, description="endpoint errors over slo.max_error_rate: broken, not slow"
    )
    error_rate: float | None = Field(
        None, description="connect/reset/http_status/stream_error/truncated/protocol ÷ judged"
    )
    load_generator_saturated: bool = Field(
        False, description="the sender fell behind its schedule: the load was not offered"
    )
    load_generator_failed: bool = Field(
        False,
        description="a sending worker (process, Ray actor or node) died: no SLO verdict",
    )
    judged: int | None = Field(None, description="requests the verdict judged (not cancelled)")
    misses: dict[str, int] = Field(
        default_factory=dict, description="judged requests over each limit, e.g. ttft_p99"
    )
    sequential: Literal["pass", "fail"] | None = Field(
        None, description="the sequential test's decision (None: undecided or not run)"
    )
    in_flight_misses: dict[str, int] | None = Field(
        None,
        description="known misses among requests in flight that the early stop counted, per "
        "limit (first token already past the TTFT limit); those requests end cancelled",
    )


class EngineAgreement(_Strict):
    """One figure (T, B or s) on both sides; ``ok`` None where the engine does not count it."""

    figure: str = Field(
        description="T (node tokens/s), B (batch per replica), s (steps/s), alpha (acceptance "
        "length, speculative decoding)"
    )
    client: float
    engine: float | None
    rel_diff: float | None = Field(None, description="(client − engine) ÷ engine")
    tolerance: float = Field(description="|rel_diff| allowed, engine.AGREEMENT_TOLERANCES")
    ok: bool | None = None
    cause: str | None = Field(None, description="the likely cause of a disagreement")


class EngineFigures(_Strict):
    """What the engine's own /metrics counted over a probe's window (``tokenwatt.engine``).

    Why in the result: the client's B and s are inferred from timing; the engine is a second
    witness, and the reader must see both. ``unavailable`` says why there are none.
    """

    engine: str | None = Field(None, description="vllm, sglang, tgi, llamacpp, trtllm")
    url: str = ""
    unavailable: str | None = Field(None, description="why no engine figures (one line)")
    duration_s: float = 0.0
    scrapes: int = 0
    requests_finished: float | None = None
    prompt_tokens: float | None = None
    generated_tokens: float | None = None
    generated_tokens_per_s: float | None = Field(None, description="the engine's T")
    decode_steps: float | None = Field(None, description="engine steps, where counted")
    decode_steps_per_s: float | None = None
    preemptions: float | None = None
    busy_slots_per_decode: float | None = Field(None, description="llama.cpp only")
    running_mean: float | None = Field(None, description="time-weighted mean running requests")
    running_sem: float | None = Field(
        None, description="standard error of running_mean: sd of the scraped levels ÷ √scrapes"
    )
    waiting_mean: float | None = Field(None, description="time-weighted mean waiting requests")
    kv_usage_mean: float | None = Field(None, description="KV-cache usage fraction, mean")
    kv_usage_max: float | None = None
    missing: list[str] = Field(default_factory=list, description="figures the engine lacks")
    spec_drafts: float | None = Field(None, description="speculative decoding: drafts verified")
    spec_accepted_tokens: float | None = Field(None, description="accepted draft tokens")
    acceptance_length: float | None = Field(None, description="1 + accepted ÷ drafts")
    prefix_cache_queries: float | None = Field(
        None, description="prompt tokens looked up in the prefix cache (vLLM, the simulator)"
    )
    prefix_cache_hits: float | None = Field(None, description="of those, tokens found cached")
    prefix_cache_hit_rate: float | None = Field(
        None, description="the engine's prefix-cache hit rate: hits ÷ queries"
    )
    batch_per_replica: float | None = Field(None, description="the engine's B")
    steps_per_s_per_replica: float | None = Field(None, description="the engine's s")
    mbu: float | None = Field(
        None,
        description=MBU_ENGINE.definition + " (compare with the seed-formula MBU on the "
        "client's, Mbu.seed_mbu, not the headline)",
    )
    agreements: list[EngineAgreement] = Field(default_factory=list)
    edge_fraction: float | None = Field(
        None,
        description="scrape time straddling the window's edges ÷ window: added to every "
        "tolerance (what the scrapes cannot resolve)",
    )


class StepSummary(_Strict):
    """Engine steps as the client saw them (``metrics.steps``): one chunk per step per
    sequence. The figures users argue about, each named once (docs/methodology.md, "Steps")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int = Field(description="requests with at least one decode step")
    decode_steps: int = Field(description="Σ (chunks − 1)")
    decode_tokens: int = Field(description="Σ (tokens − tokens of the first chunk)")
    acceptance_length: float | None = Field(description="decode tokens ÷ decode steps")
    acceptance_length_p50: float | None = Field(None, description="median over requests")
    itl_chunk_s: float | None = Field(description="ITL per chunk: decode time ÷ decode steps")
    itl_token_s: float | None = Field(description="ITL per token (TPOT): ÷ decode tokens")
    steps_per_s: float | None = Field(description="per sequence: 1 ÷ ITL per chunk")
    max_chunk_tokens: int
    speculation: Literal["none", "detected", "declared"]
    coalesced: bool = Field(description="chunks carry several steps: not steps, see flags")
    engine_acceptance_length: float | None = Field(
        None, description="the engine's own: 1 + accepted ÷ drafts over the window"
    )
    tokens: int | None = Field(
        None, description="all tokens of these requests, first chunks included (None: older)"
    )


class ProbeDetail(_Strict):
    """What one probe's run records beyond its figures: how it was sent, how its window ended,
    the counts and chunk figures behind the summary, and the client's clock and connections
    (``tokenwatt probe`` wrote these to ``probe.json`` before version 3)."""

    arrival: str = Field(description="poisson, gamma, constant or concurrency")
    prompt_format: str = Field(description="how prompts were sent, e.g. chat")
    max_requests: int | None = Field(None, description="the window was this many requests")
    started_ns: int = Field(description="monotonic ns of the first arrival slot")
    ended_ns: int = Field(description="monotonic ns when the drain ended")
    drain_s: float = Field(description="window end → last request done or cut")
    stopped_early: bool = Field(False, description="the early-stop rule ended the window")
    drain_timeouts: int = Field(0, description="counted requests cut at the drain timeout")
    error_stopped: bool = Field(False, description="endpoint errors ended the window")
    requests_total: int = Field(description="every request of the probe (warm-up, drain too)")
    output_tokens: int = Field(description="tokens received inside the window: T's numerator")
    counted_output_tokens: int = Field(description="Σ output tokens of the counted requests")
    throughput_balance: float | None = Field(
        None, description="counted_output_tokens ÷ output_tokens (≈ 1 at steady state)"
    )
    prompt_tokens_mean: float | None = Field(None, description="server usage, counted ok")
    prompt_tokens_client_mean: float | None = Field(None, description="the client's own count")
    output_tokens_mean: float | None = None
    tokens_per_chunk_mean: float | None = None
    tokens_per_chunk_max: int | None = None
    multi_token_chunk_share: float | None = None
    multi_token_chunks: bool = Field(False, description="chunk timing is not per-token timing")
    coalesced_reads: int = Field(0, description="client reads with several content events")
    usage_fallback_requests: int = Field(0, description="token counts from the client's count")
    timestamp_source: Literal["kernel", "user", "mixed", "none"] = "none"
    goodput_requests_per_s: float | None = Field(None, description="attaining requests ÷ window")
    clock: ClientClock | None = Field(
        None, description="the client's timestamp source and realtime − monotonic offset"
    )
    connections: dict[str, int] = Field(
        default_factory=dict, description="connections_opened, connections_reused"
    )


class FigureIntervals(_Strict):
    """A probe's figures as intervals at ``confidence`` (``metrics.intervals``): batch means
    over ``blocks`` equal time blocks of the window by send time, Woodruff's interval for the
    p99s. Each is ``[low, high]``; a None end is open (the window does not bound it), a None
    interval: not stated (the figure is absent, or too few blocks held it)."""

    confidence: float = Field(description="of every interval here, e.g. 0.95")
    method: Literal["batch_means"] = "batch_means"
    blocks: int = Field(description="time blocks the window was cut into")
    block_s: float = Field(description="each block's length in seconds")
    output_tokens_per_s: tuple[float | None, float | None] | None = None
    itl_token_weighted_s: tuple[float | None, float | None] | None = None
    ttft_p99_s: tuple[float | None, float | None] | None = None
    tpot_p99_s: tuple[float | None, float | None] | None = None
    goodput_output_tokens_per_s: tuple[float | None, float | None] | None = None
    mbu: tuple[float | None, float | None] | None = None
    mbu_decode_only: tuple[float | None, float | None] | None = None
    tokens_per_joule: tuple[float | None, float | None] | None = None
    mbu_window_for_1pt_s: float | None = Field(
        None, description="the window that would bring MBU's interval within ±1 pt"
    )
    notes: list[str] = Field(default_factory=list)


class SafeRateFlag(_Strict):
    """A drift check at or below the search's safe rate (as its verdict is placed) failed
    the SLO: the safe rate was too high. ``safe_rate_rps`` is the low end re-computed with the
    check's counts pooled into the search's evidence (None: no lower rate is established, the
    safe rate is withdrawn); ``load.safe_rate`` sets it, docs/methodology.md defines it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    direction: Literal["too high"] = Field(
        "too high", description="which way the searched safe rate was wrong"
    )
    check_rate_rps: float = Field(description="the failed check's rate, as its verdict is placed")
    check_probe: int = Field(description="the failed check's probe index")
    misses: int = Field(description="the check's misses of its worst limit")
    judged: int = Field(description="requests the check judged")
    searched_safe_rate_rps: float = Field(description="the safe rate the search reported")
    safe_rate_rps: float | None = Field(
        description="the safe rate with the check pooled in (None: withdrawn)"
    )

    def line(self) -> str:
        """The flag as the views print it, its direction first."""
        x, y = self.check_rate_rps, self.searched_safe_rate_rps
        head = (
            f"safe rate too high: a check at {x:.4g} req/s (≤ the safe rate {y:.4g}) failed "
            f"with {self.misses} misses of {self.judged}"
        )
        if self.safe_rate_rps is None:
            return head + "; withdrawn: with its counts pooled no lower rate is established"
        return head + f"; lowered to {self.safe_rate_rps:.4g} req/s with its counts pooled"


class ProbeSummary(_Strict):
    """One probe (one offered rate) or the single-stream point, over its measurement window.

    ``index`` is the probe's position in the search, from 1; the single-stream point is 0.
    """

    index: int
    rate_rps: float | None = Field(
        description="offered: the rate the schedule asked for; None for a closed loop"
    )
    counted_rate_rps: float = Field(
        description="counted: requests scheduled inside the window ÷ window (what the window "
        "really held, Poisson noise included)"
    )
    achieved_rate_rps: float = Field(
        description="achieved: counted requests that succeeded ÷ window"
    )
    output_tokens_per_s: float = Field(description="T, node output tokens/s in the window")
    itl_token_weighted_s: float | None = Field(description="τ, token-weighted mean ITL")
    batch_per_replica: float | None = Field(description="B = T·τ/R")
    mean_context_per_token: float | None
    mbu: float | None
    mbu_detail: Mbu | None = None
    goodput_output_tokens_per_s: float
    goodput_output_tokens_per_s_per_gpu: float
    tokens_per_joule: float | None = Field(description="None: not measured")
    energy: EnergySummary | None = None
    power_series: list[tuple[float, float]] | None = Field(
        None, description="[t_s from window start, W] samples for the power plot"
    )
    slo_passed: bool
    slo_detail: SloDetail = Field(default_factory=SloDetail)
    attainment: float | None = Field(description="fraction of requests meeting every limit")
    ttft_s: Latency
    tpot_s: Latency
    itl_s: Latency = Field(description="chunk-level inter-arrival gaps")
    e2e_s: Latency
    reasoning_output_tokens: int | None = Field(
        None, description="of the output tokens, those streamed as reasoning (None: no reasoning)"
    )
    ttft_reasoning_s: Latency | None = Field(None, description="time to first reasoning token")
    ttft_answer_s: Latency | None = Field(None, description="time to first answer token")
    accuracy: GradedAccuracy | None = Field(
        None, description="graded answers in the window (None: no graded slice)"
    )
    steps: StepSummary | None = Field(
        None, description="steps, acceptance length, ITL per chunk and per token"
    )
    send_lateness_s: Latency | None = Field(
        None, description="actual send − scheduled send: the load generator's own error"
    )
    requests_ok: int
    requests_failed: int = Field(description="counted requests the server failed")
    requests_cancelled: int = Field(
        0, description="counted requests the client cancelled (early stop, Ctrl-C): no failure"
    )
    requests_counted: int | None = Field(None, description="scheduled inside the window")
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    window_s: float
    requests_file: str | None = Field(None, description="e.g. requests-03.jsonl")
    flags: list[str] = Field(default_factory=list)
    phase: str | None = Field(
        None, description="single_stream, or the search phase: grow, descend, bisect, confirm"
    )
    seed: int | None = Field(None, description="seed of the probe's schedule and requests")
    concurrency: int | None = Field(None, description="closed-loop streams (None: open loop)")
    warmup_s: float | None = Field(None, description="first arrival slot → window start")
    window_start_ns: int | None = Field(None, description="monotonic ns, see machine.clock")
    window_end_ns: int | None = None
    mean_concurrency: float | None = Field(None, description="Little's law over counted requests")
    interrupted: bool = Field(False, description="Ctrl-C ended the probe")
    late_sends: int = Field(0, description="sends started over 50 ms after their slot")
    stray_answers: int = Field(
        0,
        description="answers nobody asked for (a late second answer, or the previous "
        "request's answer read on a reused connection); each closed its connection",
    )
    max_send_lag_s: float | None = Field(None, description="the sender's worst lag behind plan")
    rate_unit: Literal["requests", "sessions", "turns"] = Field(
        "requests", description="what rate_rps counts per second"
    )
    sessions: SessionStats | None = Field(None, description="conversation probes only")
    cached_prompt_fraction: float | None = Field(
        None,
        ge=0,
        le=1,
        description="counted prompt tokens the server's prefix cache served ÷ prompt tokens "
        "(usage.prompt_tokens_details.cached_tokens); None: the server did not say",
    )
    agent: AgentFigures | None = Field(None, description="agent-trace probes only")
    ideal_prefix_fraction: float | None = Field(
        None,
        ge=0,
        le=1,
        description="trace replays with block hashes: counted prompt tokens an unbounded "
        "prefix cache could serve ÷ prompt tokens (the ideal hit rate); None: no hashes",
    )
    engine: EngineFigures | None = Field(None, description="the engine's /metrics, if scraped")
    engine_series_file: str | None = Field(None, description="e.g. engine-03.jsonl")
    cost: CostFigures | None = Field(None, description="$/Mtok; None: no price in the spec")

    load_generator: LoadGenerator | None = Field(
        None, description="sending processes and their keep-up (None: not recorded)"
    )
    boundary_rate_rps: float | None = Field(
        None, description="boundary only: the fitted boundary rate (metrics.boundary)"
    )
    rate_interval_rps: tuple[float | None, float | None] | None = Field(
        None, description="boundary only: [low, high] at ``confidence``; None end: open"
    )
    goodput_tokens_per_s_at_boundary: float | None = Field(
        None, description="boundary only: goodput per request/s of this probe × the fitted rate"
    )
    goodput_interval_tokens_per_s: tuple[float | None, float | None] | None = Field(
        None, description="boundary only: the rate interval scaled the same way"
    )
    confidence: float | None = Field(None, description="boundary only: of the intervals")
    boundary_rate_leans: Literal["high"] | None = Field(
        None,
        description="boundary only: the direction the fitted boundary point may be wrong in "
        "(metrics.boundary.FITTED_POINT_LEANS; None: no point fitted, or an older file)",
    )
    fit_role: str | None = Field(
        None, description="whether this probe joined the boundary fit, and why not (None: older)"
    )
    safe_rate_rps: float | None = Field(
        None, description="boundary only: the safe rate, the rate interval's low end (None: open)"
    )
    goodput_tokens_per_s_at_safe_rate: float | None = Field(
        None, description="boundary only: goodput at the safe rate, scaled as the interval"
    )
    safe_rate_flag: SafeRateFlag | None = Field(
        None,
        description="boundary only: a drift check at or below the searched safe rate failed; "
        "the safe rate above is the corrected one (None: none did, or an older file)",
    )
    intervals: FigureIntervals | None = Field(
        None, description="the probe's figures as intervals (None: not computed, older file)"
    )

    run: ProbeDetail | None = Field(
        None, description="the probe's own run record (None: a file older than version 3)"
    )

    @model_validator(mode="before")
    @classmethod
    def _rates_before_v3(cls, data: Any) -> Any:
        """A file older than version 3: its ``achieved_rate_rps`` was the counted rate (the
        field is now successes ÷ window, recomputed here from its own counts)."""
        if isinstance(data, dict) and "counted_rate_rps" not in data:
            data = dict(data)
            data["counted_rate_rps"] = data.get("achieved_rate_rps", 0.0)
            ok, window_s = data.get("requests_ok"), data.get("window_s")
            if isinstance(ok, int) and isinstance(window_s, int | float) and window_s > 0:
                data["achieved_rate_rps"] = ok / window_s
        return data

    def latency_at(self, metric: Literal["ttft", "tpot", "itl", "e2e"], q: float) -> float | None:
        """The q-quantile of ``metric`` in seconds: from its summary for q in {0.5, 0.9, 0.95,
        0.99}, else from the SLO verdict's nearest-rank ``slo_detail.quantiles_s``."""
        label = f"p{q * 100:g}"
        summary: Latency = getattr(self, f"{metric}_s")
        value = getattr(summary, label, None) if label in Latency.model_fields else None
        if value is None:
            value = self.slo_detail.quantiles_s.get(f"{metric}_{label}")
        return float(value) if isinstance(value, int | float) else None


class SearchStep(_Strict):
    """One probe of the search and the bracket after it."""

    index: int
    rate_rps: float
    passed: bool
    phase: Literal["grow", "descend", "bisect", "confirm", "fit", "check"] = Field(
        "grow",
        description="grow: rates up until a failure; descend: rates down from a failing "
        "start; bisect: inside the bracket; confirm: a re-run of the boundary; fit: the "
        "rate the boundary fit chose; check: the drift checks after the search",
    )
    lo_rps: float | None = Field(None, description="highest passing rate so far")
    hi_rps: float | None = Field(None, description="lowest failing rate so far")
    seed: int | None = None
    reason: str | None = Field(None, description="why the probe failed, if it did")


class SearchSummary(_Strict):
    history: list[SearchStep] = Field(default_factory=list)
    precision_target: float = Field(
        description="stop when the boundary's 95 % interval is within ± this of its point "
        "(without search.sequential: when (hi − lo)/lo is below this)"
    )
    precision_reached: float | None = Field(
        None, description="the interval's half width over its point at the end (or (hi − lo)/lo)"
    )
    stop_reason: str = Field(
        description="converged, max_probes, max_time, max_rate, failed_at_start, "
        "single_stream_fails, interrupted, error, saturated, changed"
    )
    unclosed: str | None = Field(
        None, description="which end of the boundary's interval was not established, and why"
    )
    max_time_s: float | None = Field(None, description="the search's time limit (None: none)")
    low_end_min_below: float | None = Field(
        None,
        description="two-sided: the low end's distance below the point, set by the output "
        "tokens measured (metrics.boundary.low_end_min_below; None: one-sided, older file)",
    )
    lo_rps: float | None = Field(None, description="the boundary: highest passing rate")
    hi_rps: float | None = Field(None, description="lowest failing rate above it")
    drift: list[str] = Field(
        default_factory=list,
        description="the drift checks after the search, one line each (empty: not run)",
    )
    start: str | None = Field(None, description="how the first rate was found, one line")


# The SLO the run was judged against is the spec's own model (presets resolved), not a copy.
SloSettings = SLO


class MachineInfo(_Strict):
    """Facts about the client machine, for reproducing and for comparing runs."""

    hostname: str
    os: str
    python: str
    cpu_count: int | None
    clock: str = Field(description="the monotonic clock used for every measurement")
    timestamp_source: str = Field(description="kernel (SO_TIMESTAMP) or user")
    realtime_minus_monotonic_s: float = Field(
        description="wall − monotonic at the start: add to a monotonic stamp for wall time"
    )

    @classmethod
    def collect(cls, *, timestamp_source: str = "user") -> MachineInfo:
        """This machine, now (the clock pair read back to back)."""
        mono = time.perf_counter_ns()
        wall = time.time_ns()
        try:
            clock = time.get_clock_info("perf_counter").implementation
        except (AttributeError, ValueError):  # pragma: no cover - every CPython has it
            clock = "perf_counter"
        return cls(
            hostname=socket.gethostname(),
            os=f"{platform.system()} {platform.release()}",
            python=f"{platform.python_implementation()} {sys.version.split()[0]}",
            cpu_count=os.cpu_count(),
            clock=f"time.perf_counter_ns ({clock})",
            timestamp_source=timestamp_source,
            realtime_minus_monotonic_s=(wall - mono) / 1e9,
        )


class RunTarget(_Strict):
    """What a run drove: the simulator or an endpoint, so a simulated result says so."""

    kind: Literal["sim", "endpoint", "imported"]
    base_url: str = Field(description="the URL requests went to (credentials removed)")
    model: str | None = Field(None, description="the served model name requests named")
    sim_mode: Literal["thread", "subprocess"] | None = Field(
        None, description="how the simulator ran beside the client (None: an endpoint)"
    )
    sim: SimSettings | None = Field(None, description="the simulator's settings (None: endpoint)")
    source_tool: str | None = Field(None, description="imported: the tool that measured")
    source_tool_version: str | None = Field(None, description="imported: its version")
    source_format: str | None = Field(None, description="imported: the file format read")
    source_file: str | None = Field(None, description="imported: the file's name")
    server_identity: str | None = Field(
        None,
        description="an endpoint that said it is the built-in simulator: what it said "
        "(its /version, or its model card); None for any other endpoint",
    )

    @field_validator("base_url", mode="after")
    @classmethod
    def _redact_url(cls, v: str) -> str:
        return redact(v)  # type: ignore[no-any-return]


class BenchResult(_Strict):
    """A whole ``tokenwatt bench`` run (or one ``tokenwatt probe``: no search).

    ``spec``, ``geometry`` and ``accelerator`` are the typed objects the run used: a reader
    gets the same ``BenchSpec``, ``ModelGeometry`` and ``Accelerator`` back, and a file
    whose copies do not validate is refused at load, not when a view reaches the field.
    """

    schema_version: int = SCHEMA_VERSION
    tool: str = "tokenwatt"
    tool_version: str
    name: str = Field(description="the spec's name")
    spec: BenchSpec = Field(description="the spec, secrets removed")
    geometry: ModelGeometry | None = Field(
        description="the model's geometry as the run used it (None: a probe of a remote "
        "endpoint whose config.json could not be read; mbu_unavailable says why)"
    )
    accelerator: Accelerator | None = Field(
        description="the accelerator's rated figures (None: as geometry)"
    )
    gpus: int = Field(ge=1, description="N_GPU")
    replicas: int = Field(ge=1, description="R")
    slo: SloSettings
    machine: MachineInfo
    started_at: datetime
    ended_at: datetime | None = None
    single_stream: ProbeSummary | None = None
    probes: list[ProbeSummary] = Field(default_factory=list)
    boundary: ProbeSummary | None = None
    search: SearchSummary | None = None
    target: RunTarget | None = Field(
        None, description="what was driven; None in files older than the field"
    )
    interrupted: bool = False
    warnings: list[str] = Field(default_factory=list)
    mbu_unavailable: str | None = Field(
        None, description="why the run has no geometry or accelerator, hence no MBU"
    )

    @field_validator("spec", mode="before")
    @classmethod
    def _redact_spec(cls, v: Any) -> Any:
        # Every spec passes through the one redaction on its way in, typed or not, so no
        # path can leak a key into a file (the caller may have redacted already).
        if isinstance(v, BenchSpec):
            v = v.model_dump(mode="json")
        return redact(v)

    @field_validator("geometry", mode="before")
    @classmethod
    def _geometry(cls, v: Any) -> Any:
        return upgrade_geometry_dict(v) if isinstance(v, dict) else v

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v not in SUPPORTED_VERSIONS:
            raise ValueError(f"unknown schema_version {v}; this tokenwatt reads {_versions()}")
        return v

    @classmethod
    def begin(
        cls,
        spec: BenchSpec,
        geometry: ModelGeometry | None,
        accelerator: Accelerator | None,
        *,
        tool_version: str,
        timestamp_source: str,
        started_at: datetime,
    ) -> BenchResult:
        """A run's result before its first probe: the node and the SLO from the spec, and
        this machine; ``bench`` and ``probe`` both start from here."""
        return cls(
            tool_version=tool_version,
            name=spec.name,
            spec=spec,
            geometry=geometry,
            accelerator=accelerator,
            gpus=spec.hardware.gpus,
            replicas=spec.hardware.replicas,
            slo=spec.slo,
            machine=MachineInfo.collect(timestamp_source=timestamp_source),
            started_at=started_at,
        )

    @property
    def headline_probe(self) -> ProbeSummary | None:
        """The probe the headline speaks for: the boundary, else the one probe of a
        ``tokenwatt probe`` folder (no search)."""
        if self.boundary is not None:
            return self.boundary
        if self.search is None and len(self.probes) == 1:
            return self.probes[0]
        return None

    @property
    def model_name(self) -> str:
        """The model's name from its geometry, else the served name, else the spec's source."""
        if self.geometry is not None:
            return self.geometry.name
        served = self.target.model if self.target is not None else None
        return served or self.spec.model.source

    @property
    def accelerator_name(self) -> str:
        """The accelerator's display name, else the spec's (no rated figures were found)."""
        if self.accelerator is not None:
            return self.accelerator.display_name or self.accelerator.name
        return str(self.spec.hardware.accelerator or "unknown accelerator")

    @property
    def simulated(self) -> bool:
        """Whether the built-in simulator served the run: started by the run, or an endpoint
        that said it is one (``target.server_identity``); older files: their spec's URL."""
        if self.target is not None:
            return self.target.kind == "sim" or self.target.server_identity is not None
        return self.spec.endpoint.is_sim


def _versions() -> str:
    return ", ".join(str(v) for v in sorted(SUPPORTED_VERSIONS))


def result_path(path_or_dir: str | Path) -> Path:
    """``DIR/result.json`` for a directory (``DIR/probe.json`` where only an old probe wrote
    one), else the path itself."""
    p = Path(path_or_dir)
    if not p.is_dir():
        return p
    if not (p / RESULT_FILE).exists() and (p / PROBE_JSON).exists():
        return p / PROBE_JSON
    return p / RESULT_FILE


def load_result(path_or_dir: str | Path) -> BenchResult:
    """Read a result file (or a run directory holding one); failures are one-line ReportErrors.

    Read by the bounded loader (regular file, size, depth, finite numbers); a file over
    ``RESULT_WHOLE_MAX_BYTES`` is streamed probe by probe and only ``PROBES_KEPT`` of its
    probes are kept, with a warning saying which; every figure is checked
    (``figure_problem``) before a view can print it."""
    p = result_path(path_or_dir)
    if not p.exists() and not p.is_symlink():
        where = f"{p.parent} has no {RESULT_FILE}" if p.name == RESULT_FILE else f"{p} not found"
        raise ReportError(f"{where}; give a run directory written by `tokenwatt bench`")
    try:
        large = p.stat().st_size > RESULT_WHOLE_MAX_BYTES
    except OSError as exc:
        raise ReportError(f"{p}: cannot read result file ({exc.strerror or exc})") from None
    keeper = _ProbeKeeper(p)
    if large:
        data = stream_indented_array(
            p,
            "probes",
            keeper.add,
            max_bytes=RESULT_MAX_BYTES,
            error=ReportError,
            what="result file",
        )
    else:
        data = load_document(
            p, max_bytes=RESULT_WHOLE_MAX_BYTES, error=ReportError, fmt="json", what="result file"
        )
    if isinstance(data, dict) and "schema_version" not in data and "summary" in data:
        data = _from_probe_json(data)
    if isinstance(data, dict) and data.get("kind") == "PREDICTED":
        raise ReportError(
            f"{p}: PREDICTED figures from `tokenwatt predict`, not a measurement; report and "
            "compare read measured results only"
        )
    if not isinstance(data, dict) or "schema_version" not in data:
        raise ReportError(f"{p}: not a tokenwatt result file (no schema_version at the top)")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise ReportError(f"{p}: schema_version must be an integer, got {version!r}")
    if version not in SUPPORTED_VERSIONS:
        newer = " (written by a newer tokenwatt; upgrade)" if version > SCHEMA_VERSION else ""
        raise ReportError(
            f"{p}: unknown schema_version {version}{newer}; this tokenwatt reads {_versions()}"
        )
    if version == 1:
        if large:
            raise ReportError(f"{p}: a version-1 result over the size read whole; upgrade it")
        data = _upgrade_v1(data)
    if large:
        data = {**data, "probes": keeper.kept(), "warnings": [*data.get("warnings", [])]}
        if keeper.note():
            data["warnings"].append(keeper.note())
    problem = figure_problem(data)
    if problem:
        raise ReportError(f"{p}: {problem}; the file is damaged or was edited")
    return _validated(p, data)


def _validated(p: Path, data: dict[str, Any]) -> BenchResult:
    try:
        return BenchResult.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "<root>"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ReportError(f"{p}: invalid result file: {loc}: {err['msg']}{more}") from None


# Figures a view prints as measured: never negative (a latency, a rate, tokens, joules).
_NON_NEGATIVE = (
    "rate_rps", "counted_rate_rps", "achieved_rate_rps", "output_tokens_per_s",
    "itl_token_weighted_s", "batch_per_replica", "mean_context_per_token", "mbu",
    "goodput_output_tokens_per_s", "goodput_output_tokens_per_s_per_gpu", "tokens_per_joule",
    "attainment", "requests_ok", "requests_failed", "requests_cancelled", "requests_counted",
    "window_s", "boundary_rate_rps", "goodput_tokens_per_s_at_boundary", "mean_concurrency",
)  # fmt: skip
_LATENCIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
_QS = ("count", "mean", "p50", "p90", "p95", "p99", "max")
_ENERGY = ("energy_j", "mean_power_w", "joules_per_output_token", "tokens_per_joule", "window_s")


_NUMBER = (int, float)  # exactly: a bool is no figure


def _number(x: Any) -> bool:
    return x.__class__ in _NUMBER


def probe_figure_problem(probe: Any) -> str | None:
    """What makes a probe's figures impossible (a probe as read from the file, before
    validation), in a few words; None when nothing does. Every number is finite and within
    the loader's bound already; here: no figure negative, and a probe with answered requests
    has a window longer than zero (its rates divide by it)."""
    if not isinstance(probe, dict):
        return None  # not a probe at all: the validation names it
    named: list[tuple[str, Any]] = [(n, probe.get(n)) for n in _NON_NEGATIVE]
    for group, keys in [(m, _QS) for m in _LATENCIES] + [("energy", _ENERGY)]:
        block = probe.get(group)
        if isinstance(block, dict):
            named += [(f"{group}.{k}", block.get(k)) for k in keys]
    for name, value in named:
        if value.__class__ in _NUMBER and not 0 <= value <= MAX_MAGNITUDE:
            if value < 0:
                return f"{name} is {value:g}, and cannot be negative"
            return f"{name} is {value:.3g}, beyond any measurable figure"
    ok: Any = probe.get("requests_ok")
    window_s: Any = probe.get("window_s")
    if _number(ok) and ok > 0 and _number(window_s) and window_s <= 0:
        return f"window_s is {window_s:g} with {ok} requests answered"
    return None


def figure_problem(data: dict[str, Any]) -> str | None:
    """The first impossible figure of a result file's data (``probes[3].ttft_s.p99 is
    -0.5, and cannot be negative``); None when there is none."""
    probes = data.get("probes")
    named = [("single_stream", data.get("single_stream")), ("boundary", data.get("boundary"))]
    named += [(f"probes[{i}]", q) for i, q in enumerate(probes if isinstance(probes, list) else [])]
    for where, probe in named:
        problem = probe_figure_problem(probe)
        if problem:
            return f"{where}.{problem}"
    return None


class _ProbeKeeper:
    """The probes a streamed result keeps, in bounded memory: the last ``PROBES_KEPT // 2``
    and, of the earlier ones, every ``stride``-th, the stride doubling whenever more than
    ``PROBES_KEPT // 2`` of those are held. Every probe's figures are checked as it passes,
    kept or not; the kept ones are validated with the result."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.stride = 1
        self.spread: list[tuple[int, Any]] = []
        self.last: deque[tuple[int, Any]] = deque(maxlen=PROBES_KEPT // 2)

    def add(self, raw: Any) -> None:
        problem = probe_figure_problem(raw)
        if problem:
            raise ReportError(
                f"{self.path}: probes[{self.count}].{problem}; the file is damaged or was edited"
            )
        if len(self.last) == self.last.maxlen:
            i, old = self.last[0]
            if i % self.stride == 0:
                self.spread.append((i, old))
                if len(self.spread) > PROBES_KEPT // 2:
                    self.stride *= 2
                    self.spread = [(j, q) for j, q in self.spread if j % self.stride == 0]
        self.last.append((self.count, raw))
        self.count += 1

    def kept(self) -> list[Any]:
        return [q for _, q in self.spread] + [q for _, q in self.last]

    def note(self) -> str | None:
        """The warning every view prints when probes were left out; None when none were."""
        shown = len(self.spread) + len(self.last)
        if shown == self.count:
            return None
        return (
            f"{_HOLDS} {self.count:,} probes; the views show {shown}: the last "
            f"{len(self.last)} and every {self.stride}th before them (all stay in the file)"
        )


_HOLDS = "result.json holds"  # how the note on left-out probes starts: written and found here


def probes_left_out(result: BenchResult) -> str | None:
    """The note a streamed result carries when its views see only some of its probes."""
    return next((w for w in result.warnings if w.startswith(_HOLDS)), None)


def _from_probe_json(data: dict[str, Any]) -> dict[str, Any]:
    """An old ``probe.json`` (before version 3) as a one-probe result; its spec resolves the
    SLO it was judged against."""
    try:
        spec = BenchSpec.model_validate(redact(data.get("spec")))
    except ValidationError:
        return data  # refused below, in one line, as not a result file
    return probe_json_to_result(data, spec.slo.model_dump(), ProbeDetail.model_fields)


_LATENCY_KEYS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "send_lateness_s")


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 file in version-2 shape. Its extra keys are exactly the fields version 2
    declares; what differs is a latency summary's ``count``, which version 1 allowed to be
    null (no samples: 0 now). Figures are kept as written (T was then the tokens of the
    requests scheduled in the window ÷ window)."""
    out = dict(data)
    out["spec"] = _v1_spec(out)
    probes = [out.get("single_stream"), out.get("boundary"), *(out.get("probes") or [])]
    for probe in probes:
        if not isinstance(probe, dict):
            continue
        for key in _LATENCY_KEYS:
            lat = probe.get(key)
            if isinstance(lat, dict) and lat.get("count") is None:
                probe[key] = {**lat, "count": 0}
    return out


def _v1_spec(data: dict[str, Any]) -> Any:
    """A version-1 spec with today's required sections: version 1 defaulted ``endpoint`` to
    the simulator and ``hardware`` to what the file itself records (accelerator, gpus,
    replicas), so a spec written without them is filled from exactly that."""
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return spec
    spec = dict(spec)
    spec.setdefault("endpoint", {"url": "sim"})
    acc = data.get("accelerator")
    if "hardware" not in spec and isinstance(acc, dict):
        spec["hardware"] = {
            "accelerator": acc.get("name"),
            "gpus": data.get("gpus", 1),
            "replicas": data.get("replicas", 1),
        }
    return spec


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_result(result: BenchResult, out_dir: str | Path) -> Path:
    """Write ``DIR/result.json`` atomically (temp file + rename), so a crash or Ctrl-C during
    the write never leaves half a file where a good one was."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    target = d / RESULT_FILE
    text = result.model_dump_json(indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".result-", suffix=".json", dir=d)
    try:
        # mkstemp makes 0600; every other file of the folder is 0666 less the umask, and
        # nothing secret is left in a result after redaction: give it the same permissions.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
