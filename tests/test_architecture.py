"""The dependency direction the architecture promises, checked on the source itself.

cli → load/report → client/metrics/power → geometry/hardware/spec; sim uses geometry and
hardware only (its ground truth must not share code with the derivation it checks);
``load.target`` alone may start the simulator; nothing imports cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenwatt"

# package → tokenwatt packages it must never import
FORBIDDEN: dict[str, set[str]] = {
    "geometry": {"client", "load", "metrics", "power", "sim", "report", "cli", "spec"},
    "hardware": {"client", "load", "metrics", "power", "sim", "report", "cli", "geometry"},
    "spec": {"client", "load", "metrics", "power", "sim", "report", "cli"},
    "records": {"client", "load", "metrics", "power", "sim", "report", "cli"},
    "client": {"load", "metrics", "power", "sim", "report", "cli"},
    "metrics": {"client", "load", "power", "sim", "report", "cli"},
    "power": {"client", "load", "sim", "report", "cli"},
    "sim": {"client", "load", "metrics", "power", "report", "cli", "spec", "records"},
    "report": {"client", "load", "sim", "cli"},
    "load": {"cli"},
    "engine": {"client", "load", "metrics", "power", "sim", "report", "cli"},
}
# load.bench writes the result file, so load may use the schema (and machine facts) of report,
# never its views (terminal, HTML, compare).
LOAD_MAY_USE_FROM_REPORT = {"tokenwatt.report.schema", "tokenwatt.report.env"}
SIM_ALLOWED_IN = {"load/target.py"}


def _full_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


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
    if package == "load":
        views = {
            m
            for m in _full_imports(path)
            if m.startswith("tokenwatt.report") and m not in LOAD_MAY_USE_FROM_REPORT
        }
        assert not views, f"{rel} imports report views {sorted(views)}"
    bad = imported & forbidden
    assert not bad, f"{rel} imports {sorted(bad)}, against the layering in docs/architecture.md"


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import tokenwatt.sim.engine\nfrom tokenwatt.client import sse\n")
    assert _imports(sample) == {"sim", "client"}
