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
    "sim", "report", "cli", "engine", "simsettings", "httpget",
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
    "result": {"client", "load", "metrics", "power", "sim", "report", "cli"},
    # the sweep's record sits beside the result it summarises
    "sweep_result": {"client", "load", "metrics", "power", "sim", "report", "cli"},
    # the simulator's knobs, shared by spec, sim and cli: base code that imports no tokenwatt
    "simsettings": _EVERY_PACKAGE - {"simsettings"},
    "client": {"load", "metrics", "power", "sim", "report", "cli", "result"},
    "metrics": {"client", "load", "power", "sim", "report", "cli"},
    "power": {"client", "load", "sim", "report", "cli", "result"},
    "sim": {"client", "load", "metrics", "power", "report", "cli", "spec", "records", "result"},
    "report": {"client", "load", "sim", "cli", "importers"},
    # another tool's file → a result: reads with report.br02, derives with metrics
    "importers": {"client", "load", "power", "sim", "cli", "engine"},
    "load": {"cli", "report"},
    "engine": {"client", "load", "metrics", "power", "sim", "report", "cli"},
    # the bounded GET of the scraping threads (engine, power): base code, no tokenwatt imports
    "httpget": _EVERY_PACKAGE - {"httpget"},
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


# ---------------------------------------------------------------------- the sender seam
SEND = SRC / "load" / "send"
# the seam itself: the protocol and its shared parts, the figures, and the one opener
SEAM = {"__init__", "base", "figures", "opening"}


def _modules_imported(path: Path) -> set[str]:
    """Every tokenwatt module ``path`` imports, dotted (``from a.b import c`` gives ``a.b``
    and ``a.b.c``, since ``c`` may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("tokenwatt.")}


def _sender_implementations() -> set[str]:
    """The ways requests leave: every module of ``load.send`` beyond the seam, and the
    fixed-schedule pools (``load.workers``, ``load.ray_workers``) they build on."""
    found = {f"tokenwatt.load.send.{p.stem}" for p in SEND.glob("*.py") if p.stem not in SEAM}
    return found | {"tokenwatt.load.workers", "tokenwatt.load.ray_workers"}


def test_the_probe_knows_no_sender_implementation() -> None:
    """``load.probe`` keeps the window and the schedule; how requests leave is behind
    ``load.send.base.Sender``, opened by ``load.send.opening`` (docs/architecture.md)."""
    impls = _sender_implementations()
    assert {"tokenwatt.load.send.local", "tokenwatt.load.send.processes"} <= impls
    imported = _modules_imported(SRC / "load" / "probe.py")
    bad = {m for m in imported if m in impls or m == "tokenwatt.client"}
    assert not bad, f"load/probe.py imports sender implementations {sorted(bad)}"


@pytest.mark.parametrize("path", sorted(SEND.glob("*.py")), ids=lambda p: p.name)
def test_the_sender_package_imports_no_metrics(path: Path) -> None:
    """A sender sends and times; what the records mean is the metrics' business."""
    assert "metrics" not in _imports(path), f"load/send/{path.name} imports tokenwatt.metrics"


def test_the_seam_checker_sees_a_from_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("from tokenwatt.load.send import local\nimport tokenwatt.load.workers\n")
    assert _modules_imported(sample) == {
        "tokenwatt.load.send",
        "tokenwatt.load.send.local",
        "tokenwatt.load.workers",
    }
