"""CLI: ``tokenwatt mbu MODEL --hardware h100-sxm --gpus 2 --concurrency 4 --tpot-ms 17.41 ...``.

The MBU derivation as a calculator for figures measured elsewhere (a published table's row, a
peer tool's summary): every input is printed, every assumption that filled a gap is said in
words (``metrics.published``), every raised flag with its direction, ``--json`` for scripts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tokenwatt.cli.options import (
    BandwidthOption,
    GpusOption,
    HardwareOption,
    NodeFlags,
    ReplicasOption,
    SetOption,
)
from tokenwatt.errors import SpecError

if TYPE_CHECKING:
    from tokenwatt.geometry.model import ModelGeometry
    from tokenwatt.metrics.published import MbuEstimate, PublishedFigures

_F = float | None


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1e3


def _pairs_from(path: Path | None) -> list[tuple[int, int]] | None:
    """(prompt, output) tokens of the counted, finished requests of a TokenWatt requests.jsonl."""
    if path is None:
        return None
    from tokenwatt.bounded import IMPORT_MAX_BYTES, check_regular
    from tokenwatt.records import read_requests

    check_regular(path, max_bytes=IMPORT_MAX_BYTES, error=SpecError, what="--requests file")
    try:
        rows = read_requests(path)
    except (OSError, ValueError, KeyError) as exc:
        raise SpecError(f"--requests {path}: cannot read it ({exc})") from None
    pairs = [
        (r.prompt_tokens, r.output_tokens)
        for phase, r in rows
        if phase == "window" and r.status == "ok" and r.prompt_tokens is not None
    ]
    if not pairs:
        raise SpecError(f"--requests {path}: no finished window request with a prompt length")
    return pairs


def estimate_dict(
    est: MbuEstimate, geometry: ModelGeometry, hardware: dict[str, Any], given: dict[str, Any]
) -> dict[str, Any]:
    """Everything the calculator used and concluded, as ``--json`` prints it."""
    from tokenwatt.report.mbu_text import raised_flags

    return {
        "model": {
            "name": geometry.name,
            "source": geometry.source,
            "weight_dtype": geometry.weight_dtype,
            "kv_dtype": geometry.kv_dtype,
        },
        "hardware": hardware,
        "given": {k: v for k, v in given.items() if v is not None},
        "used": {
            "output_tokens_per_s": est.output_tokens_per_s,
            "itl_token_weighted_s": est.itl_s,
            "request_rate_rps": est.request_rate_rps,
            "mean_input_tokens": est.mean_input_tokens,
            "mean_output_tokens": est.mean_output_tokens,
        },
        "assumed": {
            "weight_dtype": geometry.weight_dtype,
            "weight_dtype_given": given.get("weights") is not None,
            "kv_dtype": geometry.kv_dtype,
            "kv_dtype_given": given.get("kv_dtype") is not None,
            "lengths": est.lengths,
            "regime": est.regime,
            "tau_from": est.tau_source,
        },
        "assumptions": est.assumptions,
        "mbu": est.headline,
        "mbu_decode_only": est.decode_only,
        "flags": raised_flags(est.mbu),
        "notes": est.mbu.notes,
        "detail": est.mbu.model_dump(mode="json"),
    }


def _show(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tokenwatt.report.format import fmt_pct

    d = data["detail"]["inputs"]
    t = Table(title=f"MBU · {data['model']['name']} on {data['hardware']['display']}")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("T output tokens/s (node)", f"{data['used']['output_tokens_per_s']:,.2f}")
    t.add_row("τ token-weighted ITL, ms", f"{data['used']['itl_token_weighted_s'] * 1e3:.3f}")
    t.add_row("B = T·τ/R per replica", f"{d['batch_per_replica']:.3f}")
    t.add_row("W(B) weight bytes per step, GB", f"{d['weight_bytes_per_step'] / 1e9:.3f}")
    t.add_row("mean context per token", f"{d['mean_context_per_token']:,.1f}")
    t.add_row("KV bytes per output token, MB", f"{d['kv_bytes_per_output_token'] / 1e6:.2f}")
    t.add_row("bytes/s (weights + KV), TB/s", f"{(d['bytes_per_s'] or 0) / 1e12:.3f}")
    t.add_row("node bandwidth, TB/s", f"{d['node_bandwidth_bytes_per_s'] / 1e12:.3f}")
    t.add_row("MBU (headline)", fmt_pct(data["mbu"]) if data["mbu"] is not None else "–")
    t.add_row("MBU decode-only", fmt_pct(data["mbu_decode_only"]))
    upper = data["detail"].get("mbu_lengths_upper_bound")
    if upper is not None:
        t.add_row("MBU at the longest lengths (band's top)", fmt_pct(upper))
    console = Console(highlight=False)
    console.print(t)
    given = ", ".join(f"{k} {v}" for k, v in data["given"].items())
    console.print(f"given: {escape(given)}", soft_wrap=True)
    for line in _basis_lines(data["assumed"]):
        console.print(escape(line), soft_wrap=True)
    for line in data["assumptions"]:
        console.print(f"assumed: {escape(line)}", soft_wrap=True)
    for line in data["flags"]:
        console.print(f"[yellow]flag:[/] {escape(line)}", soft_wrap=True)
    for line in data["notes"]:
        console.print(f"note: {escape(line)}", soft_wrap=True)


def _basis_lines(a: dict[str, Any]) -> list[str]:
    """What every figure above rests on: the dtypes (given or the model's own), the lengths
    and the regime; printed on every run, since a silent default moves MBU."""

    def dtype(kind: str, flag: str) -> str:
        value = a[f"{kind}_dtype"]
        if a[f"{kind}_dtype_given"]:
            return f"{value} (given)"
        return f"{value} (not given: the model's own; {flag} to change)"

    return [
        f"dtypes: weights {dtype('weight', '--weights')}, KV {dtype('kv', '--kv-dtype')}",
        f"lengths: {a['lengths']}",
        f"regime: {a['regime']}",
    ]


def _node(model: str, node: NodeFlags, sets: list[str]) -> tuple[dict[str, Any], Any]:
    """The node and model sections from the shared node flags and ``--set`` (the same forms
    every command takes: ``hardware.*``, ``model.*``, geometry overrides), validated as the
    spec's own sections; the hardware dict as ``--json`` prints it, and the model section."""
    from pydantic import ValidationError

    from tokenwatt.cli.options import apply_set
    from tokenwatt.load.target import resolve_accelerator
    from tokenwatt.spec import format_validation_error
    from tokenwatt.spec.dotted import put_dotted
    from tokenwatt.spec.hardware import HardwareSection, gpu_sharing_note
    from tokenwatt.spec.model import ModelSection

    doc: dict[str, Any] = {"model": {"source": model}, "hardware": {}}
    for key, value in node.spec_fields().items():
        put_dotted(doc, key, value)
    for item in sets:
        apply_set(doc, item)
    if other := sorted(set(doc) - {"model", "hardware"}):
        raise SpecError(f"--set {other[0]}.*: mbu takes hardware.*, model.* and geometry fields")
    if not doc["hardware"].get("accelerator") and not doc["hardware"].get("custom"):
        raise SpecError("give --hardware NAME (tokenwatt hardware lists them) or --bandwidth-tb-s")
    try:
        hw = HardwareSection.model_validate(doc["hardware"])
        section = ModelSection.model_validate(doc["model"])
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, source="flags")) from None
    acc = resolve_accelerator(hw)
    label = acc.display_name if hw.accelerator else "custom"
    if hw.custom is not None:  # the bandwidth given by hand is the one that counts
        label += f" at {acc.bandwidth_bytes_per_s / 1e12:.4g} TB/s"
    return {
        "display": f"{hw.gpus} × {label}",
        "accelerator": label,
        "bandwidth_bytes_per_s_per_gpu": acc.bandwidth_bytes_per_s,
        "gpus": hw.gpus,
        "replicas": hw.replicas,
        "gpu_sharing": gpu_sharing_note(hw.gpus, hw.replicas),
    }, section


