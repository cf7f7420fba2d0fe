"""The endpoint a run drives: a URL from the spec, or the built-in simulator started for it.

``open_target(spec)`` is the one place in the library that starts the simulator, built from the
spec's ``model``, ``hardware`` and ``sim`` sections so that a simulated node is described
exactly like a real one. It also resolves the API key from the environment, opens the
streaming client and checks ``/models`` once, so a wrong URL or model fails before any load
is sent, in one line.

The simulator runs in a thread of this process by default (cheap, starts in milliseconds).
It then shares the GIL with the client; the client's receive stamps come from the kernel and
stay exact, but the simulator's own step timing can be delayed by the client's Python work.
``sim_mode="subprocess"`` puts it in its own process: use it where the simulator's timing is
itself the truth being compared (MBU validation), or on a busy client.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from tokenwatt.client import StreamClient
from tokenwatt.errors import SpecError, TargetError
from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import Accelerator, custom_accelerator, get_accelerator
from tokenwatt.load.identity import server_identity
from tokenwatt.metrics.slo import slo_timeouts
from tokenwatt.result import RunTarget
from tokenwatt.sim import RunningSim, SimConfig, start_sim_subprocess, start_sim_thread
from tokenwatt.sim.names import SIM_SERVER_NAME
from tokenwatt.simsettings import SimSettings
from tokenwatt.spec import BenchSpec
from tokenwatt.spec.hardware import HardwareSection

__all__ = ["SimMode", "Target", "open_target", "resolve_accelerator", "resolve_api_key"]

SimMode = Literal["thread", "subprocess"]


@dataclass(slots=True)
class Target:
    """An opened endpoint. ``api_key`` is deliberately absent: only the client holds it."""

    base_url: str  # ends in /v1
    model: str  # the served model name requests use
    models: list[str]  # what /models listed
    client: StreamClient
    kind: Literal["remote", "sim"]
    sim_mode: SimMode | None = None
    sim: RunningSim | None = None
    server_identity: str | None = None  # a remote endpoint that said it is the simulator

    @property
    def metrics_url(self) -> str | None:
        """The simulator's Prometheus endpoint (None for a remote target)."""
        return self.sim.metrics_url if self.sim is not None else None

    def record(self, sim: SimSettings) -> RunTarget:
        """``result.target``: what was driven; for the simulator, the settings it ran with
        (``sim``, the spec's section: the simulator was built from exactly it)."""
        simulated = self.kind == "sim"
        return RunTarget(
            kind="sim" if simulated else "endpoint",
            base_url=self.base_url,
            model=self.model,
            sim_mode=self.sim_mode if simulated else None,
            sim=SimSettings.model_validate(sim.model_dump()) if simulated else None,
            server_identity=None if simulated else self.server_identity,
        )


def resolve_api_key(spec: BenchSpec) -> str | None:
    """The key from the environment variable the spec names; a missing variable is an error."""
    name = spec.endpoint.api_key_env
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise SpecError(
            f"endpoint.api_key_env: environment variable {name} is not set (export {name}=... "
            "or remove api_key_env for an endpoint without a key)"
        )
    return value


def resolve_accelerator(hw: HardwareSection) -> Accelerator:
    """The spec's accelerator: a catalog entry, custom figures, or a catalog entry overridden."""
    base = get_accelerator(hw.accelerator) if hw.accelerator is not None else None
    if hw.custom is None:
        assert base is not None  # the spec requires one of the two
        return base
    c = hw.custom
    acc = custom_accelerator(
        base.name if base is not None else "custom",
        bandwidth_bytes_per_s=c.bandwidth_bytes_per_s,
        memory_bytes=c.memory_bytes,
        tdp_w=c.tdp_w,
        bf16_dense_flops=c.bf16_dense_flops,
        fp8_dense_flops=c.fp8_dense_flops,
        base=base,
    )
    if c.measured:  # not a rated figure: say where, when and how it came, and how it varied
        return replace(acc, source=c.measured_source(), confidence="measured")
    return acc


def sim_config(spec: BenchSpec, *, truth_log: str | Path | None = None) -> SimConfig:
    """The simulator the spec describes: its model, its node, its ``sim`` knobs.

    ``truth_log`` (the caller's) wins over the spec's ``sim.truth_log``.
    """
    m, hw = spec.model, spec.hardware
    geometry = load_geometry(
        m.source, weight_dtype=m.weight_dtype, kv_dtype=m.kv_dtype, overrides=m.overrides or None
    )
    if hw.gpus % hw.replicas:
        raise SpecError(
            f"the built-in simulator gives each replica whole GPUs: hardware.gpus ({hw.gpus}) "
            f"must be a multiple of hardware.replicas ({hw.replicas}) there; replicas that "
            "share GPUs (MPS) are measured on a real engine"
        )
    settings = spec.sim
    if truth_log is not None:
        settings = settings.model_copy(update={"truth_log": str(truth_log)})
    return SimConfig.from_settings(
        settings,
        geometry=geometry,
        accelerator=resolve_accelerator(hw),
        gpus_per_replica=hw.gpus // hw.replicas,
        replicas=hw.replicas,
        served_model_name=spec.endpoint.model or "",
    )


def _pick_model(wanted: str | None, models: list[str], url: str) -> str:
    if wanted is None:
        if not models:
            raise TargetError(f"{url}/models lists no model; set endpoint.model")
        return models[0]
    if models and wanted not in models:
        raise TargetError(
            f"endpoint.model {wanted!r} is not served at {url} (its /models lists: "
            f"{', '.join(models[:10])}{', …' if len(models) > 10 else ''})"
        )
    return wanted


@asynccontextmanager
async def open_target(
    spec: BenchSpec,
    *,
    sim_mode: SimMode = "thread",
    truth_log: str | Path | None = None,
    max_connections: int = 4096,
) -> AsyncIterator[Target]:
    """Start (for ``endpoint.url: sim``) or reach the endpoint, check ``/models``, and yield a
    ``Target`` with an open ``StreamClient``; everything is closed and stopped on exit."""
    ep = spec.endpoint
    api_key = resolve_api_key(spec)
    sim: RunningSim | None = None
    if ep.is_sim:
        cfg = sim_config(spec, truth_log=truth_log)
        sim = start_sim_thread(cfg) if sim_mode == "thread" else start_sim_subprocess(cfg)
        base_url = sim.url
    else:
        base_url = ep.url
    try:
        # The model name is only needed for request bodies; /models is asked first.
        client = StreamClient(
            base_url,
            api=ep.api,
            model=ep.model or "",
            api_key=api_key,
            timeouts=slo_timeouts(ep.timeouts, spec.slo),
            extra_body=ep.extra_body,
            stream_usage=ep.stream_usage,
            max_connections=max_connections,
        )
        try:
            models = await client.list_models()
            client.model = _pick_model(ep.model, models, client.safe_url)
            identity = None
            if sim is None:  # a simulator this run did not start says what it is
                identity = await asyncio.to_thread(server_identity, base_url, SIM_SERVER_NAME)
            yield Target(
                base_url=base_url,
                model=client.model,
                models=models,
                client=client,
                kind="sim" if sim is not None else "remote",
                sim_mode=sim_mode if sim is not None else None,
                sim=sim,
                server_identity=identity,
            )
        finally:
            await client.aclose()
    finally:
        if sim is not None:
            sim.stop()
