"""Physical checks before any load is sent: the stated node must be able to hold the model.

A spec that names too little hardware (a 70B model on "1 × H100") does not fail on the
endpoint, which serves on whatever it really has; it fails in the figures, as an MBU of 200%.
So the claim is checked at the start, in one line: each replica's GPUs (N_GPU ÷ R × memory
per GPU from the catalog) must hold every stored weight plus the KV cache of one of the
workload's longest requests, the least any engine needs to serve it.
"""

from __future__ import annotations

from tokenwatt.errors import SpecError
from tokenwatt.geometry.model import ModelGeometry
from tokenwatt.hardware import Accelerator
from tokenwatt.spec import BenchSpec
from tokenwatt.spec.workload import Empirical, Fixed, LogNormal, Normal, Uniform

__all__ = ["check_fits", "longest_request_tokens", "weight_bytes_stored"]

GB = 1e9


def weight_bytes_stored(g: ModelGeometry) -> float:
    """Every weight held in memory: the checkpoint's bytes where the parser knows them, else
    dense weights plus every expert of every MoE layer (what the simulator holds)."""
    if g.stored_weight_bytes:
        return float(g.stored_weight_bytes)
    return float(g.dense_weight_bytes + g.moe_layers * g.experts * g.expert_bytes)


def _longest(d: Fixed | Uniform | Normal | LogNormal | Empirical) -> int:
    """The longest length a distribution draws, or its centre where it is unbounded."""
    if isinstance(d, Fixed):
        return d.value
    if isinstance(d, Uniform):
        return d.max
    if isinstance(d, Normal):
        return d.max or round(d.mean)
    if isinstance(d, LogNormal):
        return d.max or round(d.median)
    return max(d.values) if d.values else 1


def longest_request_tokens(spec: BenchSpec) -> int:
    """Prompt + output of the workload's longest synthetic request (1 for traces/datasets,
    whose lengths are only known once read)."""
    w = spec.workload
    if w.trace is not None or w.dataset is not None:
        return 1
    return _longest(w.input_tokens) + _longest(w.output_tokens)


def check_fits(spec: BenchSpec, geometry: ModelGeometry, accelerator: Accelerator) -> None:
    """Raise a one-line ``SpecError`` when the stated hardware cannot hold the model, or a
    declaration of the ``engine`` section does not fit it (``EngineSection.check_against``);
    an accelerator given by its bandwidth alone states no memory, so there is nothing to check.
    Replicas that share GPUs (MPS) each hold their own weights in N_GPU ÷ R of the memory."""
    spec.engine.check_against(geometry)
    hw = spec.hardware
    if accelerator.memory_bytes is None:
        return
    memory = accelerator.memory_bytes * hw.gpus_per_replica
    weights = weight_bytes_stored(geometry)
    tokens = longest_request_tokens(spec)
    kv = float(geometry.kv_cache_bytes(tokens))
    if weights + kv <= memory:
        return
    need_gpus = hw.replicas * -(-(weights + kv) // accelerator.memory_bytes)
    raise SpecError(
        f"hardware: {geometry.name} needs {weights / GB:.1f} GB of weights + "
        f"{kv / GB:.2f} GB of KV for one {tokens}-token request, more than "
        f"{hw.gpus_per_replica:g} × {accelerator.name} ({memory / GB:.0f} GB per replica) hold; "
        f"state the real node (hardware.gpus ≥ {need_gpus:.0f}, or another accelerator)"
    )
