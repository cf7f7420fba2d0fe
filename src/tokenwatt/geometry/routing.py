"""Expected distinct experts a step reads, per MoE layer, under uniform or measured routing.

A token picks expert r of a layer with probability π_r (Σ_r π_r = k, the top-k). A step whose
routed token count is the random variable X reads expert r unless every token missed it, so

    E[distinct] = Σ_r (1 − G_X(1 − π_r)),   G_X(x) = E[x^X]   (X's generating function)

which is exact for any law of X when tokens route independently (and for a fixed X = T with
uniform routing it is the seed's E·(1 − (1 − k/E)^T)). Uniform routing has π_r = k/E; a
measured expert-load histogram (tokens routed to each expert over a window, as SGLang's
expert distribution recorder and vLLM's expert-load statistics give it) has π_r = k · n_r / Σ n
per layer. Skewed loads make tokens collide, so they read fewer experts than uniform routing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from tokenwatt.bounded import IMPORT_MAX_BYTES, read_bounded
from tokenwatt.errors import SpecError

__all__ = [
    "ExpertLoad",
    "GeneratingFunction",
    "expert_load_from_counts",
    "load_expert_load",
    "read_expert_counts",
]


if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import numpy.typing as npt

# numpy is imported where a figure is computed, not here: the spec reaches this module, and a
# command that only parses a spec (or prints its help) then starts without numpy.
FloatArray: TypeAlias = "npt.NDArray[np.float64]"
# G_X evaluated element-wise at x = 1 − π (an array): E[x^X] for the step's routed tokens X.
GeneratingFunction: TypeAlias = "Callable[[FloatArray], FloatArray]"


@dataclass(frozen=True, slots=True)
class ExpertLoad:
    """Per-token inclusion probability of every expert of every MoE layer (rows sum to k)."""

    inclusion: FloatArray  # shape (layers, experts)
    source: str  # "uniform" or the file / engine it was read from

    @classmethod
    def uniform(cls, experts: int, k: int) -> ExpertLoad:
        import numpy as np  # noqa: PLC0415 - numpy on first use (see FloatArray)

        return cls(np.full((1, experts), k / experts), "uniform")

    @classmethod
    def from_counts(cls, counts: Sequence[Sequence[float]], k: int, source: str) -> ExpertLoad:
        """π_r = k · n_r / Σ n per layer, capped at 1 (an expert cannot be picked twice by one
        token), the cap's excess spread over the uncapped experts so each row still sums to k."""
        import numpy as np  # noqa: PLC0415 - numpy on first use (see FloatArray)

        arr = np.asarray(counts, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] < k or not np.isfinite(arr).all() or (arr < 0).any():
            raise ValueError("expert load must be a non-negative matrix: layers × experts (≥ k)")
        rows = []
        for row in arr:
            total = row.sum()
            if total <= 0:
                raise ValueError("every layer of an expert load needs at least one routed token")
            rows.append(_cap_inclusion(row / total * k, k))
        return cls(np.vstack(rows), source)

    @classmethod
    def zipf(cls, experts: int, k: int, s: float) -> ExpertLoad:
        """π_r = min(1, c·r^−s) with Σ π = k (rank order): one row for every layer."""
        import numpy as np  # noqa: PLC0415 - numpy on first use (see FloatArray)

        if s < 0 or not np.isfinite(s):
            raise ValueError(f"Zipf exponent must be a finite number >= 0, got {s}")
        ranks = np.arange(1, experts + 1, dtype=np.float64)
        return cls.from_counts([(ranks**-s).tolist()], k, f"zipf:{s:g}")

    @classmethod
    def fewest(cls, experts: int, k: int) -> ExpertLoad:
        """The routing that touches the fewest experts any routing could: every token picks the
        same k experts (π = 1 for k of them, 0 for the rest), so every step that routes at
        least one token reads exactly k experts per MoE layer. Each token picks k *distinct*
        experts, so no step can read fewer, whatever the batch: a true lower bound, where an
        assumed exponent would be a guess."""
        if not 1 <= k <= experts:
            raise ValueError(f"top-k must lie in 1..experts, got k={k}, experts={experts}")
        return cls.from_counts([[1.0] * k + [0.0] * (experts - k)], k, f"fewest:{k}")

    @property
    def experts(self) -> int:
        return int(self.inclusion.shape[1])

    def expected_distinct(self, generating: GeneratingFunction) -> float:
        """Mean over layers of Σ_r (1 − G_X(1 − π_r)): distinct experts read per MoE layer."""
        miss = 1.0 - self.inclusion
        return float((1.0 - generating(miss)).sum(axis=1).mean())

    def expected_distinct_fixed(self, tokens: float) -> float:
        """Distinct experts per layer for exactly ``tokens`` routed tokens (fractional allowed)."""
        return 0.0 if tokens <= 0 else self.expected_distinct_with(tokens, None)[0]

    def expected_distinct_with(
        self, tokens: float, more: GeneratingFunction | None
    ) -> tuple[float, float]:
        """Distinct experts per layer for ``tokens`` routed tokens, and for those plus the
        random tokens whose generating function is ``more`` (a step's prompt chunks; None:
        none). The same sum as ``expected_distinct``, the power taken once for both."""
        import numpy as np  # noqa: PLC0415 - numpy on first use (see FloatArray)

        kept = np.power(1.0 - self.inclusion, max(tokens, 0.0))
        alone = float((1.0 - kept).sum(axis=1).mean())
        if more is None:
            return alone, alone
        return alone, float((1.0 - kept * more(1.0 - self.inclusion)).sum(axis=1).mean())


