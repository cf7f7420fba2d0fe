"""One definition of each record, figure rule and fetch, checked on the source itself.

The result types (``tokenwatt.result``, ``tokenwatt.sweep_result``) are what ``metrics``,
``engine`` and ``load`` return; a second class with (nearly) the same fields, copied field by
field into the result type, is a mirror: two places to change, and the copy drifts.
The scan reads every class's annotated fields with ``ast`` and lists every class outside the
result modules that shares most of its fields with a result type. Beside it: the named mirrors
are gone from the functions that produced them, B and s come from one function, quantiles
from one rule, and one GET and one Prometheus parser serve every scraper.
"""

from __future__ import annotations

import ast
import functools
import typing
from pathlib import Path

import pytest

from tokenwatt.batch_steps import batch_and_steps
from tokenwatt.engine import EngineScraper, compare_client_engine, summarize, window_figures
from tokenwatt.geometry import load_geometry
from tokenwatt.metrics.mbu import compute_mbu
from tokenwatt.metrics.mbu.mixed_steps import estimate_mixed_steps
from tokenwatt.result import EngineAgreement, EngineFigures, MbuMixedSteps

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenwatt"
RESULT_MODULES = ("result.py", "sweep_result.py")
# a class sharing at least this many fields, and this share of its own and of the result
# type's fields, is a copy (the mirrors this test was written against shared 7/7, 17/17,
# 18 of 20 and 13 of 17; unrelated small records share 4 of 54 or 4 of 12)
MIN_SHARED, OWN_SHARE, RESULT_SHARE = 4, 0.6, 0.5
# copies that remain, each with why (an entry that no longer matches fails: remove it)
KNOWN: dict[str, str] = {
    "load/search.py:SearchStep ~ SearchStep": "the live search step holds the probe's "
    "outcome (generic over the probe callable's result); result.SearchStep is its record",
    "load/target.py:Target ~ RunTarget": "the opened endpoint holds the live client and the "
    "running simulator; result.RunTarget is what the run drove, credentials removed",
}


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text("utf-8"))


def _fields(cls: ast.ClassDef) -> set[str]:
    out: set[str] = set()
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name.startswith("_") or name == "model_config" or "ClassVar" in ast.unparse(node):
            continue
        out.add(name)
    return out


def _classes(path: Path) -> dict[str, set[str]]:
    return {n.name: _fields(n) for n in ast.walk(_tree(path)) if isinstance(n, ast.ClassDef)}


def _copies() -> dict[str, int]:
    """'module:Class ~ ResultType' → fields shared, for every class that copies a result type."""
    results: dict[str, set[str]] = {}
    for name in RESULT_MODULES:
        results.update(_classes(SRC / name))
    found: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in RESULT_MODULES:
            continue
        for cls, own in _classes(path).items():
            for rname, rfields in results.items():
                shared = len(own & rfields)
                if (
                    shared >= MIN_SHARED
                    and shared >= OWN_SHARE * len(own)
                    and shared >= RESULT_SHARE * len(rfields)
                ):
                    found[f"{rel}:{cls} ~ {rname}"] = shared
    return found


def test_no_class_copies_a_result_type() -> None:
    found = _copies()
    new = {k: v for k, v in found.items() if k not in KNOWN}
    assert not new, (
        "these classes repeat a result type's fields (return the result type instead): "
        + "; ".join(f"{k} ({v} fields shared)" for k, v in sorted(new.items()))
    )
    stale = sorted(set(KNOWN) - set(found))
    assert not stale, f"no longer a copy, remove from KNOWN: {stale}"


def test_the_scan_sees_a_copy(tmp_path: Path) -> None:
    """The scan on a hand-made mirror: a dataclass with a result type's fields is listed."""
    fake = tmp_path / "m.py"
    fake.write_text(
        "from dataclasses import dataclass\n@dataclass\nclass Agreement:\n"
        "    figure: str\n    client: float\n    engine: float | None\n"
        "    rel_diff: float | None\n    tolerance: float\n    ok: bool | None\n"
        "    cause: str | None = None\n"
    )
    own = _classes(fake)["Agreement"]
    result = _classes(SRC / "result.py")["EngineAgreement"]
    assert own == result


