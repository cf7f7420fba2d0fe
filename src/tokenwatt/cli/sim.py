"""CLI: ``tokenwatt sim``, the simulated OpenAI-compatible engine on a loopback port.

Prints one line with its URL once it is listening (``start_sim_subprocess`` waits for it)
and stops cleanly on Ctrl-C or SIGTERM, closing the truth log.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tokenwatt.errors import SpecError

if TYPE_CHECKING:
    from tokenwatt.sim import SimConfig


def _config(
    *,
    config_json: Path | None,
    model: str | None,
    accelerator: str | None,
    weight_dtype: str | None,
    kv_dtype: str | None,
    **opts: Any,
) -> SimConfig:
    from tokenwatt.sim import SimConfig

    if config_json is not None:
        try:
            data = json.loads(config_json.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise SpecError(f"--config-json {config_json}: cannot read it ({exc})") from None
        set_opts = {k: v for k, v in opts.items() if v is not None}
        data.update(set_opts)
        return SimConfig.from_dict(data)
    if not model:
        raise SpecError("tokenwatt sim needs --model (a preset, config.json or folder)")
    if not accelerator:
        raise SpecError("tokenwatt sim needs --accelerator (see `tokenwatt hardware`)")
    from tokenwatt.geometry import load_geometry
    from tokenwatt.hardware import get_accelerator

    geometry = load_geometry(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    return SimConfig(
        geometry=geometry,
        accelerator=get_accelerator(accelerator),
        **{k: v for k, v in opts.items() if v is not None},
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""

    @app.command("sim")
    def sim(  # noqa: PLR0917 - one parameter per flag
        model: str | None = typer.Option(
            None, "--model", help="preset name, config.json or folder"
        ),
        accelerator: str | None = typer.Option(
            None, "--accelerator", help="catalog name, e.g. h100"
        ),
        gpus_per_replica: int | None = typer.Option(None, "--gpus-per-replica", help="default 1"),
        replicas: int | None = typer.Option(
            None, "--replicas", help="data-parallel engines, default 1"
        ),
        efficiency: float | None = typer.Option(
            None, "--efficiency", help="fraction of rated bandwidth in decode, default 0.5"
        ),
        prefill_efficiency: float | None = typer.Option(
            None, "--prefill-efficiency", help="fraction of peak FLOP/s in prefill, default 0.5"
        ),
        no_prefill_cost: bool = typer.Option(
            False, "--no-prefill-cost", help="charge no time for prefill"
        ),
        step_overhead_ms: float | None = typer.Option(
            None, "--step-overhead-ms", help="fixed time added to every step, default 0"
        ),
        routing: str | None = typer.Option(None, "--routing", help="uniform (default) or zipf:S"),
        max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="default 256"),
        max_batched_tokens: int | None = typer.Option(
            None, "--max-batched-tokens", help="token budget per step, default 8192"
        ),
        kv_cache_gib: float | None = typer.Option(
            None, "--kv-cache-gib", help="KV capacity per replica; default memory×0.9 − weights"
        ),
        kv_cache_blocks: int | None = typer.Option(
            None, "--kv-cache-blocks", help="KV capacity per replica in 16-token blocks"
        ),
        max_model_len: int | None = typer.Option(None, "--max-model-len", help="default 32768"),
        output_len: str | None = typer.Option(
            None,
            "--output-len",
            help="length without ignore_eos: max, fixed:N, uniform:MIN:MAX, geometric:MEAN",
        ),
        served_model_name: str | None = typer.Option(None, "--served-model-name"),
        weight_dtype: str | None = typer.Option(None, "--weight-dtype", help="e.g. bf16, fp8"),
        kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="e.g. bf16, fp8"),
        tokens_per_chunk: int | None = typer.Option(None, "--tokens-per-chunk", help="test knob"),
        keepalive_s: float | None = typer.Option(None, "--keepalive-s", help="test knob"),
        error_after_tokens: int | None = typer.Option(
            None, "--error-after-tokens", help="test knob"
        ),
        stall_after_tokens: int | None = typer.Option(
            None, "--stall-after-tokens", help="test knob"
        ),
        host: str = typer.Option("127.0.0.1", "--host", help="address to bind"),
        port: int = typer.Option(8000, "--port", help="0 picks a free port"),
        truth_log: str | None = typer.Option(
            None, "--truth-log", help="JSONL, one object per step"
        ),
        seed: int | None = typer.Option(None, "--seed"),
        config_json: str | None = typer.Option(None, "--config-json", hidden=True),
    ) -> None:
        """Serve a simulated OpenAI-compatible engine (continuous batching, bandwidth roofline)."""
        config = _config(
            config_json=Path(config_json) if config_json else None,
            model=model,
            accelerator=accelerator,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            gpus_per_replica=gpus_per_replica,
            replicas=replicas,
            efficiency=efficiency,
            prefill_efficiency=prefill_efficiency,
            prefill_cost=False if no_prefill_cost else None,
            step_overhead_s=None if step_overhead_ms is None else step_overhead_ms / 1e3,
            routing=routing,
            max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens,
            kv_cache_bytes=None if kv_cache_gib is None else kv_cache_gib * 2**30,
            kv_cache_blocks=kv_cache_blocks,
            max_model_len=max_model_len,
            output_len=output_len,
            served_model_name=served_model_name,
            tokens_per_chunk=tokens_per_chunk,
            keepalive_interval_s=keepalive_s,
            error_after_tokens=error_after_tokens,
            stall_after_tokens=stall_after_tokens,
            truth_log=truth_log,
            seed=seed,
        )
        _serve(config, host, port)


def _serve(config: SimConfig, host: str, port: int) -> None:
    from tokenwatt.sim.run import new_event_loop
    from tokenwatt.sim.server import SimServer

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    server = SimServer(config, manage_gc=True)

    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start(host, port)
        except OSError as exc:
            raise SpecError(f"tokenwatt sim cannot bind {host}:{port}: {exc.strerror}") from None
        d = server.node.derived
        print(
            f"tokenwatt sim: {config.served_model_name} on {config.replicas} × "
            f"{config.gpus_per_replica} × {config.accelerator.name}, efficiency "
            f"{config.efficiency:g}, {d.num_blocks} KV blocks/replica; serving "
            f"{server.url}  (metrics {server.metrics_url})",
            flush=True,
        )
        if d.tdp_w is None:
            print(
                f"tokenwatt sim: {config.accelerator.name} has no TDP in the catalog: the "
                "energy counter stays at idle power 0 W",
                flush=True,
            )
        await stop.wait()
        await server.stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
