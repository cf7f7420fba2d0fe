"""The dependency direction the architecture promises, checked on the source itself.

cli → load/report → client/metrics/power → geometry/hardware/spec/records/result; the
result types (``tokenwatt.result``) sit at the base, so ``load`` writes the result without
touching the views package; sim uses geometry and hardware only (its ground truth must not
share code with the derivation it checks); ``load.target`` alone may start the simulator;
nothing imports cli. No exceptions.
"""

from __future__ import annotations

import ast
import re
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
    # calibrate on measured points, replay on a target: reads results, never measures
    "predict": {"client", "load", "power", "report", "cli", "engine", "importers"},
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


ARCHITECTURE = SRC.parents[1] / "docs" / "architecture.md"
_ROW = re.compile(r"^\|\s*((?:`[\w.]+`[,\s]*)+)\|(.*)\|\s*$")


def _named_in_map() -> tuple[dict[str, set[str]], set[str]]:
    """Per package row of the architecture table: the backticked names in its text; and
    every backticked name of the page (top-level modules are named in prose too)."""
    text = ARCHITECTURE.read_text("utf-8")
    rows: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            names = set(re.findall(r"`([\w.]+)`", m.group(2)))
            for package in re.findall(r"`([\w.]+)`", m.group(1)):
                rows[package] = names
    return rows, set(re.findall(r"`([\w.]+)", text))


def _names_module(names: set[str], package: str, module: str) -> bool:
    """``module``, ``module.attr``, ``package.module`` or ``package.module.attr``."""
    forms = (module, f"{package}.{module}")
    return any(n == f or n.startswith(f + ".") for n in names for f in forms)


def test_the_map_names_every_module() -> None:
    """docs/architecture.md is the map: every module under src/ is named in its package's
    row of the table (a top-level module anywhere on the page), so a new module cannot
    arrive unmapped."""
    rows, everywhere = _named_in_map()
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.name.startswith("__"):  # a package's __init__/__main__: the package's row
            if len(rel.parts) > 1 and rel.parts[0] not in rows:
                missing.append(f"{rel.parts[0]}/ (no row for the package)")
            continue
        if len(rel.parts) == 1:
            if not _names_module(everywhere, "", rel.stem):
                missing.append(rel.as_posix())
        elif not _names_module(rows.get(rel.parts[0], set()), rel.parts[0], rel.stem):
            missing.append(rel.as_posix())
    assert not missing, (
        f"docs/architecture.md does not name {', '.join(missing)}: add each to its "
        "package's row of the table, with its one idea"
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module → the tokenwatt modules it imports, anywhere in it (TYPE_CHECKING blocks and
    imports inside functions included: a circle hidden there is still a circle). ``from
    pkg import mod`` depends on ``pkg.mod``, not on the package's ``__init__``."""
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                subs = {f"{base}.{a.name}" for a in node.names} & paths.keys()
                deps |= subs or {base}
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*path[path.index(w) :], w]
            if w not in state and (found := visit(w)) is not None:
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)) is not None:
            return found
    return None


def test_no_import_circle() -> None:
    """No module imports itself through others (report.compare ↔ report.terminal was one):
    a circle makes two modules one idea split in two files."""
    circle = _cycle(_import_graph())
    assert circle is None, f"import circle: {' → '.join(circle or [])}"


def test_the_circle_checker_sees_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


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
