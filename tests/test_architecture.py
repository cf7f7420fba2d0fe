"""The dependency direction the architecture promises, checked on the source itself.

cli → load/report → client/metrics/power → geometry/hardware/spec/records/result; the
result types (``tokenwatt.result``) sit at the base, so ``load`` writes the result without
touching the views package; sim uses geometry and hardware only (its ground truth must not
share code with the derivation it checks); ``load.target`` alone may start the simulator;
nothing imports cli. No exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenwatt"

_EVERY_PACKAGE = {
    "geometry", "hardware", "spec", "records", "result", "client", "load", "metrics", "power",
    "sim", "report", "cli", "engine", "simsettings", "httpget", "batch_steps",
    "promscrape",
}  # fmt: skip
# package → tokenwatt packages it must never import
FORBIDDEN: dict[str, set[str]] = {
    "geometry": {"client", "load", "metrics", "power", "sim", "report", "cli", "spec", "result"},
    "hardware": {
        "client",
        "load",
        "metrics",
        "power",
        "sim",
        "report",
        "cli",
        "geometry",
        "result",
    },
    "spec": {"client", "load", "metrics", "power", "sim", "report", "cli", "result"},
    "records": {"client", "load", "metrics", "power", "sim", "report", "cli", "result"},
    # the engine witness returns result types (EngineFigures, EngineAgreement): never the reverse
    "result": {"client", "load", "metrics", "power", "sim", "report", "cli", "engine"},
    # the sweep's record sits beside the result it summarises
    "sweep_result": {"client", "load", "metrics", "power", "sim", "report", "cli"},
    # the simulator's knobs, shared by spec, sim and cli: base code that imports no tokenwatt
    "simsettings": _EVERY_PACKAGE - {"simsettings"},
    "client": {"load", "metrics", "power", "sim", "report", "cli", "result"},
    "metrics": {"client", "load", "power", "sim", "report", "cli"},
    # the audit returns the result's EnergyAudit
    "power": {"client", "load", "sim", "report", "cli"},
    "sim": {
        "client",
        "load",
        "metrics",
        "power",
        "report",
        "cli",
        "spec",
        "records",
        "result",
        "batch_steps",
    },
    "report": {"client", "load", "sim", "cli", "importers"},
    # another tool's file → a result: reads with report.br02, derives with metrics
    "importers": {"client", "load", "power", "sim", "cli", "engine"},
    "load": {"cli", "report"},
    "engine": {"client", "load", "metrics", "power", "sim", "report", "cli"},
    # the one guarded, bounded GET of the scraping threads (engine, power): base code that
    # uses only the spec's redaction (no credentials in a message)
    "httpget": _EVERY_PACKAGE - {"httpget", "spec"},
    # one scrape of a Prometheus page (GET, stamp, parse), shared by engine and power
    "promscrape": _EVERY_PACKAGE - {"promscrape", "httpget", "spec"},
    # B = T·τ/R and s = 1/τ, shared by metrics (MBU) and engine (the witness): base code
    "batch_steps": _EVERY_PACKAGE - {"batch_steps"},
}
SIM_ALLOWED_IN = {"load/target.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "tokenwatt" and len(parts) > 1:
                found.add(parts[1])
    return found


def _modules() -> list[Path]:
    skip = {"cli", "__main__.py"}  # the command line sits on top of everything
    return sorted(p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in skip)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_one_way(path: Path) -> None:
    rel = path.relative_to(SRC)
    package = rel.parts[0].removesuffix(".py")
    imported = _imports(path)
    assert "cli" not in imported, f"{rel} imports tokenwatt.cli"
    forbidden = set(FORBIDDEN.get(package, set()))
    if package == "load" and rel.as_posix() not in SIM_ALLOWED_IN:
        forbidden.add("sim")
    bad = imported & forbidden
    assert not bad, f"{rel} imports {sorted(bad)}, against the layering in docs/architecture.md"


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import tokenwatt.sim.engine\nfrom tokenwatt.client import sse\n")
    assert _imports(sample) == {"sim", "client"}
