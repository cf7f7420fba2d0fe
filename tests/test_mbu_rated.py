"""An MBU above 100 % is an error, never a printed figure.

The rule (``metrics.mbu.check_rated_bandwidth``) by hand: MBU is inversely proportional to the
rated bandwidth, so scaling the bandwidth puts the figure exactly on either side of the
margin. End to end: a simulator serving Llama-3.1-70B on 8 × H100 probed with a spec that says
1 × H100 reads ~8 × its efficiency; the probe prints the refusal naming the GPU count, writes no
MBU, and the same server probed with the right spec reads its configured efficiency.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from tokenwatt.geometry import load_geometry
from tokenwatt.load.target import sim_config
from tokenwatt.metrics.mbu import RATED_BANDWIDTH_LIMIT, compute_mbu
from tokenwatt.result import Mbu
from tokenwatt.sim import RunningSim, start_sim_thread
from tokenwatt.spec import parse_spec

pytestmark = pytest.mark.timeout(180)

DENSE = load_geometry("llama-3.1-70b")


def _mbu(bandwidth_bytes_per_s: float, gpus: int = 1) -> Mbu:
    return compute_mbu(
        DENSE,
        output_tokens_per_s=800.0,
        itl_token_weighted_s=0.04,
        replicas=1,
        gpus=gpus,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        mean_context_per_token=600.0,
        kv_bytes_per_output_token=600.0 * DENSE.kv_bytes_per_token_full_context,
    )


def test_figure_kept_up_to_the_margin_and_refused_beyond() -> None:
    bw = 1e15  # far above need: a small figure, nothing refused
    base = _mbu(bw)
    assert base.mbu is not None and base.mbu < 0.1
    # MBU ∝ 1/bandwidth: these bandwidths put it at exactly 0.99, the limit − 0.001, + 0.001.
    under = _mbu(bw * base.mbu / 0.99)
    edge = _mbu(bw * base.mbu / (RATED_BANDWIDTH_LIMIT - 0.001))
    over = _mbu(bw * base.mbu / (RATED_BANDWIDTH_LIMIT + 0.001))
    assert RATED_BANDWIDTH_LIMIT == 1.0  # one threshold: the rating itself
    assert under.mbu == pytest.approx(0.99)
    assert edge.mbu == pytest.approx(RATED_BANDWIDTH_LIMIT - 0.001)
    assert not edge.flags.above_rated_bandwidth
    assert over.mbu is None and over.mbu_weights is None and over.mbu_kv is None
    assert over.flags.above_rated_bandwidth
    # the inputs stay, so the refused figure can be redone by hand
    assert over.inputs.bytes_per_s == pytest.approx(base.inputs.bytes_per_s)


def test_refusal_names_the_likely_inputs_and_the_gpus_needed() -> None:
    r = _mbu(1e12)  # a far too slow part: the figure reads several times 100 %
    ratio = r.inputs.bytes_per_s / r.inputs.node_bandwidth_bytes_per_s  # type: ignore[operator]
    assert ratio > 2
    note = r.notes[0]
    assert note.startswith(f"MBU refused: the derived traffic is {ratio:.2f}× the rated")
    for name in ("hardware.gpus", "hardware.accelerator", "hardware.replicas", "weight dtype"):
        assert name in note
    assert f"at least {int(-(-ratio // 1))} such GPUs" in note
    assert _mbu(1e12, gpus=8).mbu is not None  # the right GPU count: a figure again


SIM_SPEC = """
name: sim-node
model: {source: llama-3.1-70b}
hardware: {accelerator: h100-sxm, gpus: 8}
endpoint: {url: sim, model: llama-70b}
sim: {efficiency: 0.5, prefill_cost: false}
"""

PROBE_SPEC = """
name: wrong-gpus
model: {source: llama-3.1-70b}
hardware: {accelerator: h100-sxm, gpus: GPUS}
endpoint: {url: URL, model: llama-70b}
workload: {input_tokens: 64, output_tokens: 24, seed: 3}
slo: {ttft_ms: 5000, tpot_ms: 500}
search: {probe: {warmup_s: 0.5, min_duration_s: 1.0, min_requests: 8}}
"""


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with start_sim_thread(sim_config(parse_spec(yaml.safe_load(SIM_SPEC)))) as running:
        yield running


def _probe(tmp_path: Path, url: str, gpus: int) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    spec = tmp_path / f"spec-{gpus}.yaml"
    spec.write_text(PROBE_SPEC.replace("URL", url).replace("GPUS", str(gpus)))
    out = tmp_path / f"out-{gpus}"
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "probe", str(spec), "--rate", "40", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "250"},
        timeout=150,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return res, orjson.loads((out / "result.json").read_bytes())["probes"][0]


@pytest.mark.exclusive
def test_wrong_gpu_count_is_refused_end_to_end(sim: RunningSim, tmp_path: Path) -> None:
    # 2 GPUs: the weights fit the stated memory (1 GPU is refused earlier, by the fit check),
    # but the engine's traffic runs on 8 GPUs' bandwidth
    res, data = _probe(tmp_path, sim.url, gpus=2)
    assert data["mbu"] is None
    detail = data["mbu_detail"]
    assert detail["flags"]["above_rated_bandwidth"] is True
    # what it would have read: 8 GPUs' worth of bytes on two GPUs' bandwidth, ≈ 8 / 2 × 0.5
    i = detail["inputs"]
    assert i["bytes_per_s"] / i["node_bandwidth_bytes_per_s"] == pytest.approx(2.0, rel=0.1)
    assert "hardware.gpus" in detail["notes"][0]
    out = " ".join(res.stdout.split())  # the table may wrap: compare words
    assert "refused: above the rated bandwidth" in out
    assert "MBU refused: the derived traffic is 2." in out and "hardware.gpus" in out
    assert not re.search(r"MBU\s*│?\s*\d", res.stdout)  # no MBU percentage printed
    # the same server, the right node: the configured efficiency, printed as a figure
    good_res, good = _probe(tmp_path, sim.url, gpus=8)
    assert re.search(r"MBU\s*│?\s*\d", good_res.stdout)  # the check above can fail
    assert good["mbu"] == pytest.approx(0.5, abs=0.05)
    assert good["mbu_detail"]["flags"]["above_rated_bandwidth"] is False
