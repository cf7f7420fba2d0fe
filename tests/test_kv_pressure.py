"""KV pressure: preempted streams found from the client's chunk stamps, and B corrected.

Hand-built streams check the rule both ways (one stream silent while the others decode is a
stall; every stream silent together is a long step, not a stall) and the τ correction by hand.
The simulator, in virtual time with a KV cache too small for its long prompts, checks the
whole chain against its own step log: the stalls it finds, the corrected batch and MBU
against the truth, and no stall at all when the same long prompts fit.
"""

from __future__ import annotations

import numpy as np
import pytest

from builders import streamed_record
from test_validation_moe import Case
from test_validation_single_stream import step_records
from tokenwatt.hardware import get_accelerator
from tokenwatt.metrics.mbu import compute_mbu, kv_read_per_output_token
from tokenwatt.metrics.mbu.kv_pressure import KvPressure, mark_kv_pressure, stream_stalls
from tokenwatt.metrics.mbu.mixed_steps import (
    StepRegime,
    decode_batch_from_intervals,
    idle_fraction_from_intervals,
)
from tokenwatt.records import RequestRecord
from tokenwatt.result import Mbu
from tokenwatt.sim import SimConfig, VirtualSim
from tokenwatt.sim.truth import FigureTruth, figure_truth

MS = 1_000_000


def _rec(rid: int, stamps_ms: list[float]) -> RequestRecord:
    stamps = [round(t * MS) for t in stamps_ms]
    return streamed_record(rid, stamps, sent_ns=stamps[0] - 50 * MS, prompt_tokens=100)


def _steady(
    rid: int, start: float, n: int, gap_at: int | None = None, gap: float = 0.0
) -> RequestRecord:
    t, out = start, []
    for i in range(n):
        out.append(t)
        t += 10.0 + (gap if i == gap_at else 0.0)
    return _rec(rid, out)


def test_one_stream_silent_while_others_decode_is_a_stall() -> None:
    a = _steady(0, 0.0, 40, gap_at=10, gap=190.0)  # one 200 ms gap among 10 ms ones
    others = [_steady(i, 1.0 + i, 60) for i in (1, 2)]
    recs = [a, *others]
    p = stream_stalls(recs, recs, 0, 10**12)
    assert (p.stalls, p.streams_stalled, p.streams) == (1, 1, 3)
    # decode time: stream a 39 gaps (38 × 10 + 200 ms) = 0.58 s, the others 59 × 10 ms each;
    # a's typical gap is its mean, 0.58 / 39 s (above its 10 ms median), so the excess is
    # 200 ms less that
    excess = 0.2 - 0.58 / 39
    assert p.stalled_s == pytest.approx(excess)
    assert p.decode_s == pytest.approx(0.58 + 2 * 0.59)
    assert p.stalled_share == pytest.approx(excess / 1.76) and p.seen
    # τ' = τ × (decode − stalled) / decode, by hand
    assert p.corrected_tau(0.02) == pytest.approx(0.02 * (1.76 - excess) / 1.76)


def test_jitter_burst_is_not_a_stall() -> None:
    """A stream whose tokens arrive late in a burst (delivery jitter: made during the gap) is
    not a stall; below 2 % of decode time stalls are not pressure either."""
    stamps = [10.0 * k for k in range(40)]
    late = [t if k <= 10 or k > 16 else 160.0 + 0.01 * k for k, t in enumerate(stamps)]
    recs = [_rec(0, late), *[_steady(i, 1.0 + i, 60) for i in (1, 2)]]
    assert stream_stalls(recs, recs, 0, 10**12).stalls == 0
    tiny = KvPressure(1, 1, 3, 0.01, 0.01, 1.0)
    assert not tiny.seen


def test_every_stream_silent_together_is_a_long_step_not_a_stall() -> None:
    """A prompt chunk riding with the decodes stretches one step for every stream at once."""
    recs = []
    for i in range(3):
        stamps = [1.0 + i + 10.0 * k for k in range(40)]
        stamps = [t + (190.0 if k > 10 else 0.0) for k, t in enumerate(stamps)]
        recs.append(_rec(i, stamps))
    p = stream_stalls(recs, recs, 0, 10**12)
    assert p.stalls == 0 and p.stalled_s == 0.0


