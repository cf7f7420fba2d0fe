"""CLI: ``tokenwatt mbu MODEL --hardware H100 --gpus 2 --concurrency 4 --tpot-ms 17.41 ...``.

The MBU derivation as a calculator for figures measured elsewhere (a published table's row, a
peer tool's summary): every input is printed, every assumption that filled a gap is said in
words (``metrics.published``), every raised flag with its direction, ``--json`` for scripts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
    console = Console(highlight=False)
    console.print(t)
    given = ", ".join(f"{k} {v}" for k, v in data["given"].items())
    console.print(f"given: {escape(given)}", soft_wrap=True)
    for line in data["assumptions"]:
        console.print(f"assumed: {escape(line)}", soft_wrap=True)
    for line in data["flags"]:
        console.print(f"[yellow]flag:[/] {escape(line)}", soft_wrap=True)
    for line in data["notes"]:
        console.print(f"note: {escape(line)}", soft_wrap=True)


def _hardware(name: str | None, bandwidth_tb_s: float | None, gpus: int, replicas: int) -> Any:
    from tokenwatt.hardware import get_accelerator

    if gpus < 1 or replicas < 1:
        raise SpecError(f"--gpus and --replicas must be at least 1, got {gpus} and {replicas}")
    if bandwidth_tb_s is not None:
        if not bandwidth_tb_s > 0:
            raise SpecError(f"--bandwidth-tb-s must be > 0, got {bandwidth_tb_s}")
        per_gpu = bandwidth_tb_s * 1e12
        label = name or "custom"
    elif name is None:
        raise SpecError("give --hardware NAME (tokenwatt hardware lists them) or --bandwidth-tb-s")
    else:
        acc = get_accelerator(name)
        per_gpu, label = acc.bandwidth_bytes_per_s, acc.display_name
    return {
        "display": f"{gpus} × {label}",
        "accelerator": label,
        "bandwidth_bytes_per_s_per_gpu": per_gpu,
        "gpus": gpus,
        "replicas": replicas,
    }


def mbu(  # noqa: PLR0917 - one parameter per flag
    model: Annotated[str, typer.Argument(help="preset, config.json, folder, .gguf or HF id")],
    hardware: Annotated[str | None, typer.Option("--hardware", help="accelerator name")] = None,
    gpus: Annotated[int, typer.Option("--gpus", help="N_GPU of the node")] = 1,
    replicas: Annotated[int, typer.Option("--replicas", help="R data-parallel replicas")] = 1,
    bandwidth_tb_s: Annotated[_F, typer.Option("--bandwidth-tb-s", help="per GPU, TB/s")] = None,
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
    from tokenwatt.metrics.published import PublishedFigures

    hw = _hardware(hardware, bandwidth_tb_s, gpus, replicas)
    geometry = load_geometry(model, weight_dtype=weights, kv_dtype=kv_dtype)
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
        "requests": None if requests is None else str(requests),
    }
    figures = PublishedFigures(
        output_tokens_per_s=tokens_per_s,
        itl_s=_ms(itl_ms),
        tpot_s=_ms(tpot_ms),
        ttft_s=_ms(ttft_ms),
        concurrency=concurrency,
        request_rate_rps=request_rate,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        idle_fraction=idle_fraction,
        requests=_pairs_from(requests),
    )
    data = _estimate(geometry, figures, hw, given)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _show(data)


def _estimate(
    geometry: ModelGeometry, figures: PublishedFigures, hw: dict[str, Any], given: dict[str, Any]
) -> dict[str, Any]:
    from tokenwatt.metrics.published import mbu_from_figures

    for key, value in given.items():
        flag = "--" + key.removesuffix("_rps").replace("_", "-")
        low_ok = key in ("ttft_ms", "idle_fraction", "input_tokens")
        if isinstance(value, float) and not (value >= 0 if low_ok else value > 0):
            raise SpecError(f"{flag} must be {'>=' if low_ok else '>'} 0, got {value:g}")
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
