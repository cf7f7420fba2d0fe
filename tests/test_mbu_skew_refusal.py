"""Above the rated bandwidth under the uniform assumption: skew first, then an input error.

One threshold (``RATED_BANDWIDTH_LIMIT``, the rating itself): no figure above it is printed. On
an MoE model without a measured expert load, a uniform figure above it whose fewest-experts
lower end is within it is kept as the band [lower, rating]; only when even the fewest experts
any routing reads would exceed the rating is the figure refused as an input error.
"""

from __future__ import annotations

import pytest

from test_mbu import DENSE, MOE
from tokenwatt.metrics.mbu import RATED_BANDWIDTH_LIMIT, compute_mbu
from tokenwatt.metrics.mbu.mixed_steps import StepRegime
from tokenwatt.result import Mbu

TAU_S = 0.02
BATCH = 64.0
REGIME = StepRegime(
    request_rate_rps=0.0, mean_prompt_tokens=512.0, mean_output_tokens=1e9, idle_fraction=0.0
)


def _mbu(geometry: object, bandwidth_bytes_per_s: float) -> Mbu:
    return compute_mbu(
        geometry,  # type: ignore[arg-type]
        output_tokens_per_s=BATCH / TAU_S,
        itl_token_weighted_s=TAU_S,
        replicas=1,
        gpus=1,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        mean_context_per_token=0.0,
        kv_bytes_per_output_token=0.0,
        regime=REGIME,
    )


def _bytes_per_s() -> tuple[float, float]:
    """(uniform, fewest) weight bytes per second, from a bandwidth where nothing is capped."""
    far = _mbu(MOE, 1e16)
    assert far.mbu is not None and far.mbu_lower_bound is not None
    return far.mbu * 1e16, far.mbu_lower_bound * 1e16


def test_uniform_above_the_rating_is_read_as_skew_when_the_fewest_fit() -> None:
    uniform, fewest = _bytes_per_s()
    assert fewest < uniform / 2  # 8 of 128 experts against nearly all of them at B 64
    bw = (uniform + fewest) / 2  # uniform needs more than the rating, the fewest less
    r = _mbu(MOE, bw)
    assert not r.flags.above_rated_bandwidth and r.flags.routing_unmeasured
    assert r.mbu == RATED_BANDWIDTH_LIMIT  # the band's upper end is the rating, not 1xx %
    assert r.mbu_lower_bound == pytest.approx(fewest / bw, rel=1e-9)
    assert r.notes[0].startswith(f"uniform routing would read {100 * uniform / bw:.1f} %")
    assert "routing is skewed" in r.notes[0] and "not an input wrong" in r.notes[0]
    assert r.mbu_decode_only is not None and r.mbu_decode_only <= RATED_BANDWIDTH_LIMIT


def test_refused_when_even_the_fewest_experts_exceed_the_rating() -> None:
    _, fewest = _bytes_per_s()
    r = _mbu(MOE, fewest / 1.2)  # the fewest experts need 120 % of the rating
    assert r.mbu is None and r.mbu_lower_bound is None and r.flags.above_rated_bandwidth
    assert r.notes[0].startswith("MBU refused")
    assert "would need 120 % of the rating" in r.notes[0]


def test_dense_above_the_rating_is_refused_at_the_same_threshold() -> None:
    base = _mbu(DENSE, 1e16)
    assert base.mbu is not None
    need = base.mbu * 1e16
    assert _mbu(DENSE, need / 0.999).mbu == pytest.approx(0.999)
    r = _mbu(DENSE, need / 1.001)
    assert r.mbu is None and r.flags.above_rated_bandwidth