def mbu(  # noqa: PLR0917 - one parameter per flag
    model: Annotated[str, typer.Argument(help="preset, config.json, folder, .gguf or HF id")],
    hardware: HardwareOption = None,
    gpus: GpusOption = None,
    replicas: ReplicasOption = None,
    bandwidth_tb_s: BandwidthOption = None,
    sets: SetOption = None,
    weights: Annotated[str | None, typer.Option("--weights", help="weight dtype")] = None,
    kv_dtype: Annotated[str | None, typer.Option("--kv-dtype", help="KV dtype")] = None,
    tokens_per_s: Annotated[
        _F, typer.Option("--output-tokens-per-s", help="T: output tokens/s of the node")
    ] = None,
    itl_ms: Annotated[_F, typer.Option("--itl-ms", help="token-weighted mean ITL, ms")] = None,
    tpot_ms: Annotated[_F, typer.Option("--tpot-ms", help="mean TPOT, ms")] = None,
    ttft_ms: Annotated[_F, typer.Option("--ttft-ms", help="mean TTFT, ms")] = None,
    concurrency: Annotated[_F, typer.Option("--concurrency", help="closed loop: C")] = None,
    request_rate: Annotated[_F, typer.Option("--request-rate", help="requests/s")] = None,
    input_tokens: Annotated[_F, typer.Option("--input-tokens", help="mean prompt")] = None,
    output_tokens: Annotated[_F, typer.Option("--output-tokens", help="mean output")] = None,
    idle_fraction: Annotated[_F, typer.Option("--idle-fraction", help="measured, 0-1")] = None,
    max_input_tokens: Annotated[
        _F, typer.Option("--max-input-tokens", help="longest prompt (lengths vary)")
    ] = None,
    max_output_tokens: Annotated[
        _F, typer.Option("--max-output-tokens", help="longest output (lengths vary)")
    ] = None,
    mean_lengths: Annotated[
        bool,
        typer.Option("--mean-lengths", help="--input/--output-tokens are means of varying ones"),
    ] = False,
    requests: Annotated[
        Path | None, typer.Option("--requests", help="TokenWatt requests.jsonl: exact lengths")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """MBU from measured figures (a published table's row, another tool's summary).

    e.g. tokenwatt mbu llama-3.1-70b --weights fp8 --hardware h100-sxm --gpus 2
    --concurrency 4 --tpot-ms 17.41 --input-tokens 1024 --output-tokens 1024
    """
    from tokenwatt.geometry import load_geometry

    node = NodeFlags(hardware, gpus, replicas, bandwidth_tb_s)
    hw, m = _node(model, node, list(sets or []))
    geometry = load_geometry(
        m.source,
        weight_dtype=weights or m.weight_dtype,
        kv_dtype=kv_dtype or m.kv_dtype,
        overrides=m.overrides or None,
    )
    given: dict[str, Any] = {
        "output_tokens_per_s": tokens_per_s,
        "itl_ms": itl_ms,
        "tpot_ms": tpot_ms,
        "ttft_ms": ttft_ms,
        "concurrency": concurrency,
        "request_rate_rps": request_rate,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "idle_fraction": idle_fraction,
        "max_input_tokens": max_input_tokens,
        "max_output_tokens": max_output_tokens,
        "requests": None if requests is None else str(requests),
        "weights": weights,
        "kv_dtype": kv_dtype,
    }
    figures = _published(given, requests, mean_lengths=mean_lengths)
    data = _estimate(geometry, figures, hw, given)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _show(data)


# Each ``PublishedFigures`` field's flag and the factor from the field's unit to the flag's.
_FLAG_OF: dict[str, tuple[str, float]] = {
    "output_tokens_per_s": ("--output-tokens-per-s", 1.0),
    "itl_s": ("--itl-ms", 1e3),
    "pooled_itl_s": ("--itl-ms", 1e3),
    "tpot_s": ("--tpot-ms", 1e3),
    "ttft_s": ("--ttft-ms", 1e3),
    "concurrency": ("--concurrency", 1.0),
    "request_rate_rps": ("--request-rate", 1.0),
    "input_tokens": ("--input-tokens", 1.0),
    "output_tokens": ("--output-tokens", 1.0),
    "max_input_tokens": ("--max-input-tokens", 1.0),
    "max_output_tokens": ("--max-output-tokens", 1.0),
    "idle_fraction": ("--idle-fraction", 1.0),
}


def _published(
    given: dict[str, Any], requests: Path | None, *, mean_lengths: bool
) -> PublishedFigures:
    """The flags' figures in the calculator's units (ms to s; exact lengths from a file)."""
    from tokenwatt.metrics.published import PublishedFigures

    g = given
    return PublishedFigures(
        output_tokens_per_s=g["output_tokens_per_s"],
        itl_s=_ms(g["itl_ms"]),
        tpot_s=_ms(g["tpot_ms"]),
        ttft_s=_ms(g["ttft_ms"]),
        concurrency=g["concurrency"],
        request_rate_rps=g["request_rate_rps"],
        input_tokens=g["input_tokens"],
        output_tokens=g["output_tokens"],
        idle_fraction=g["idle_fraction"],
        requests=_pairs_from(requests),
        # lengths given with their maxima are means of varying ones
        lengths_are_means=mean_lengths
        or g["max_input_tokens"] is not None
        or g["max_output_tokens"] is not None,
        max_input_tokens=g["max_input_tokens"],
        max_output_tokens=g["max_output_tokens"],
    )


def _estimate(
    geometry: ModelGeometry, figures: PublishedFigures, hw: dict[str, Any], given: dict[str, Any]
) -> dict[str, Any]:
    from tokenwatt.metrics.published import FIGURE_BOUNDS, mbu_from_figures, out_of_bounds

    for key, value in given.items():
        flag = "--" + key.removesuffix("_rps").replace("_", "-")
        low_ok = key in ("ttft_ms", "idle_fraction", "input_tokens")
        if isinstance(value, float) and not (value >= 0 if low_ok else value > 0):
            raise SpecError(f"{flag} must be {'>=' if low_ok else '>'} 0, got {value:g}")
    bad = out_of_bounds(figures)
    if bad is not None:
        name, value = bad
        flag, scale = _FLAG_OF[name]
        raise SpecError(
            f"{flag} must be a finite number up to {FIGURE_BOUNDS[name] * scale:g}, "
            f"got {value * scale:g}"
        )
    if figures.idle_fraction is not None and not 0 <= figures.idle_fraction < 1:
        raise SpecError(f"--idle-fraction must be in [0, 1), got {figures.idle_fraction}")
    est = mbu_from_figures(
        geometry,
        figures,
        bandwidth_bytes_per_s=hw["bandwidth_bytes_per_s_per_gpu"],
        gpus=hw["gpus"],
        replicas=hw["replicas"],
    )
    return estimate_dict(est, geometry, hw, given)


def register(app: typer.Typer) -> None:
    """Add this module's command to the app."""
    app.command("mbu")(mbu)
