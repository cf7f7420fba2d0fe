"""CLI: ``tokenwatt sim``, the simulated OpenAI-compatible engine on a loopback port.

Its knob flags are built from ``SimSettings`` (one flag per field, ``--step-overhead-ms`` for
``step_overhead_ms``, ``--prefix-caching/--no-prefix-caching`` for a switch), so the command
accepts exactly what the spec's ``sim:`` section accepts, validated by the same model. Prints
one line with its URL once it is listening and stops cleanly on Ctrl-C or SIGTERM, closing the
truth log. Programs start the simulator as ``python -m tokenwatt.sim.child`` instead, which
announces itself with a JSON line.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import TYPE_CHECKING, Any

import typer
from pydantic import BaseModel, ValidationError

from tokenwatt.errors import SpecError
from tokenwatt.simsettings import SimSettings, settings_error

if TYPE_CHECKING:
    from tokenwatt.sim import SimConfig, SimServer

# Flags that are not simulator knobs: the model, the hardware and where to listen.
_NODE_FLAGS: list[tuple[str, Any, Any]] = [
    ("model", str | None, typer.Option(None, "--model", help="preset name, config.json or folder")),
    (
        "accelerator",
        str | None,
        typer.Option(None, "--accelerator", help="catalog name, e.g. h100-sxm"),
    ),
    ("gpus_per_replica", int, typer.Option(1, "--gpus-per-replica", help="GPUs per engine")),
    ("replicas", int, typer.Option(1, "--replicas", help="data-parallel engines")),
    ("weight_dtype", str | None, typer.Option(None, "--weight-dtype", help="e.g. bf16, fp8")),
    ("kv_dtype", str | None, typer.Option(None, "--kv-dtype", help="e.g. bf16, fp8")),
    ("served_model_name", str | None, typer.Option(None, "--served-model-name")),
    ("host", str, typer.Option("127.0.0.1", "--host", help="address to bind")),
    ("port", int, typer.Option(8000, "--port", help="0 picks a free port")),
]


def _optional(annotation: Any) -> Any:
    """``X`` or ``X | None`` → ``X | None``: every knob flag defaults to unset (the model's)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return annotation
    return annotation | None


def _flag_type(annotation: Any) -> Any:
    """A section of its own (``speculative``) is given on the command line in its string form."""
    args = typing.get_args(annotation) or (annotation,)
    if any(isinstance(a, type) and issubclass(a, BaseModel) for a in args):
        return str | None
    return _optional(annotation)


def _knob_parameters() -> list[inspect.Parameter]:
    """One option per ``SimSettings`` field, named after it, helped by its description."""
    params = []
    for name, field in SimSettings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{flag[2:]}"] if field.annotation is bool else [flag]
        default = field.default if field.default is not None else "unset"
        option = typer.Option(None, *decls, help=f"{field.description} (default {default})")
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=option,
                annotation=_flag_type(field.annotation),
            )
        )  # fmt: skip
    return params


def settings_from_flags(values: dict[str, Any]) -> SimSettings:
    """The flags given (None: not given) as validated settings; one-line ``SpecError``."""
    given = {k: v for k, v in values.items() if k in SimSettings.model_fields and v is not None}
    try:
        return SimSettings(**given)
    except ValidationError as exc:
        raise SpecError(settings_error(exc, source="tokenwatt sim")) from None


def _config(values: dict[str, Any]) -> SimConfig:
    from tokenwatt.geometry import load_geometry
    from tokenwatt.hardware import get_accelerator
    from tokenwatt.sim import SimConfig

    settings = settings_from_flags(values)
    if not values["model"]:
        raise SpecError("tokenwatt sim needs --model (a preset, config.json or folder)")
    if not values["accelerator"]:
        raise SpecError("tokenwatt sim needs --accelerator (see `tokenwatt hardware`)")
    geometry = load_geometry(
        values["model"], weight_dtype=values["weight_dtype"], kv_dtype=values["kv_dtype"]
    )
    return SimConfig.from_settings(
        settings,
        geometry=geometry,
        accelerator=get_accelerator(values["accelerator"]),
        gpus_per_replica=values["gpus_per_replica"],
        replicas=values["replicas"],
        served_model_name=values["served_model_name"] or "",
    )


def _announce(server: SimServer) -> None:
    config, d = server.config, server.node.derived
    print(
        f"tokenwatt sim: {config.served_model_name} on {config.replicas} × "
        f"{config.gpus_per_replica} × {config.accelerator.name}, efficiency "
        f"{config.settings.efficiency:g}, {d.num_blocks} KV blocks/replica; serving "
        f"{server.url}  (metrics {server.metrics_url})",
        flush=True,
    )
    if d.tdp_w is None:
        print(
            f"tokenwatt sim: {config.accelerator.name} has no TDP in the catalog: the "
            "energy counter stays at idle power 0 W",
            flush=True,
        )


def sim(**values: Any) -> None:
    """Serve a simulated OpenAI-compatible engine (continuous batching, bandwidth roofline)."""
    from tokenwatt.sim.child import serve

    config = _config(values)
    serve(config, values["host"], values["port"], _announce)


sim.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=o, annotation=a)
        for n, a, o in _NODE_FLAGS
    ]
    + _knob_parameters()
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("sim")(sim)
