"""The flags ``bench`` and ``probe`` share, in the form the peers use (vLLM ``bench serve``,
GuideLLM, AIPerf): ``--base-url``, ``--model``, ``--api``, ``--rate``, ``--duration``,
``--slo-ttft-ms``, ``--slo-tpot-ms`` and ``--set key=value``, over a spec or without one.

A flag is applied to the spec's YAML mapping *before* validation, so a flag is checked
exactly like the same field written in the spec, and its error names the field.
Without a spec the stated defaults are the spec's own (SLO p99 TTFT ≤ 2000 ms and
TPOT ≤ 200 ms, 1024 → 256 tokens, Poisson arrivals); ``--model`` then also names the
geometry (a bundled preset, a config.json or a cached Hugging Face id), and the
hardware must still be given (``--set hardware.accelerator=h100-sxm``): it changes MBU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenwatt.errors import SpecError
from tokenwatt.spec import BenchSpec, load_spec, parse_spec, read_spec_document
from tokenwatt.spec.dotted import put_dotted, yaml_value

__all__ = [
    "ApiOption",
    "BaseUrlOption",
    "Flags",
    "KwhOption",
    "ModelOption",
    "PriceOption",
    "SetOption",
    "SloTpotOption",
    "SloTtftOption",
    "apply_set",
    "build_spec",
]

BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="OpenAI-compatible server, e.g. http://127.0.0.1:8000 (/v1 is added), or 'sim'",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="served model name; without a spec also the geometry source (preset, "
        "config.json or Hugging Face id)",
    ),
]
ApiOption = Annotated[str | None, typer.Option("--api", help="completions or chat (endpoint.api)")]
SloTtftOption = Annotated[
    float | None, typer.Option("--slo-ttft-ms", help="TTFT limit, ms (slo.ttft_ms)")
]
SloTpotOption = Annotated[
    float | None, typer.Option("--slo-tpot-ms", help="TPOT limit, ms (slo.tpot_ms)")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="any spec field, KEY=VALUE with a dotted key (e.g. hardware.gpus=8); repeatable",
    ),
]

SpecArgument = Annotated[
    Path | None,
    typer.Argument(metavar="[SPEC]", help="benchmark spec (YAML); flags override it"),
]
PriceOption = Annotated[
    float | None,
    typer.Option(
        "--price-per-gpu-hour",
        help="one GPU's price per hour (hardware.price_per_gpu_hour): $/Mtok at the boundary",
    ),
]
KwhOption = Annotated[
    float | None,
    typer.Option(
        "--price-per-kwh",
        help="electricity per kWh (hardware.price_per_kwh): adds the measured energy's cost",
    ),
]
OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite", help="write into --out itself, replacing an earlier run's files there"
    ),
]


@dataclass(slots=True)
class Flags:
    """What the shared flags ask for; ``extra`` holds command-specific dotted keys."""

    base_url: str | None = None
    model: str | None = None
    api: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    sets: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def apply_set(doc: dict[str, Any], item: str) -> None:
    """One ``--set KEY=VALUE``; the value is read as YAML (8 → int, true → bool, [..] → list)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set: {item!r} is not KEY=VALUE (e.g. --set hardware.gpus=8)")
    value = yaml_value(raw)
    if key.strip() == "workload.dataset" and not isinstance(value, dict):
        raise SpecError(
            f"--set {item}: workload.dataset is a section; give the file: "
            "--set workload.dataset.path=FILE (or --dataset sharegpt:FILE)"
        )
    put_dotted(doc, key.strip(), value)


def _base_doc(spec_path: Path | None) -> tuple[dict[str, Any], str]:
    if spec_path is None:
        return {}, "flags"
    load_spec(spec_path)  # the file alone first, so that its own errors name the file
    doc: dict[str, Any] = read_spec_document(spec_path)
    return doc, str(spec_path)


def build_spec(spec_path: Path | None, flags: Flags) -> BenchSpec:
    """The spec file (or nothing) with the flags laid over it, validated once."""
    doc, source = _base_doc(spec_path)
    if spec_path is None:
        if flags.model is None:
            raise SpecError("give a spec file, or --model (and --base-url) to run without one")
        doc["name"] = flags.model.rsplit("/", 1)[-1]
        doc["model"] = {"source": flags.model}
    if flags.base_url is not None:
        put_dotted(doc, "endpoint.url", flags.base_url)
    if flags.model is not None and flags.base_url != "sim":
        put_dotted(doc, "endpoint.model", flags.model)
    for key, value in (
        ("endpoint.api", flags.api),
        ("slo.ttft_ms", flags.slo_ttft_ms),
        ("slo.tpot_ms", flags.slo_tpot_ms),
        *flags.extra.items(),
    ):
        if value is not None:
            put_dotted(doc, key, value)
    for item in flags.sets:
        apply_set(doc, item)
    return parse_spec(doc, source=source)
