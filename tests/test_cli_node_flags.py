"""The node is described the same way on every command: ``--hardware``, ``--gpus``,
``--replicas``, ``--bandwidth-tb-s`` and ``--set`` on bench, probe, import, mbu and sweep;
replicas that share a GPU (MPS) are accepted and stated; the geometry's own hints are forms
each command takes; a name that several memory variants share is asked for."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenwatt import cli
from tokenwatt.cli import bench as bench_cli
from tokenwatt.cli import probe as probe_cli
from tokenwatt.cli import sweep as sweep_cli
from tokenwatt.errors import SpecError
from tokenwatt.geometry.config import read_config
from tokenwatt.load.sweep_guard import WORKER_VAR
from tokenwatt.result import load_result
from tokenwatt.spec import BenchSpec

pytestmark = pytest.mark.timeout(120)

PEERS = Path(__file__).parent / "fixtures" / "peers"
NODE = ["--hardware", "h100-sxm-64gb", "--gpus", "1", "--replicas", "2"]
SPEC = """
name: node-flags
model: {source: llama-3.1-8b}
hardware: {accelerator: a100-80gb}
endpoint: {url: sim}
"""


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    code = ended.value.code
    return code if isinstance(code, int) else 0


@pytest.fixture
def no_intermediate(tmp_path: Path) -> Path:
    """Llama-3.1-8B's config.json without intermediate_size: the geometry's error hints at
    ``--set config.intermediate_size=N``."""
    data = dict(read_config("llama-3.1-8b").data)
    del data["intermediate_size"]
    folder = tmp_path / "llama-no-ffn"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC)
    return p


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_bench_and_probe_take_the_node_flags(
    monkeypatch: pytest.MonkeyPatch, spec_file: Path, command: str
) -> None:
    got: dict[str, Any] = {}
    monkeypatch.setattr(probe_cli, "run_probe_command", lambda spec, **_: got.update(spec=spec))
    monkeypatch.setattr(
        bench_cli, "_bench_and_report", lambda spec, *_, **__: got.update(spec=spec)
    )
    args = [*NODE, "--bandwidth-tb-s", "1.5", "--set", "config.intermediate_size=14336"]
    assert _main(monkeypatch, command, str(spec_file), *args) == 0
    spec: BenchSpec = got["spec"]
    hw = spec.hardware
    assert (hw.accelerator, hw.gpus, hw.replicas) == ("h100-sxm-64gb", 1, 2)
    assert hw.custom is not None and hw.custom.bandwidth_bytes_per_s == 1.5e12
    assert hw.gpus_per_replica == 0.5 and hw.shares_gpus
    assert spec.model.overrides == {"config.intermediate_size": 14336}


def test_import_takes_the_node_flags_and_states_mps(tmp_path: Path) -> None:
    """A vLLM file with two replicas on one GPU: accepted (it was refused as "gpus must be a
    multiple of replicas"), the sharing stated in MBU's notes, the bandwidth overridden."""
    out = tmp_path / "imp"
    args = [*NODE, "--bandwidth-tb-s", "1.63", "--set", "config.head_dim=128"]
    path = str(PEERS / "vllm_sim_detailed.json")
    monkeypatch = pytest.MonkeyPatch()
    try:
        code = _main(monkeypatch, "import", path, "--model", "llama-3.1-8b", *args, "-o", str(out))
    finally:
        monkeypatch.undo()
    assert code == 0
    r = load_result(out)
    assert (r.spec.hardware.gpus, r.spec.hardware.replicas) == (1, 2)
    assert r.accelerator is not None and r.accelerator.bandwidth_bytes_per_s == 1.63e12
    detail = r.probes[0].mbu_detail
    assert detail is not None and detail.inputs.replicas == 2
    assert any("2 replicas share 1 GPU" in n for n in detail.notes)


def _mbu_json(monkeypatch: pytest.MonkeyPatch, capsys: Any, *args: str) -> dict[str, Any]:
    base = ["mbu", "llama-3.1-8b", "--concurrency", "8", "--tpot-ms", "20"]
    extra = ["--input-tokens", "1000", "--output-tokens", "200", "--json"]
    assert _main(monkeypatch, *base, *extra, *args) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_mbu_memory_variant_changes_the_denominator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 64 GB H100 SXM reads 1.63 TB/s: MBU is 3.35/1.63 = 2.06× the 80 GB part's for the
    same figures (the silent halving came from naming the wrong variant)."""
    big = _mbu_json(monkeypatch, capsys, "--hardware", "h100-sxm")
    small = _mbu_json(monkeypatch, capsys, "--hardware", "h100-sxm-64gb")
    assert small["mbu_decode_only"] / big["mbu_decode_only"] == pytest.approx(3.35 / 1.63)
    custom = _mbu_json(monkeypatch, capsys, "--hardware", "h100-sxm", "--bandwidth-tb-s", "1.63")
    assert custom["mbu_decode_only"] == pytest.approx(small["mbu_decode_only"])


def test_mbu_takes_mps_replicas_and_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_intermediate: Path
) -> None:
    one = _mbu_json(monkeypatch, capsys, "--hardware", "h100-sxm")
    data = _mbu_json(monkeypatch, capsys, *NODE, "--set", "hardware.gpus=1")
    assert data["hardware"]["replicas"] == 2 and "2 replicas share 1 GPU" in " ".join(data["notes"])
    # B halves per replica, both replicas read their weights through one GPU
    assert data["detail"]["inputs"]["batch_per_replica"] == pytest.approx(
        one["detail"]["inputs"]["batch_per_replica"] / 2
    )
    base = ["mbu", str(no_intermediate), "--hardware", "h100-sxm", "--tpot-ms", "20"]
    assert _main(monkeypatch, *base, "--concurrency", "1") == 2
    hint = capsys.readouterr().err
    assert "--set config.intermediate_size=N" in hint
    fixed = ["--set", "config.intermediate_size=14336", "--input-tokens", "10", "--json"]
    assert _main(monkeypatch, *base, "--concurrency", "1", "--output-tokens", "10", *fixed) == 0
    assert json.loads(capsys.readouterr().out)["mbu_decode_only"] > 0


def test_the_geometry_hint_is_accepted_by_import(no_intermediate: Path, tmp_path: Path) -> None:
    path = str(PEERS / "vllm_sim_detailed.json")
    monkeypatch = pytest.MonkeyPatch()
    try:
        args = ["import", path, "--model", str(no_intermediate), "--hardware", "h100-sxm"]
        assert _main(monkeypatch, *args, "-o", str(tmp_path / "a")) == 2
        fixed = ["--set", "config.intermediate_size=14336", "-o", str(tmp_path / "b")]
        assert _main(monkeypatch, *args, *fixed) == 0
    finally:
        monkeypatch.undo()
    assert load_result(tmp_path / "b").geometry is not None


@pytest.mark.parametrize("command", ["mbu", "import"])
def test_a_shared_name_is_asked_for_not_guessed(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: str,
) -> None:
    if command == "mbu":
        args = ["mbu", "llama-3.1-8b", "--hardware", "h100", "--concurrency", "1"]
        args += ["--tpot-ms", "20", "--input-tokens", "10", "--output-tokens", "10"]
    else:
        args = ["import", str(PEERS / "vllm_sim_detailed.json"), "--model", "llama-3.1-8b"]
        args += ["--hardware", "h100", "-o", str(tmp_path / "x")]
    assert _main(monkeypatch, *args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'h100' has 4 memory variants" in err and "h100-sxm-64gb (64 GB, 1.63 TB/s)" in err


def test_sweep_takes_the_node_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The flags land in the bench spec every point is built from (a point's own ``set``
    still wins); the check before any server starts sees them."""
    sweep_file = tmp_path / "sweep.yaml"
    bench = yaml.safe_load(SPEC) | {"endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"}}
    sweep_file.write_text(
        yaml.safe_dump(
            {
                "name": "node",
                "server": {"command": "true {port}", "health_url": "http://127.0.0.1:{port}/h"},
                "points": [{"x": 1}],
                "bench": bench,
            }
        )
    )
    seen: dict[str, Any] = {}

    def stop(spec: Any, doc: dict[str, Any]) -> None:
        from tokenwatt.load.sweep import point_spec

        seen["spec"] = point_spec(doc, spec, {"x": 1, "port": 1, "point": 0})
        raise SpecError("stopped before any server")

    monkeypatch.setattr(sweep_cli, "_check_first", stop)
    monkeypatch.setenv(WORKER_VAR, "1")  # the guard's worker: the sweep itself, in-process
    args = [*NODE, "--bandwidth-tb-s", "1.63", "--set", "layers=30"]
    assert _main(monkeypatch, "sweep", str(sweep_file), *args, "-o", str(tmp_path / "o")) == 2
    spec: BenchSpec = seen["spec"]
    assert (spec.hardware.accelerator, spec.hardware.gpus, spec.hardware.replicas) == (
        "h100-sxm-64gb",
        1,
        2,
    )
    assert spec.hardware.custom is not None
    assert spec.hardware.custom.bandwidth_bytes_per_s == 1.63e12
    assert spec.model.overrides == {"layers": 30}