def _no_splat_copy(path: Path, names: set[str]) -> list[str]:
    """Calls like ``ResultType(**asdict(x))`` / ``(**x.to_dict())`` / ``(**x.model_dump())``."""
    bad = []
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        if node.func.id not in names:
            continue
        for kw in node.keywords:
            if kw.arg is None and isinstance(kw.value, ast.Call):
                inner = ast.unparse(kw.value.func)
                if inner.endswith(("asdict", "to_dict", "model_dump", "vars")):
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node)[:80]}")
    return bad


def test_nothing_copies_field_by_field_into_a_result_type() -> None:
    names = {n for m in RESULT_MODULES for n in _classes(SRC / m)}
    bad = [b for p in sorted(SRC.rglob("*.py")) for b in _no_splat_copy(p, names)]
    assert not bad, f"field-by-field copies into result types: {bad}"


def test_the_named_mirrors_return_result_types() -> None:
    """MixedSteps, Agreement and EngineWindow are gone: their producers return result types."""
    assert typing.get_type_hints(estimate_mixed_steps)["return"] is MbuMixedSteps
    assert typing.get_type_hints(summarize)["return"] is EngineFigures
    assert typing.get_type_hints(window_figures)["return"] is EngineFigures
    assert typing.get_type_hints(EngineScraper.stop)["return"] is EngineFigures
    assert typing.get_type_hints(compare_client_engine)["return"] == list[EngineAgreement]
    import tokenwatt.metrics.mbu.mixed_steps as mixed
    from tokenwatt import engine

    assert not hasattr(mixed, "MixedSteps")
    assert not hasattr(engine, "Agreement") and not hasattr(engine, "EngineWindow")


@pytest.mark.parametrize(("t", "tau", "r"), [(1000.0, 0.02, 1), (2345.6, 0.0317, 3)])
def test_b_and_s_from_one_function(t: float, tau: float, r: int) -> None:
    """The client's MBU inputs and the witness's client side carry the same B and s, the ones
    ``batch_and_steps`` gives (hand check: 1000 tok/s × 20 ms ÷ 1 = B 20, s 50/s)."""
    b, s = batch_and_steps(t, tau, r)
    if (t, tau, r) == (1000.0, 0.02, 1):
        assert (b, s) == (pytest.approx(20.0), pytest.approx(50.0))
    g = load_geometry("llama-3.1-8b")
    inputs = compute_mbu(
        g,
        output_tokens_per_s=t,
        itl_token_weighted_s=tau,
        replicas=r,
        gpus=r,
        bandwidth_bytes_per_s=3.35e12,
        mean_context_per_token=512.0,
        kv_bytes_per_output_token=0.0,
    ).inputs
    assert (inputs.batch_per_replica, inputs.steps_per_s_per_replica) == (b, s)
    window = window_figures("vllm", "u", duration_s=10.0, generated_tokens=t * 10)
    by = {a.figure: a.client for a in compare_client_engine(
        client_tokens_per_s=t, client_tau_s=tau, replicas=r, window=window
    )}  # fmt: skip
    assert (by["B"], by["s"]) == (b, s)


def _calls(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Call):
            out.add(ast.unparse(node.func))
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _outside_sim() -> list[Path]:
    # the simulator's truth stays independent of the client's code (its own quantiles)
    return [p for p in sorted(SRC.rglob("*.py")) if p.relative_to(SRC).parts[0] != "sim"]


def test_quantiles_one_rule_one_get_one_prometheus_parser() -> None:
    """Every view's quantiles through ``metrics.stats.interpolated_quantile``; every blocking
    GET through ``httpget``; every Prometheus page parsed in ``promscrape``."""
    rules = {
        "quantile": ("np.percentile", "np.quantile", "np.nanpercentile", "np.nanquantile",
                     "statistics.quantiles"),
        "get": ("urllib.request.urlopen", "urlopen", "urllib.request.build_opener"),
        "prometheus": ("prometheus_client.parser.text_string_to_metric_families",),
    }  # fmt: skip
    home = {"quantile": "metrics/stats.py", "get": "httpget.py", "prometheus": "promscrape.py"}
    bad = []
    for path in _outside_sim():
        rel = path.relative_to(SRC).as_posix()
        calls = _calls(path)
        for rule, names in rules.items():
            if rel != home[rule] and calls & set(names):
                bad.append(f"{rel}: {sorted(calls & set(names))} (use {home[rule]})")
    assert not bad, bad