def test_two_replicas_a_long_step_on_one_is_not_a_stall() -> None:
    """R = 2: a long step holds back the streams of one replica (half the others); the rest
    move on. Not a stall under the 1 − 1/(2R) rule; a lone silent stream still is."""
    held = [_steady(i, 1.0 + i, 40, gap_at=10, gap=190.0) for i in range(3)]
    moving = [_steady(10 + i, 2.0 + i, 60) for i in range(3)]
    recs = [*held, *moving]
    assert stream_stalls(recs, recs, 0, 10**12, replicas=2).stalls == 0
    lone = [_steady(0, 1.0, 40, gap_at=10, gap=190.0), *moving]
    assert stream_stalls(lone, lone, 0, 10**12, replicas=2).stalls == 1


def _mbu_of(tau: float) -> Mbu:
    from test_mbu import DENSE

    return compute_mbu(
        DENSE, output_tokens_per_s=500.0, itl_token_weighted_s=tau, replicas=1, gpus=1,
        bandwidth_bytes_per_s=3.35e12, mean_context_per_token=0.0, kv_bytes_per_output_token=0.0,
    )  # fmt: skip


def test_flag_both_ways_and_its_direction() -> None:
    raw, fixed = _mbu_of(0.024), _mbu_of(0.020)
    none = KvPressure(0, 0, 10, 0.0, 0.0, 10.0)
    assert mark_kv_pressure(fixed, pressure=none, uncorrected=raw) is fixed  # quiet
    assert not mark_kv_pressure(fixed, pressure=None, engine_preemptions=0.0).flags.kv_pressure
    seen = KvPressure(4, 3, 10, 2.0, 2.0, 12.0)
    assert seen.seen
    m = mark_kv_pressure(fixed, pressure=seen, uncorrected=raw)
    assert m.flags.kv_pressure
    note = m.notes[-1]
    assert "3 of 10 streams stalled 4 times" in note and "(16.7% of decode time" in note
    assert "B 10.0; with them 12.0, +20 %" in note  # B = T·τ: 500 × 0.020 against 500 × 0.024
    counted = mark_kv_pressure(fixed, pressure=None, engine_preemptions=369.0)
    assert counted.flags.kv_pressure
    assert "369 preemptions" in counted.notes[-1] and "MBU reads low" in counted.notes[-1]


# -- the simulator under KV pressure, virtual time -------------------------------------------