def test_the_simulator_refuses_shared_gpus_in_one_line(spec_file: Path) -> None:
    from tokenwatt.load.target import sim_config
    from tokenwatt.spec import load_spec

    spec = load_spec(spec_file)
    hw = spec.hardware.model_copy(update={"gpus": 1, "replicas": 2})
    with pytest.raises(SpecError, match="whole GPUs"):
        sim_config(spec.model_copy(update={"hardware": hw}))


@pytest.mark.parametrize(
    ("item", "key", "value"),
    [
        ("config.intermediate_size=14336", "config.intermediate_size", 14336),
        ("model.overrides.config.head_dim=128", "config.head_dim", 128),
        ("layers=32", "layers", 32),
        ("experts=0", "experts", 0),
        ("weight_dtype=fp32", "weight_dtype", "fp32"),
        ("tied_embeddings=false", "tied_embeddings", False),
    ],
)
def test_every_geometry_hint_form_is_a_spec_override(item: str, key: str, value: Any) -> None:
    """The forms the geometry's errors and notes print (``--set config.KEY=N``,
    ``--set layers=N``, ``--set weight_dtype=DTYPE`` …) land in model.overrides, the spec
    validates, and the geometry counts with them."""
    from tokenwatt.cli.options import apply_set
    from tokenwatt.geometry import load_geometry
    from tokenwatt.spec import parse_spec

    doc = yaml.safe_load(SPEC)
    apply_set(doc, item)
    spec = parse_spec(doc)
    assert spec.model.overrides == {key: value}
    load_geometry(spec.model.source, overrides=spec.model.overrides)
    apply_set(doc, "name=kept-as-the-spec-name")  # a spec field keeps its meaning
    assert parse_spec(doc).name == "kept-as-the-spec-name"


