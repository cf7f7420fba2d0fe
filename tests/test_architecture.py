"""The dependency direction the architecture promises, checked on the source itself.

Each package may import only the packages docs/architecture.md's map lets it (``ALLOWED``, an
allow-list: a package or import the map does not name fails); cli → load/report →
client/metrics/power/engine → geometry/hardware/spec/records/result/clock/errors; the result
types (``tokenwatt.result``) sit at the base, so ``load`` writes the result without touching
the views package; sim uses geometry, hardware and simsettings only (its ground truth must not
share code with the derivation it checks); ``load.target`` alone may start the simulator;
nothing imports cli. No exceptions. A forbidden import planted in each package must fail the
checker (``test_a_planted_forbidden_import_fails_in_every_package``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenwatt"

# the base every layer above may use: one clock, the user's errors, the bounded file reader
_ROOT = {"clock", "errors", "bounded"}
# the layer under client/metrics/power/engine (the simulator's knobs come with the result,
# which records the settings a simulated run used)
_BASE = _ROOT | {"geometry", "hardware", "spec", "records", "result", "simsettings"}
# package (or top-level module) → the tokenwatt packages it may import; nothing else
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "__main__": {"cli"},
    "clock": set(),
    "errors": set(),
    # the one bounded reader of user files (spec, sweep, import, result): base code
    "bounded": {"errors"},
    # the simulator's knobs, shared by spec, sim and cli: base code that imports no tokenwatt
    "simsettings": set(),
    # B = T·τ/R and s = 1/τ, shared by metrics (MBU) and engine (the witness): base code
    "batch_steps": set(),
    # reads a pre-3 probe.json: imports nothing of tokenwatt
    "result_probe_json": set(),
    "examples": set(),
    "records": _ROOT,
    "geometry": _ROOT,
    "hardware": _ROOT,
    # the engine section parses and checks a measured expert load when the spec loads
    "spec": _ROOT | {"simsettings", "geometry"},
    # the result types hold the spec, geometry and accelerator a run used; never the reverse
    "result": _ROOT | {"spec", "geometry", "hardware", "simsettings", "result_probe_json"},
    # the sweep's record sits beside the result it summarises (secrets out by the spec's redact)
    "sweep_result": _ROOT | {"result", "spec", "hardware"},
    # the one guarded, bounded GET: uses only the spec's redaction (no credentials in a message)
    "httpget": {"spec"},
    # one scrape of a Prometheus page (GET, stamp, parse), shared by engine and power
    "promscrape": {"clock", "httpget"},
    "client": _ROOT | {"records", "spec"},
    "metrics": _BASE | {"batch_steps"},
    # the audit returns the result's EnergyAudit
    "power": _BASE | {"httpget", "promscrape"},
    # the engine witness returns result types (EngineFigures, EngineAgreement)
    "engine": _BASE | {"batch_steps", "httpget", "promscrape"},
    "sim": _ROOT | {"geometry", "hardware", "simsettings"},
    # what to send: workloads, arrivals, traces, conversations; pure data, no socket or clock
    "traffic": _BASE | {"examples"},
    # how to send: the sender seam, its workers (processes, Ray actors) and their wire format
    "send": _BASE | {"client", "traffic"},
    # the run: the probe window, the search, bench and sweep
    "load": _BASE
    | {
        "client",
        "metrics",
        "power",
        "engine",
        "sweep_result",
        "httpget",
        "promscrape",
        "sim",
        "traffic",
        "send",
    },
    "report": _BASE | {"metrics", "sweep_result"},
    # another tool's file → a result: reads with report.br02, derives with metrics
    "importers": _BASE | {"metrics", "report"},
    # calibrate on measured points, replay on a target: reads results, never measures
    "predict": _BASE | {"metrics", "sim"},
    "cli": {p.stem for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    - {"cli", "__init__", "__main__"},
}
SIM_ALLOWED_IN = {"load/target.py"}  # the one load module that may start the simulator


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
    return sorted(SRC.rglob("*.py"))


def _package(rel: PurePosixPath) -> str:
    return rel.parts[0].removesuffix(".py")


def _layer_violations(rel: PurePosixPath, imported: set[str]) -> set[str]:
    """The tokenwatt packages module ``rel`` (relative to src/tokenwatt) imports against the
    map: outside its package's ``ALLOWED`` (cli is in none but ``__main__``'s), sim from load
    beyond ``SIM_ALLOWED_IN``. A package missing from ``ALLOWED`` may import nothing."""
    package = _package(rel)
    allowed = set(ALLOWED.get(package, set())) | {package}
    if package == "load" and rel.as_posix() not in SIM_ALLOWED_IN:
        allowed.discard("sim")
    return imported - allowed


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_one_way(path: Path) -> None:
    rel = PurePosixPath(path.relative_to(SRC).as_posix())
    bad = _layer_violations(rel, _imports(path))
    assert not bad, f"{rel} imports {sorted(bad)}, against the layering in docs/architecture.md"


def test_every_package_has_its_row_in_the_allow_list() -> None:
    """A new package or top-level module arrives with what it may import, not unchecked."""
    found = {_package(PurePosixPath(p.relative_to(SRC).as_posix())) for p in _modules()}
    assert found == set(ALLOWED), (
        f"add to ALLOWED: {sorted(found - set(ALLOWED))}; remove: {sorted(set(ALLOWED) - found)}"
    )


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import tokenwatt.sim.engine\nfrom tokenwatt.client import sse\n")
    assert _imports(sample) == {"sim", "client"}


def _forbidden_for(package: str) -> list[str]:
    """Every package ``package`` may not import."""
    every = set(ALLOWED) - {"__init__", "__main__"}
    return sorted(every - ALLOWED[package] - {package})


def test_only_the_command_line_may_import_everything() -> None:
    """cli sits on top of everything (no import of it is forbidden); every other package has
    forbidden imports, cli among them, so the planted-import test below reaches each."""
    assert [p for p in sorted(ALLOWED) if not _forbidden_for(p)] == ["cli"]
    assert all("cli" in _forbidden_for(p) for p in ALLOWED if p not in {"cli", "__main__"})


@pytest.mark.parametrize("package", sorted(set(ALLOWED) - {"cli"}), ids=str)
def test_a_planted_forbidden_import_fails_in_every_package(package: str, tmp_path: Path) -> None:
    """Plant each forbidden import in a module of ``package`` (a temp file at the package's
    path, read by the same parser as the real modules): the checker must name it, and must
    pass the same module with only an allowed import."""
    rel = PurePosixPath(f"{package}.py" if package in _TOP_LEVEL else f"{package}/planted.py")
    for target in _forbidden_for(package):
        planted = tmp_path / f"{package}-{target}.py"
        planted.write_text(f"from tokenwatt.{target} import something\n")
        assert _layer_violations(rel, _imports(planted)) == {target}, (package, target)
    fine = sorted(ALLOWED[package] - {"sim"} if package == "load" else ALLOWED[package])
    clean = tmp_path / f"{package}-clean.py"
    clean.write_text("".join(f"import tokenwatt.{t}\n" for t in fine) or "import os\n")
    assert _layer_violations(rel, _imports(clean)) == set(), package


def test_load_may_start_the_simulator_only_from_target(tmp_path: Path) -> None:
    planted = tmp_path / "x.py"
    planted.write_text("from tokenwatt.sim import start_sim_thread\n")
    assert _layer_violations(PurePosixPath("load/probe.py"), _imports(planted)) == {"sim"}
    assert _layer_violations(PurePosixPath("load/target.py"), _imports(planted)) == set()


_TOP_LEVEL = {p.stem for p in SRC.glob("*.py")}


ARCHITECTURE = SRC.parents[1] / "docs" / "architecture.md"
_SECTION = re.compile(r"^###\s+((?:`[\w.]+`[,\s]*)+)$")


def _named_in_map() -> tuple[dict[str, set[str]], set[str]]:
    """Per package section of the map ("### `pkg`" up to the next heading): the backticked
    names in its text; and every backticked name of the page (top-level modules are named in
    prose too)."""
    text = ARCHITECTURE.read_text("utf-8")
    rows: dict[str, set[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            current = re.findall(r"`([\w.]+)`", m.group(1))
            for package in current:
                rows[package] = set()
        elif line.startswith("#"):
            current = []
        else:
            for package in current:
                rows[package] |= set(re.findall(r"`([\w.]+)`", line))
    return rows, set(re.findall(r"`([\w.]+)", text))


def _names_module(names: set[str], package: str, module: str, inner: str = "") -> bool:
    """``module``, ``module.attr``, ``package.module`` or ``package.module.attr``; a module of
    a package inside ``package`` also by its dotted path there (``inner``: ``mbu.formula``)."""
    forms = (module, f"{package}.{module}", *((inner, f"{package}.{inner}") if inner else ()))
    return any(n == f or n.startswith(f + ".") for n in names for f in forms)


def test_the_map_names_every_module() -> None:
    """docs/architecture.md is the map: every module under src/ is named in its package's
    section ("### `pkg`"; a top-level module anywhere on the page), so a new module cannot
    arrive unmapped."""
    rows, everywhere = _named_in_map()
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.name.startswith("__"):  # a package's __init__/__main__: the package's section
            if len(rel.parts) > 1 and rel.parts[0] not in rows:
                missing.append(f"{rel.parts[0]}/ (no section for the package)")
            continue
        if len(rel.parts) == 1:
            if not _names_module(everywhere, "", rel.stem):
                missing.append(rel.as_posix())
        elif not _names_module(
            rows.get(rel.parts[0], set()), rel.parts[0], rel.stem, ".".join(rel.parts[1:])[:-3]
        ):
            missing.append(rel.as_posix())
    assert not missing, (
        f"docs/architecture.md does not name {', '.join(missing)}: add each to its "
        "package's section, with its one idea"
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
SEND = SRC / "send"
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
    """The ways requests leave: every module of ``send`` beyond the seam, and the worker
    and Ray helpers (``send.workers``, ``send.ray_workers``) they build on."""
    found = {f"tokenwatt.send.{p.stem}" for p in SEND.glob("*.py") if p.stem not in SEAM}
    found -= {"tokenwatt.send.wire", "tokenwatt.send.clock_track"}  # formats, not senders
    return found | {"tokenwatt.send.workers", "tokenwatt.send.ray_workers"}


def test_the_probe_knows_no_sender_implementation() -> None:
    """``load.probe`` keeps the window and the schedule; how requests leave is behind
    ``send.base.Sender``, opened by ``send.opening`` (docs/architecture.md)."""
    impls = _sender_implementations()
    assert {"tokenwatt.send.local", "tokenwatt.send.processes"} <= impls
    imported = _modules_imported(SRC / "load" / "probe.py")
    bad = {m for m in imported if m in impls or m == "tokenwatt.client"}
    assert not bad, f"load/probe.py imports sender implementations {sorted(bad)}"


@pytest.mark.parametrize("path", sorted(SEND.glob("*.py")), ids=lambda p: p.name)
def test_the_sender_package_imports_no_metrics(path: Path) -> None:
    """A sender sends and times; what the records mean is the metrics' business."""
    assert "metrics" not in _imports(path), f"send/{path.name} imports tokenwatt.metrics"


def test_the_seam_checker_sees_a_from_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("from tokenwatt.send import local\nimport tokenwatt.send.workers\n")
    assert _modules_imported(sample) == {
        "tokenwatt.send",
        "tokenwatt.send.local",
        "tokenwatt.send.workers",
    }
