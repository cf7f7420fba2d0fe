"""CLI: ``tokenwatt geometry`` (what a model reads per decode step) and ``tokenwatt hardware``.

Units on screen: parameters in B (10^9), weight bytes in GB (10^9 B), one expert in MiB,
KV per token in KiB, bandwidth in TB/s (10^12 B/s). ``--json`` prints exact integers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from tokenwatt.errors import GeometryError, HardwareError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from tokenwatt.geometry import ModelGeometry
    from tokenwatt.hardware import Accelerator


def _parse_sets(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise GeometryError(f"--set needs FIELD=VALUE (e.g. --set layers=32), got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _parse_batches(text: str | None) -> list[int]:
    if text is None:
        return []
    out: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part.isdigit() or int(part) < 1:
            raise GeometryError(
                f"--batch takes positive whole numbers, comma-separated (e.g. 1,8,64), got {text!r}"
            )
        out.append(int(part))
    return out


def _per_batch(g: ModelGeometry, batches: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "batch": b,
            "expected_unique_experts": g.expected_unique_experts(b),
            "weight_bytes_per_step": round(g.weight_bytes_per_step(b)),
        }
        for b in batches
    ]


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def _add_kv_rows(t: Table, g: ModelGeometry) -> None:
    """KV bytes per cached token: all layers, the part that grows with context, each group."""
    t.add_row("KV dtype", g.kv_dtype, "")
    t.add_row(
        "KV per cached token",
        f"{g.kv_bytes_per_token_all_layers / 1024:,.2f} KiB",
        "all attention layers (within every window)",
    )
    t.add_row(
        "  growing with context",
        f"{g.kv_bytes_per_token_full_context / 1024:,.2f} KiB",
        "full-attention + MLA layers",
    )
    for grp in g.kv_groups:
        window = f", window {grp.window:,}" if grp.window else ""
        t.add_row(
            f"  {grp.kind} layers",
            f"{grp.bytes_per_token / 1024:,.2f} KiB",
            f"{grp.layers} layers{window}",
        )


def _show_geometry(g: ModelGeometry, rows: list[dict[str, Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    def b(n: float) -> str:
        return f"{n / 1e9:,.3f} B"

    def gb(n: float) -> str:
        return f"{n / 1e9:,.2f} GB"

    t = Table(title=f"{g.name}  ({g.model_type})", show_header=False, title_justify="left")
    t.add_column("figure", style="bold")
    t.add_column("value", justify="right")
    t.add_column("note", style="dim")
    t.add_row("total params", b(g.total_params), "incl. embedding + LM head")
    t.add_row("active params", b(g.active_params), "dense + top-k + shared")
    if g.mtp_params:
        t.add_row("MTP params", b(g.mtp_params), "next-token-prediction layers, apart")
    tied = " (tied: stored once)" if g.tied_embeddings else ""
    t.add_row("embedding / LM head", f"{b(g.embedding_params)} / {b(g.lm_head_params)}", tied)
    t.add_section()
    t.add_row("layers", str(g.layers), "")
    if g.is_moe:
        t.add_row("MoE layers", str(g.moe_layers), "")
        t.add_row(
            "experts",
            f"{g.experts} routed, top-{g.experts_per_token}",
            f"+ {g.shared_experts} shared" if g.shared_experts else "no shared expert",
        )
        t.add_row("one expert", f"{g.expert_params / 1e6:,.2f} M params", "")
    t.add_section()
    t.add_row("weight dtype", g.weight_dtype, "")
    exact = any(n.startswith(("exact tensor bytes", "weight bytes from")) for n in g.notes)
    head_note = "head as stored" if exact else "head at 2 B/param"
    t.add_row("dense weight bytes", gb(g.dense_weight_bytes), f"every step; {head_note}")
    if g.is_moe:
        t.add_row("one expert", f"{g.expert_bytes / 2**20:,.2f} MiB", "")
    if g.stored_weight_bytes:
        t.add_row("checkpoint weights", gb(g.stored_weight_bytes), "to hold in memory")
    t.add_section()
    _add_kv_rows(t, g)
    console = _console()
    console.print(t)
    if rows:
        bt = Table(title="per decode step", title_justify="left")
        bt.add_column("batch", justify="right")
        bt.add_column("distinct experts per layer", justify="right")
        bt.add_column("weight bytes W(B)", justify="right")
        for row in rows:
            bt.add_row(
                str(row["batch"]),
                f"{row['expected_unique_experts']:.2f}",
                gb(row["weight_bytes_per_step"]),
            )
        console.print(bt)
    for note in g.notes:
        console.print(f"[dim]note: {escape(str(note))}[/]")
    console.print(f"[dim]source: {escape(str(g.source))}[/]")


def geometry(  # noqa: PLR0917 (typer maps parameters to options)
    model: str = typer.Argument(
        ..., help="preset (e.g. qwen3-30b-a3b), config.json, folder, or cached HF repo id"
    ),
    weights: str | None = typer.Option(
        None, "--weights", help="weight dtype: bf16, fp16, fp32, fp8, int8, int4, mxfp4, nvfp4"
    ),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV dtype (default bf16)"),
    sets: list[str] = typer.Option(  # noqa: B008
        [], "--set", help="FIELD=VALUE: any geometry field, or config.KEY=VALUE (repeatable)"
    ),
    batch: str | None = typer.Option(None, "--batch", help="batch sizes, e.g. 1,8,64"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """What a model reads per decode step: parameters, weight bytes, experts, KV cache."""
    from tokenwatt.geometry import load_geometry

    overrides = _parse_sets(sets)
    batches = _parse_batches(batch)
    g = load_geometry(model, weight_dtype=weights, kv_dtype=kv_dtype, overrides=overrides)
    rows = _per_batch(g, batches)
    if as_json:
        data = g.to_dict()
        data["kv_bytes_per_token_all_layers"] = g.kv_bytes_per_token_all_layers
        if batch is not None:
            data["per_batch"] = rows
        typer.echo(json.dumps(data, indent=2))
        return
    _show_geometry(g, rows)


def _show_accelerators(accs: list[Accelerator]) -> None:
    from rich.table import Table

    def tf(v: float | None) -> str:
        return f"{v / 1e12:,.0f}" if v else "-"

    t = Table(
        title="accelerators (rated, per device; TF/s = dense 10^12 FLOP/s)", title_justify="left"
    )
    for col, just in (
        ("name", "left"), ("mem GB", "right"), ("TB/s", "right"), ("TDP W", "right"),
        ("BF16 TF/s", "right"), ("FP8 TF/s", "right"), ("confidence", "left"),
    ):  # fmt: skip
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for a in accs:
        t.add_row(
            a.name,
            f"{(a.memory_bytes or 0) / 1e9:,.0f}" if a.memory_bytes else "-",
            f"{a.bandwidth_bytes_per_s / 1e12:,.3f}",
            f"{a.tdp_w:,.0f}" if a.tdp_w else "-",
            tf(a.bf16_dense_flops),
            tf(a.fp8_dense_flops),
            a.confidence,
        )
    _console().print(t)


def _show_accelerator(a: Accelerator) -> None:
    from rich.table import Table

    t = Table(title=a.display_name, show_header=False, title_justify="left")
    t.add_column("figure", style="bold")
    t.add_column("value")
    t.add_row("name", a.name + (f" (also: {', '.join(a.aliases)})" if a.aliases else ""))
    t.add_row("vendor", a.vendor)
    if a.memory_bytes is not None:
        t.add_row("memory", f"{a.memory_bytes / 1e9:,.0f} GB ({a.memory_bytes:.4g} B)")
    t.add_row(
        "bandwidth",
        f"{a.bandwidth_bytes_per_s / 1e12:,.3f} TB/s ({a.bandwidth_bytes_per_s:.4g} B/s)",
    )
    t.add_row("TDP", f"{a.tdp_w:,.0f} W" if a.tdp_w else "not rated")
    for label, v in (("BF16 dense", a.bf16_dense_flops), ("FP8 dense", a.fp8_dense_flops)):
        t.add_row(label, f"{v / 1e12:,.1f} TFLOP/s" if v else "none")
    t.add_row("confidence", a.confidence)
    t.add_row("source", a.source)
    _console().print(t)


def _measure(as_json: bool) -> None:
    """Print the measured bandwidth and the spec lines that use it as a measured accelerator."""
    import os

    from tokenwatt.hardware.measure import measure_read_bandwidth

    m = measure_read_bandwidth()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if as_json:
        data = {"bandwidth_bytes_per_s": m.bandwidth_bytes_per_s, "nbytes": m.nbytes,
                "repeats": m.repeats, "best_s": m.best_s, "times_s": list(m.times_s),
                "spread": m.spread, "measured_at": m.measured_at, "method": m.method,
                "memory_bytes": memory}  # fmt: skip
        typer.echo(json.dumps(data, indent=2))
        return
    typer.echo(
        f"measured streaming-read bandwidth: {m.bandwidth_bytes_per_s / 1e9:.2f} GB/s "
        f"({m.bandwidth_bytes_per_s:.4g} B/s; {m.method}; at {m.measured_at}; the slowest "
        f"run {m.spread:.1%} below the best)"
    )
    typer.echo("to use it as the accelerator, in the spec:")
    typer.echo(
        "hardware:\n  accelerator: null\n  custom:\n"
        f"    bandwidth_bytes_per_s: {m.bandwidth_bytes_per_s:.4g}\n"
        f"    memory_bytes: {memory:.4g}\n    measured: true\n"
        f"    measured_at: '{m.measured_at}'\n    measured_method: '{m.method}'\n"
        f"    measured_spread: {m.spread:.4f}"
    )


_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off"})


def hardware(
    name: str | None = typer.Argument(None, help="accelerator, e.g. h100-sxm; omit to list all"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    measure: bool = typer.Option(
        False, "--measure", help="measure this machine's streaming-read bandwidth instead"
    ),
) -> None:
    """The accelerator catalog: rated bandwidth, memory, TDP and peak FLOP/s, with sources."""
    from tokenwatt.hardware import get_accelerator, list_accelerators

    if measure:
        _measure(as_json)
        return
    if name is None:
        accs = list_accelerators()
        if as_json:
            typer.echo(json.dumps([a.to_dict() for a in accs], indent=2))
        else:
            _show_accelerators(accs)
        return
    if not name.strip():
        raise HardwareError("give an accelerator name, e.g. h100-sxm (omit it to list all)")
    if name.lower() in _BOOL_WORDS:
        raise HardwareError(
            f"{name!r} is not an accelerator: --json is a flag and takes no value "
            "(tokenwatt hardware --json)"
        )
    acc = get_accelerator(name)
    if as_json:
        typer.echo(json.dumps(acc.to_dict(), indent=2))
    else:
        _show_accelerator(acc)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("geometry")(geometry)
    app.command("hardware")(hardware)
