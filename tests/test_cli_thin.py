"""The measuring commands stay thin: ``cli/probe.py`` and ``cli/bench.py`` parse options, call
the load layer's entry points and print the report layer's views (docs/architecture.md).

Measurement (the probe window, the engine witness, power, the derivation of figures, MBU)
lives in ``load.measure`` and ``load.bench``; a command that imports ``load.probe``,
``load.derive``, ``metrics``, ``power``, ``engine`` or ``geometry`` directly has grown its own
measurement again, and this test names the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenwatt"
THIN = ("probe.py", "bench.py")

# What a measuring command may import from tokenwatt: its own package, the views, the result
# and spec types, the base (errors, clock), and from load only the entry points: one measured
# probe (``load.measure``), the whole run (``load.bench``) and the progress line's arithmetic
# (``load.eta``, time left from the window rules: no measurement).
ENTRY_POINTS = ("tokenwatt.load.measure", "tokenwatt.load.bench", "tokenwatt.load.eta")
ALLOWED_PREFIXES = ("tokenwatt.cli", "tokenwatt.report")
ALLOWED_MODULES = {*ENTRY_POINTS, "tokenwatt.result", "tokenwatt.spec", "tokenwatt.errors",
                   "tokenwatt.clock", "tokenwatt"}  # fmt: skip


def _imported_modules(source: str) -> set[str]:
    """Every tokenwatt module the source imports (``from a.b import c`` gives ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m == "tokenwatt" or m.startswith("tokenwatt.")}


def _measurement_imports(source: str) -> set[str]:
    def allowed(m: str) -> bool:
        return m in ALLOWED_MODULES or any(
            m == p or m.startswith(f"{p}.") for p in ALLOWED_PREFIXES
        )

    return {m for m in _imported_modules(source) if not allowed(m)}


@pytest.mark.parametrize("name", THIN)
def test_the_measuring_commands_import_no_measurement(name: str) -> None:
    source = (SRC / "cli" / name).read_text("utf-8")
    bad = _measurement_imports(source)
    assert not bad, f"cli/{name} imports measurement internals {sorted(bad)}: call load.measure"


@pytest.mark.parametrize("name", THIN)
def test_the_measuring_commands_call_their_entry_point(name: str) -> None:
    """The rule is not met by importing nothing: each command reaches the load layer only
    through an entry point."""
    imported = _imported_modules((SRC / "cli" / name).read_text("utf-8"))
    assert imported & set(ENTRY_POINTS[:2]), f"cli/{name} calls neither load.measure nor bench"


@pytest.mark.parametrize(
    "planted",
    [
        "from tokenwatt.load.probe import run_probe",
        "from tokenwatt.load.derive import summarize_probe",
        "import tokenwatt.metrics.mbu",
        "from tokenwatt.load.energy_window import probe_energy",
        "from tokenwatt.power import PowerMonitor",
        "from tokenwatt.engine import scrape",
    ],
)
def test_a_planted_measurement_import_fails(planted: str) -> None:
    source = (SRC / "cli" / "probe.py").read_text("utf-8")
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("from tokenwatt.errors"))
    lines.insert(at, planted)
    module = planted.split()[1]
    assert _measurement_imports("\n".join(lines)) == {module}