def _cap_inclusion(pi: FloatArray, k: int) -> FloatArray:
    import numpy as np  # noqa: PLC0415 - numpy on first use (see FloatArray)

    capped = np.zeros(len(pi), dtype=bool)
    out = pi.copy()
    for _ in range(len(pi)):
        over = (~capped) & (out > 1.0)
        if not over.any():
            break
        capped |= over
        free = ~capped
        budget = k - capped.sum()
        weight = pi[free].sum()
        out[capped] = 1.0
        out[free] = pi[free] * budget / weight if weight > 0 else 0.0
    return np.minimum(out, 1.0)


def read_expert_counts(path: str | Path) -> list[list[float]]:
    """Read and check a measured expert-load file, JSON ``{"counts": [[n per expert] per MoE
    layer]}`` (or the bare matrix; one row applies to every layer): a non-empty matrix of
    finite non-negative token counts, rows of one length, every row with a routed token.
    Anything else is a one-line SpecError naming the file and the fix. The geometry's shape is
    checked by ``expert_load_from_counts``."""
    import numpy as np  # noqa: PLC0415 - numpy on first use (see FloatArray)

    p = Path(path)
    fix = 'give a JSON file {"counts": [[tokens per expert] per MoE layer]}'
    try:
        data = json.loads(read_bounded(p, max_bytes=IMPORT_MAX_BYTES, error=SpecError))
        counts = data["counts"] if isinstance(data, dict) else data
        if counts and not isinstance(counts[0], list):
            counts = [counts]
        arr = np.asarray(counts, dtype=np.float64)
    except (OSError, SpecError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise SpecError(
            f"engine.expert_load_file {str(p)!r} is unreadable ({exc}); {fix}"
        ) from None
    if arr.ndim != 2 or arr.size == 0 or not np.isfinite(arr).all() or (arr < 0).any():
        raise SpecError(
            f"engine.expert_load_file {str(p)!r} is not a matrix of non-negative token counts "
            f"(layers × experts); {fix}"
        )
    if (arr.sum(axis=1) <= 0).any():
        raise SpecError(
            f"engine.expert_load_file {str(p)!r}: a layer has no routed token; give counts "
            "measured over a window that decoded"
        )
    return [[float(x) for x in row] for row in arr]


def expert_load_from_counts(
    counts: Sequence[Sequence[float]], *, source: str, experts: int, k: int, layers: int
) -> ExpertLoad:
    """The model's expert load from checked counts (``read_expert_counts``): one row per MoE
    layer or one for all, one count per expert; a wrong shape is a one-line SpecError."""
    rows = len(counts)
    if any(len(r) != experts for r in counts) or rows not in (1, layers):
        raise SpecError(
            f"engine.expert_load_file {source!r} has {rows} rows of "
            f"{sorted({len(r) for r in counts})} experts; the model has {layers} MoE layers of "
            f"{experts} experts: give one row per MoE layer (or one row for all)"
        )
    try:
        return ExpertLoad.from_counts(counts, k, source)
    except ValueError as exc:
        raise SpecError(f"engine.expert_load_file {source!r}: {exc}") from None


def load_expert_load(path: str | Path, *, experts: int, k: int, layers: int) -> ExpertLoad:
    """Read a measured expert-load file and fit it to the model (both checks above)."""
    return expert_load_from_counts(
        read_expert_counts(path), source=str(Path(path)), experts=experts, k=k, layers=layers
    )