def test_fit_check_gives_each_sharing_replica_its_share_of_memory() -> None:
    """Two replicas of Llama-3.1-8B (16 GB of weights each) fit on one 80 GB H100; four do
    not fit on one 64 GB part. A bandwidth given alone states no memory: nothing to check."""
    from tokenwatt.geometry import load_geometry
    from tokenwatt.load.fit import check_fits
    from tokenwatt.load.target import resolve_accelerator
    from tokenwatt.spec import parse_spec

    g = load_geometry("llama-3.1-8b")

    def spec(hardware: dict[str, Any]) -> BenchSpec:
        return parse_spec({**yaml.safe_load(SPEC), "hardware": hardware})

    ok = spec({"accelerator": "h100-sxm", "gpus": 1, "replicas": 2})
    check_fits(ok, g, resolve_accelerator(ok.hardware))
    tight = spec({"accelerator": "h100-sxm-64gb", "gpus": 1, "replicas": 4})
    with pytest.raises(SpecError, match=r"0\.25 × h100-sxm-64gb \(16 GB per replica\)"):
        check_fits(tight, g, resolve_accelerator(tight.hardware))
    bare = spec({"custom": {"bandwidth_bytes_per_s": 1e12}, "gpus": 1, "replicas": 4})
    assert resolve_accelerator(bare.hardware).memory_bytes is None
    check_fits(bare, g, resolve_accelerator(bare.hardware))


def test_the_sweep_guard_hands_the_node_flags_to_its_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The guard re-runs ``tokenwatt sweep`` in a worker process: the node flags and every
    ``--set`` must be on the worker's command line, or the worker benches another node."""
    from tokenwatt.load import sweep_guard

    sweep_file = tmp_path / "sweep.yaml"
    bench = yaml.safe_load(SPEC) | {"endpoint": {"url": "http://127.0.0.1:1/v1", "model": "m"}}
    server = {"command": "true {port}", "health_url": "http://127.0.0.1:{port}/h"}
    doc = {"name": "node", "server": server, "points": [{"x": 1}], "bench": bench}
    sweep_file.write_text(yaml.safe_dump(doc))
    seen: list[list[str]] = []

    def guard(argv: list[str], folder: Path, stop_timeout_s: float) -> Any:
        seen.append(argv)
        return sweep_guard.GuardOutcome(exit_code=0)

    monkeypatch.delenv(WORKER_VAR, raising=False)
    monkeypatch.setattr(sweep_guard, "guard_sweep", guard)
    args = [*NODE, "--bandwidth-tb-s", "1.63", "--set", "layers=30"]
    assert _main(monkeypatch, "sweep", str(sweep_file), *args, "-o", str(tmp_path / "o")) == 0
    argv = seen[0]
    for flag, value in zip(args[::2], args[1::2], strict=True):
        assert any(a == flag and b == value for a, b in itertools.pairwise(argv)), (
            flag,
            value,
        )