def _arrivals(rate: float, until_s: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    while (t := t + rng.exponential(1.0 / rate)) < until_s:
        out.append(t)
    return out


def kv_case(
    blocks: int | None, *, n_in: int = 16_384, n_out: int = 256, rate: float = 1.2,
    window_s: float = 120.0,
) -> tuple[Mbu, Mbu, KvPressure, FigureTruth, int]:  # fmt: skip
    """gpt-oss-20b on one H100 at 16k-token prompts; ``blocks`` KV blocks of 16 tokens (None:
    what the memory fits). Returns (corrected MBU, raw MBU, stalls, truth, preemptions)."""
    case = Case("gpt-oss-20b 1×H100", "gpt-oss-20b", "h100-sxm", 1)
    g, acc = case.geometry(), get_accelerator("h100-sxm")
    cfg = SimConfig(
        geometry=g, accelerator=acc, gpus_per_replica=1, efficiency=0.6, prefill_cost=True,
        kv_cache_blocks=blocks, seed=5,
    )  # fmt: skip
    sim = VirtualSim(cfg)
    warm = 30.0
    reqs = [sim.submit(t, n_in, n_out) for t in _arrivals(rate, warm + window_s, 5)]
    sim.run()
    w0, w1 = round(warm * 1e9), round((warm + window_s) * 1e9)
    records = [
        _rec(r.rid, [t / MS for t in sim.token_ns[r.rid]]) for r in reqs if sim.token_ns[r.rid]
    ]
    for rec, r in zip(records, reqs, strict=True):
        rec.sent_ns = rec.scheduled_ns = r.arrival_ns
    counted = [rec for rec in records if w0 <= rec.sent_ns < w1]  # type: ignore[operator]
    out = sum(r.output_tokens for r in counted)
    raw_tau = sum(r.end_ns - r.first_token_ns for r in counted) / 1e9 / (out - len(counted))  # type: ignore[operator]
    stalls = stream_stalls(records, counted, w0, w1)
    ctx, kv_tok = kv_read_per_output_token(g, [(n_in, r.output_tokens) for r in counted])
    batch = decode_batch_from_intervals([(r.first_token_ns, r.end_ns) for r in records], w0, w1, 1)
    assert batch is not None
    regime = StepRegime(
        request_rate_rps=len(counted) / window_s, mean_prompt_tokens=float(n_in),
        mean_output_tokens=out / len(counted), chunk_budget_tokens=cfg.settings.max_batched_tokens,
        idle_fraction=idle_fraction_from_intervals(
            [(r.sent_ns, r.end_ns) for r in records], w0, w1, 1  # type: ignore[misc]
        ),
        decode_batch=batch,
    )  # fmt: skip

    def mbu(tau: float, decode_batch: float) -> Mbu:
        return compute_mbu(
            g, output_tokens_per_s=out / window_s, itl_token_weighted_s=tau, replicas=1, gpus=1,
            bandwidth_bytes_per_s=acc.bandwidth_bytes_per_s, mean_context_per_token=ctx,
            kv_bytes_per_output_token=kv_tok,
            regime=StepRegime(**{**_fields(regime), "decode_batch": decode_batch}),
        )  # fmt: skip

    raw = mbu(raw_tau, batch)
    fixed = mbu(stalls.corrected_tau(raw_tau), batch - stalls.stalled_in_window_s / window_s)
    truth = figure_truth(
        step_records(sim), w0, w1, acc.bandwidth_bytes_per_s, g.weight_bytes_per_step
    )
    preempted = sum(r.preemptions for r in reqs)
    return mark_kv_pressure(fixed, pressure=stalls, uncorrected=raw), raw, stalls, truth, preempted


def _fields(regime: StepRegime) -> dict[str, object]:
    return {k: getattr(regime, k) for k in regime.__slots__}  # type: ignore[attr-defined]


# 2k-token prompts, 1k-token outputs, a 48k-token KV cache: contexts grow during decode and
# the engine preempts (recompute) the newest sequence; it waits until blocks free up.
PRESSURE = {"blocks": 3_000, "rate": 3.0, "n_in": 2048, "n_out": 1024, "window_s": 90.0}


@pytest.mark.timeout(300)
def test_kv_pressure_in_the_simulator_is_seen_and_corrected() -> None:
    fixed, raw, stalls, truth, preempted = kv_case(**PRESSURE)  # type: ignore[arg-type]
    b_fixed, b_raw = fixed.inputs.batch_per_replica, raw.inputs.batch_per_replica
    assert b_fixed is not None and b_raw is not None and fixed.mbu is not None
    assert raw.mbu is not None
    print(
        f"preemptions {preempted}, stalls {stalls.stalls} in {stalls.streams_stalled} of "
        f"{stalls.streams} streams; true batch {truth.mean_batch:.2f}, B raw {b_raw:.2f} "
        f"corrected {b_fixed:.2f}; MBU truth {truth.all_bytes:.4f} raw {raw.mbu:.4f} "
        f"corrected {fixed.mbu:.4f}"
    )
    assert preempted > 10 and stalls.stalls > preempted / 2
    assert fixed.flags.kv_pressure and not raw.flags.kv_pressure
    assert b_raw > truth.mean_batch * 1.2  # the miss: B reads high under preemption
    # τ as measured (all an engine counter without client stalls has): MBU reads LOW, the
    # direction the counter-only note states
    assert raw.mbu < truth.all_bytes
    assert abs(b_fixed - truth.mean_batch) < abs(b_raw - truth.mean_batch)
    lo, hi = sorted((raw.mbu, fixed.mbu))
    assert lo - 0.005 < truth.all_bytes < hi + 0.005  # the note's band holds the truth
    assert f"[{100 * lo:.1f}, {100 * hi:.1f}] %" in fixed.notes[-1]


@pytest.mark.timeout(300)
def test_long_prompts_that_fit_raise_no_kv_pressure() -> None:
    fixed, _, stalls, truth, preempted = kv_case(blocks=None, rate=2.5, window_s=60.0)
    print(f"no pressure: mixed steps {truth.mixed_step_fraction:.3f}, batch {truth.mean_batch:.1f}")
    assert preempted == 0
    assert stalls.stalls == 0 and not fixed.flags.kv_pressure
    assert truth.mixed_step_fraction > 0.05  # long prompt chunks did stretch steps
