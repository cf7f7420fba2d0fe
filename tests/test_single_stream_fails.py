"""A bench whose single-stream point already fails the SLO stops there and says so.

The simulated engine's decode step reads the weights of llama-3.1-8b (about 16 GB) at 50 %
of 1 TB/s, about 32 ms, so every request's TPOT is about 32 ms: a 5 ms TPOT limit is missed
by every request even one at a time, and no rate can pass. Four single-stream requests, all
misses, are a decided failure of the sequential test (hand-worked below), so the search
stops before its first probe with ``single_stream_fails``, the exit code of the other
"no passing rate" outcome (``failed_at_start``: 0) and no goodput in the headline.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_bench import SPEC as BENCH_SPEC
from tokenwatt.metrics.sequential import Sprt, decide_probe
from tokenwatt.result import load_result

SPEC = {
    **BENCH_SPEC,  # its model and custom accelerator (1 TB/s)
    "name": "single-stream-fails",
    "endpoint": {"url": "sim"},
    "sim": {"efficiency": 0.5, "prefill_cost": False},
    "workload": {"input_tokens": 64, "output_tokens": 8, "seed": 5},
    "slo": {"ttft_ms": 2000, "tpot_ms": 5},
    "search": {
        "start_rate_rps": 4,
        "max_probes": 3,
        "single_stream_requests": 4,
        "probe": {"warmup_s": 0.3, "min_duration_s": 1.0, "min_requests": 5},
    },
}


def test_the_stop_threshold_by_hand() -> None:
    """q = 0.99, r = 2, 95 %: p0 = 0.005, p1 = 0.02, fail at LLR ≥ ln 19 = 2.944. Each miss
    adds ln 4 = 1.3863, each hit ln(0.98/0.995) = −0.015190. Of 10 single-stream requests one
    slow one (a cold start) or two do not stop the search; three do."""
    a = math.log(19)
    per_miss, per_hit = math.log(4), math.log(0.98 / 0.995)
    two, three = 2 * per_miss + 8 * per_hit, 3 * per_miss + 7 * per_hit
    assert two == pytest.approx(2.6510, abs=1e-4) and two < a
    assert three == pytest.approx(4.0526, abs=1e-4) and three > a
    assert Sprt(0.01).llr(3, 10) == pytest.approx(three)
    test = Sprt(0.01)
    assert decide_probe(test, {"ttft_p99": 1, "tpot_p99": 0}, 10) is None
    assert decide_probe(test, {"ttft_p99": 2, "tpot_p99": 0}, 10) is None
    assert decide_probe(test, {"ttft_p99": 0, "tpot_p99": 3}, 10) == "fail"
    assert decide_probe(test, {"ttft_p99": 0, "tpot_p99": 4}, 4) == "fail"  # 4 ln 4 = 5.55


@pytest.mark.timeout(200)
def test_bench_stops_when_one_request_at_a_time_misses(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    env = {**os.environ, "COLUMNS": "160"}
    res = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "bench", str(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]  # as failed_at_start: measured, no boundary
    r = load_result(out)
    assert r.search is not None and r.search.stop_reason == "single_stream_fails"
    assert r.search.history == [] and r.probes == [] and r.boundary is None
    ss = r.single_stream
    assert ss is not None and not ss.slo_passed
    d = ss.slo_detail
    assert d.judged == 4 and d.misses["tpot_p99"] == 4 and d.sequential == "fail"
    line = next(w for w in r.warnings if w.startswith("even one request at a time"))
    assert "no rate can pass; relax the SLO or fix the server" in line
    assert d.reason is not None and d.reason in line
    text = res.stdout
    assert "even one request at a time misses the SLO" in text
    assert "no rate can pass" in text
    # The headline never reads a goodput: no boundary, and why.
    assert "tok/s at" not in text
    assert "before the bracket closed" not in text  # the warning says it once
