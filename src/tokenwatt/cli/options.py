"""The flags ``bench`` and ``probe`` share, in the form the peers use (vLLM ``bench serve``,
GuideLLM, AIPerf): ``--base-url``, ``--model``, ``--api``, ``--rate``, ``--duration``,
``--slo-ttft-ms``, ``--slo-tpot-ms`` and ``--set key=value``, over a spec or without one.

A flag is applied to the spec's YAML mapping *before* validation, so a flag is checked
exactly like the same field written in the spec, and its error names the field.
Without a spec the stated defaults are the spec's own (SLO p99 TTFT ≤ 2000 ms and
TPOT ≤ 200 ms, 1024 → 256 tokens, Poisson arrivals); ``--model`` then also names the
geometry (a bundled preset, a config.json or a cached Hugging Face id), and the
hardware must still be given (``--hardware h100-sxm``): it changes MBU.

The node flags (``--hardware``, ``--gpus``, ``--replicas``, ``--bandwidth-tb-s``) are defined
once here and taken by bench, probe, import, mbu and sweep alike (``NodeFlags``); ``--set``
also takes the geometry's overrides (``config.KEY=V``, ``layers=N``), so every hint the
geometry prints is a form each command accepts.
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
    "BandwidthOption",
    "BaseUrlOption",
    "Flags",
    "GpusOption",
    "HardwareOption",
    "KwhOption",
    "MaxTimeOption",
    "ModelOption",
    "NodeFlags",
    "PrecisionOption",
    "PriceOption",
    "ReplicasOption",
    "SetOption",
    "SloTpotOption",
    "SloTtftOption",
    "apply_set",
    "build_spec",
    "search_fields",
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
        help="any spec field, KEY=VALUE with a dotted key (e.g. hardware.gpus=8), or a "
        "geometry override (config.intermediate_size=N, layers=N, weight_dtype=fp8); repeatable",
    ),
]
# The node: the same four flags on bench, probe, import, mbu and sweep (``NodeFlags``).
HardwareOption = Annotated[
    str | None,
    typer.Option(
        "--hardware",
        help="accelerator, a catalog name such as h100-sxm-64gb (tokenwatt hardware lists "
        "them; hardware.accelerator)",
    ),
]
GpusOption = Annotated[
    int | None, typer.Option("--gpus", help="N_GPU: GPUs serving the model (hardware.gpus)")
]
ReplicasOption = Annotated[
    int | None,
    typer.Option(
        "--replicas",
        help="R: data-parallel engine replicas; more than --gpus (or not dividing it) when "
        "replicas share GPUs, MPS or fractional GPUs (hardware.replicas)",
    ),
]
BandwidthOption = Annotated[
    float | None,
    typer.Option(
        "--bandwidth-tb-s",
        help="memory bandwidth per GPU, TB/s: replaces the catalog's, or describes an "
        "unlisted accelerator (hardware.custom.bandwidth_bytes_per_s)",
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
# The search's precision and time limit: bench and every command that runs its search.
PrecisionOption = Annotated[
    float | None,
    typer.Option(
        "--precision",
        help="half width of the boundary's 95 % interval, as a fraction of its point (0.10: "
        "±10 %); the search probes until both ends are within it (search.precision)",
    ),
]
MaxTimeOption = Annotated[
    str | None,
    typer.Option(
        "--max-time",
        help="stop the search after this long (seconds, or 90s, 10m, 1h); the result names "
        "the interval's end left open (search.max_time_s)",
    ),
]
_TIME_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def search_fields(precision: float | None, max_time: str | None) -> dict[str, Any]:
    """The spec fields ``--precision`` and ``--max-time`` stand for (checked as the spec
    checks them; a malformed time is refused here, naming the flag)."""
    fields: dict[str, Any] = {}
    if precision is not None:
        fields["search.precision"] = precision
    if max_time is not None:
        text = max_time.strip().lower()
        unit = _TIME_UNITS_S.get(text[-1:]) if text else None
        number = text[:-1] if unit is not None else text
        try:
            seconds = float(number) * (unit or 1.0)
        except ValueError:
            raise SpecError(
                f"--max-time must be seconds or a number with s, m or h (e.g. 10m), got "
                f"{max_time!r}"
            ) from None
        fields["search.max_time_s"] = seconds
    return fields


OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite", help="write into --out itself, replacing an earlier run's files there"
    ),
]


@dataclass(frozen=True, slots=True)
class NodeFlags:
    """The node as the four shared flags describe it; ``spec_fields`` are the dotted spec
    fields they stand for, so each is checked like the same field written in a spec."""

    hardware: str | None = None
    gpus: int | None = None
    replicas: int | None = None
    bandwidth_tb_s: float | None = None

    def spec_fields(self) -> dict[str, Any]:
        for flag, value in (("--gpus", self.gpus), ("--replicas", self.replicas)):
            if value is not None and value < 1:
                raise SpecError(f"{flag} must be at least 1, got {value}")
        fields: dict[str, Any] = {
            "hardware.accelerator": self.hardware,
            "hardware.gpus": self.gpus,
            "hardware.replicas": self.replicas,
        }
        if self.bandwidth_tb_s is not None:
            if not self.bandwidth_tb_s > 0:
                raise SpecError(f"--bandwidth-tb-s must be > 0, got {self.bandwidth_tb_s}")
            fields["hardware.custom.bandwidth_bytes_per_s"] = self.bandwidth_tb_s * 1e12
        return {k: v for k, v in fields.items() if v is not None}


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


def _geometry_key(key: str) -> str | None:
    """The model.overrides key a ``--set`` key stands for, or None for a spec field:
    ``config.KEY``, ``model.overrides.KEY`` and a bare geometry field (``layers``) that is not
    a spec section. Why: every hint the geometry prints (``--set config.head_dim=N``) must be
    a form each command accepts."""
    if key.startswith("model.overrides."):
        return key.removeprefix("model.overrides.")
    if key.startswith("config."):
        return key
    if "." in key or key in BenchSpec.model_fields:
        return None
    from tokenwatt.geometry.overrides import overridable_fields

    return key if key in overridable_fields() else None


def apply_set(doc: dict[str, Any], item: str) -> None:
    """One ``--set KEY=VALUE``; the value is read as YAML (8 → int, true → bool, [..] → list).
    Geometry overrides (``config.KEY``, a ModelGeometry field) land in ``model.overrides``."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set: {item!r} is not KEY=VALUE (e.g. --set hardware.gpus=8)")
    value = yaml_value(raw)
    if (geo := _geometry_key(key.strip())) is not None:
        model = doc.setdefault("model", {})
        if not isinstance(model, dict):
            raise SpecError(f"--set {key.strip()}: model is a value, not a section")
        overrides = model.setdefault("overrides", {})
        if not isinstance(overrides, dict):
            raise SpecError(f"--set {key.strip()}: model.overrides is a value, not a section")
        overrides[geo] = value
        return
    if key.strip() == "workload.dataset" and not isinstance(value, dict):
        raise SpecError(
            f"--set {item}: workload.dataset is a section; give the file: "
            "--set workload.dataset.path=FILE (or --dataset sharegpt:FILE)"
        )
    put_dotted(doc, key.strip(), value)


def _base_doc(spec_path: Path | None) -> tuple[dict[str, Any], str]:
    if spec_path is None:
        return {}, "flags"
    # the file alone first, so that its own errors name the file (its expert-load file is
    # read once, by the validation of the spec with the flags laid over it)
    load_spec(spec_path, read_files=False)
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
