"""The simulated OpenAI-compatible engine: continuous batching on a bandwidth roofline.

    acc = get_accelerator("h100-sxm")
    config = SimConfig(geometry=load_geometry("llama-3.1-8b"), accelerator=acc)
    with start_sim_thread(config) as sim:      # or start_sim_subprocess / serve_sim
        ...  # sim.url == "http://127.0.0.1:PORT/v1", sim.metrics_url

``VirtualSim`` runs the same engine in virtual time for deterministic tests. The model,
its ground truth and its departures from real engines are described in docs/methodology.md.
"""

from __future__ import annotations

from tokenwatt.sim.config import BLOCK_SIZE, Derived, SimConfig
from tokenwatt.sim.engine import ReplicaEngine, SimRequest, Step
from tokenwatt.sim.node import SimNode
from tokenwatt.sim.run import RunningSim, serve_sim, start_sim_subprocess, start_sim_thread
from tokenwatt.sim.server import SimServer
from tokenwatt.sim.tokens import (
    CHAT_TOKENS_PER_MESSAGE,
    CHAT_TOKENS_REPLY,
    count_chat_tokens,
    count_text_tokens,
)
from tokenwatt.sim.virtual import VirtualSim

__all__ = [
    "BLOCK_SIZE",
    "CHAT_TOKENS_PER_MESSAGE",
    "CHAT_TOKENS_REPLY",
    "Derived",
    "ReplicaEngine",
    "RunningSim",
    "SimConfig",
    "SimNode",
    "SimRequest",
    "SimServer",
    "Step",
    "VirtualSim",
    "count_chat_tokens",
    "count_text_tokens",
    "serve_sim",
    "start_sim_subprocess",
    "start_sim_thread",
]
