"""One definition of the simulator's knobs: the spec's ``sim:`` section, the ``tokenwatt sim``
flags and ``SimConfig`` accept and reject exactly the same values (``zipf:inf`` once passed the
spec and failed the simulator), and the spec can ask for a truth log."""

from __future__ import annotations

import gc
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_sim_support import config
from tokenwatt.cli import app
from tokenwatt.errors import SpecError, TokenwattError
from tokenwatt.load.target import sim_config
from tokenwatt.simsettings import SimSettings
from tokenwatt.spec import parse_spec

# (knob, value, valid?) — the validity column is the documented range, written by hand.
CASES: list[tuple[str, Any, bool]] = [
    ("routing", "zipf:inf", False),
    ("routing", "zipf:nan", False),
    ("routing", "zipf:0", False),
    ("routing", "zipf", False),
    ("routing", "zipf:1.2", True),
    ("routing", "uniform", True),
    ("efficiency", 0.0, False),
    ("efficiency", 1.5, False),
    ("efficiency", float("inf"), False),
    ("efficiency", 1.0, True),
    ("step_overhead_ms", -1.0, False),
    ("step_overhead_ms", float("inf"), False),
    ("step_overhead_ms", 0.5, True),
    ("output_len", "geometric:inf", False),
    ("output_len", "geometric:0.5", False),
    ("output_len", "uniform:5:2", False),
    ("output_len", "fixed:3", True),
    ("kv_cache_gib", 0.0, False),
    ("kv_cache_gib", float("nan"), False),
    ("kv_cache_gib", 2.0, True),
    ("max_num_seqs", 0, False),
    ("tokens_per_chunk", 0, False),
    ("tokens_per_chunk", 4, True),
    ("keepalive_s", 0.0, False),
    ("idle_power_fraction", 1.5, False),
    ("prefix_caching", True, True),
]


BASE = {
    "model": {"source": "llama-3.1-8b"},
    "endpoint": {"url": "sim"},
    "hardware": {"accelerator": "h100-sxm"},
}


def spec_accepts(knob: str, value: Any) -> bool:
    try:
        parse_spec({**BASE, "sim": {knob: value}})
    except SpecError as exc:
        assert knob in str(exc)
        return False
    return True


def simconfig_accepts(knob: str, value: Any) -> bool:
    """``SimConfig`` built directly."""
    try:
        config(**{knob: value})
    except SpecError as exc:
        assert knob in str(exc)
        return False
    return True


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A port already listening: a config the CLI accepts then fails to bind, never serves."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    yield holder.getsockname()[1]
    holder.close()


def cli_accepts(knob: str, value: Any, port: int) -> bool:
    flag = "--" + knob.replace("_", "-")
    args = [flag] if value is True else [flag, str(value)]
    try:
        app(
            ["sim", "--model", "llama-3.1-8b", "--accelerator", "h100-sxm", "--max-model-len",
             "4096", "--port", str(port), *args],
            standalone_mode=False,
        )  # fmt: skip
    except TokenwattError as exc:
        if "cannot bind" in str(exc):
            return True  # every knob passed; only the busy port stopped it
        assert knob in str(exc), str(exc)
        assert "\n" not in str(exc)
        return False
    raise AssertionError("the CLI served on a busy port")


@pytest.mark.parametrize(("knob", "value", "valid"), CASES, ids=str)
def test_spec_cli_and_simconfig_agree(knob: str, value: Any, valid: bool, busy_port: int) -> None:
    assert spec_accepts(knob, value) is valid
    assert simconfig_accepts(knob, value) is valid
    assert cli_accepts(knob, value, busy_port) is valid


def test_a_failed_start_hands_the_collector_back(busy_port: int) -> None:
    """``tokenwatt sim`` freezes the heap and turns automatic collection off before it binds
    (a process of its own); a start that fails on a busy port undoes both, so a process that
    called it in-process (a test, a library user) keeps its collector."""
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert cli_accepts("efficiency", 0.5, busy_port)  # refused only by the busy port
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_every_knob_is_a_cli_flag_and_a_spec_key() -> None:
    from tokenwatt.cli.sim import sim
    from tokenwatt.spec.sim import SimSection

    params = set(sim.__signature__.parameters)  # type: ignore[attr-defined]
    assert set(SimSettings.model_fields) <= params
    assert set(SimSection.model_fields) == set(SimSettings.model_fields)


def test_spec_truth_log_reaches_the_simulator(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    spec = parse_spec(
        {
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
            "endpoint": {"url": "sim"},
            "sim": {"truth_log": str(log), "prefix_caching": True, "step_overhead_ms": 2},
        }
    )
    c = sim_config(spec)
    assert c.settings.truth_log == str(log) and c.settings.prefix_caching is True
    assert c.derive().step_overhead_s == pytest.approx(0.002)
    other = tmp_path / "other.jsonl"
    assert sim_config(spec, truth_log=other).settings.truth_log == str(other)  # the caller's wins


def test_unknown_sim_key_is_rejected_by_name() -> None:
    with pytest.raises(SpecError, match=r"sim\.efficency"):
        parse_spec({**BASE, "sim": {"efficency": 0.5}})
