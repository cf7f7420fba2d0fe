"""B and s from a token rate and a step time: the one definition (seed, mbu-notes §1).

    s = 1/τ           decode steps per second per replica
    B = T·τ / R       sequences decoded per step per replica (Little's law over the steps)

Why a base module: the client's MBU (``metrics.mbu``, ``metrics.mbu.spec_mbu``) and the engine
witness (``engine.compare``, which sets the client's B and s beside the engine's) must derive
the same B and s the same way, and ``engine`` never imports ``metrics``. Under speculative
decoding the caller passes steps, not tokens: T ÷ α and the ITL per chunk. Imports nothing of
tokenwatt.
"""

from __future__ import annotations

__all__ = ["batch_and_steps"]


def batch_and_steps(tokens_per_s: float, step_s: float, replicas: int) -> tuple[float, float]:
    """(B, s) per replica from T (node) and τ; s is 0 where no step time was measured."""
    batch = tokens_per_s * step_s / replicas
    steps_per_s = 1.0 / step_s if step_s > 0 else 0.0
    return batch, steps_per_s
