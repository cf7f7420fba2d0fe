"""The interval's transfer errors are what the held-out files give.

``tokenwatt.predict.transfer`` states σ of ln(measured ÷ predicted) per kind of transfer; the
figures were computed by ``benchmarks/predict_heldout.py`` on four ML.ENERGY files that no
score reads (tests/fixtures/public/mlenergy-heldout). This recomputes them from those files with
the code's own rules, so a change of the model or of the files that moves them fails here.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tokenwatt.predict import transfer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
HELDOUT = Path(__file__).parent / "fixtures" / "public" / "mlenergy-heldout"


def _rms(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


def test_the_stated_transfer_errors_are_the_held_out_rms() -> None:
    import predict_heldout

    cells = predict_heldout._transfer_evidence(HELDOUT)

    def pool(keys: list[tuple[str, bool]], i: int) -> list[float]:
        return [x for k in keys for x in (p[i] for p in cells[k]) if x is not None]

    short = [("accelerator", False), ("accelerator+tp", False)]
    long = [("accelerator", True), ("accelerator+tp", True)]
    load = [("load", False), ("load", True)]
    # (points, stated figure) per pool: the counts the methodology states
    for values, n, stated in (
        (pool(short, 0), 18, transfer.ACCELERATOR_TRANSFER),
        (pool(long, 0), 8, transfer.ACCELERATOR_TRANSFER_LONG_OUTPUT),
        (pool(load, 0), 26, transfer.LOAD_TRANSFER),
        (pool(short + long, 1), 26, transfer.POWER_ACCELERATOR_TRANSFER),
        (pool(load, 1), 26, transfer.POWER_LOAD_TRANSFER),
    ):
        assert len(values) == n
        assert _rms(values) == pytest.approx(stated, abs=0.005)


def test_the_regime_threshold_parts_chat_from_gpqa() -> None:
    """2,048 tokens lies between every held-out chat configuration's mean output and every
    GPQA one's (about 620 and 7,000)."""
    from tokenwatt.predict.mlenergy import read_mlenergy

    for path in sorted(HELDOUT.glob("*.json")):
        outputs = [c.avg_output_len for c in read_mlenergy(path)[1]]
        if "gpqa" in path.name:
            assert min(outputs) > transfer.LONG_OUTPUT_TOKENS
        else:
            assert max(outputs) < transfer.LONG_OUTPUT_TOKENS


def test_the_long_output_line_states_the_held_out_slowdown() -> None:
    """``LONG_OUTPUT_SEEN`` says the held-out GPQA B200 steps ran 1.4-4 times slower than
    predicted: the 8 long-output transfers' measured ÷ predicted, from the files."""
    import predict_heldout

    cells = predict_heldout._transfer_evidence(HELDOUT)
    ratios = [math.exp(p[0]) for k in (("accelerator", True), ("accelerator+tp", True))
              for p in cells[k]]  # fmt: skip
    assert len(ratios) == 8
    assert round(min(ratios), 1) == 1.4 and round(max(ratios)) == 4
    assert "1.4-4 times slower than predicted" in transfer.LONG_OUTPUT_SEEN
