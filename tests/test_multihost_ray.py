"""``probe --ray`` across separate hosts with their own clocks (``tests/multihost.py``).

Four stand-in machines on a private bridge, each with its own network namespace and its own
``CLOCK_MONOTONIC`` (time namespaces): the endpoint (``tokenwatt sim`` with its truth log,
offset 0), the Ray head with the coordinator (+1000 s), and two Ray worker nodes (−37 s and
+500 s). The truths are independent of the code under test: the namespace offsets (exact by
construction), the simulator's truth log (when each step's tokens were written, on the
endpoint's clock), the schedule's request ids (each recorded once), and the in-process probe
of the same seed against the same endpoint.

Marked ``multihost`` (CI runs it with the long runs); skipped with a one-line reason where the
machine does not allow namespaces or Ray is not installed.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from multihost import Bed, unavailable
from test_one_t import truth_tokens

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(600)]

OFFSETS_S = {"endpoint": 0, "head": 1000, "w1": -37, "w2": 500}
_NS = 1_000_000_000
_PORT = 8000
_SEED = 4
_RATE = 16.0
# a stamp reaches the client after its step wrote it (the bridge, the kernel): the median
# delivery is tens of µs; a wrong offset (even by one step, ~9 ms) moves the median by it
_DELIVERY_NS = 1_000_000

SPEC = """
name: multihost
model: {{source: llama-3.1-8b}}
hardware: {{accelerator: h100-sxm}}
endpoint: {{url: "http://{addr}:{port}/v1", model: Llama-3.1-8B}}
workload: {{input_tokens: 64, output_tokens: 12, seed: 4}}
slo: {{ttft_ms: 2000, tpot_ms: 200}}
search: {{probe: {{warmup_s: 0.5, min_duration_s: {dur}, min_requests: 5}}}}
"""


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    pytest.importorskip("ray")
    with Bed.build(OFFSETS_S) as b:
        b.ray_head("head")
        b.ray_node("w1", b.head, cpus=2)
        b.ray_node("w2", b.head, cpus=2)
        yield b


@contextlib.contextmanager
def _sim(b: Bed, name: str) -> Iterator[Path]:
    """``tokenwatt sim`` on the endpoint host with its truth log, stopped (log flushed) at
    the end of the block."""
    ep, log = b.hosts["endpoint"], b.root / f"truth-{name}.jsonl"
    cmd = [
        *(sys.executable, "-m", "tokenwatt", "sim", "--model", "llama-3.1-8b"),
        *("--accelerator", "h100-sxm", "--no-prefill-cost"),
        *("--host", ep.addr, "--port", str(_PORT), "--truth-log", str(log)),
    ]
    proc = b.spawn("endpoint", cmd, log=f"sim-{name}.log")
    try:
        _wait_for_endpoint(b, name)
        yield log
    finally:
        with contextlib.suppress(ProcessLookupError):  # its host may be gone already
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def _wait_for_endpoint(b: Bed, name: str) -> None:
    url = f"http://{b.hosts['endpoint'].addr}:{_PORT}/v1/models"
    code = f"import urllib.request as u; u.urlopen({url!r}, timeout=2).read()"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if b.run("head", [sys.executable, "-c", code], timeout_s=20).returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError((b.root / f"sim-{name}.log").read_text()[-2000:])


def _nodes(b: Bed) -> dict[str, str]:
    """Ray node id → the bed's host name, asked of the cluster."""
    code = (
        f"import ray, json; ray.init(address={b.head!r}, log_to_driver=False); "
        "print(json.dumps({n['NodeID']: n['NodeManagerAddress'] for n in ray.nodes() "
        "if n['Alive']}))"
    )
    res = b.run("head", [sys.executable, "-c", code], timeout_s=120)
    assert res.returncode == 0, res.stderr[-2000:]
    by_addr = {h.addr: name for name, h in b.hosts.items()}
    return {nid: by_addr[a] for nid, a in orjson.loads(res.stdout.splitlines()[-1]).items()}


def _probe_cmd(b: Bed, out: str, extra: tuple[str, ...], dur: float, addr: str) -> list[str]:
    spec = b.root / f"{out}.yaml"
    text = SPEC.format(addr=addr or b.hosts["endpoint"].addr, port=_PORT, dur=dur)
    spec.write_text(
        text.replace(
            "model: Llama-3.1-8B}",
            "model: Llama-3.1-8B, timeouts: {connect_s: 2, first_token_s: 3, idle_s: 3}}",
        )
    )
    cmd = [sys.executable, "-m", "tokenwatt", "probe", str(spec), "--rate", str(_RATE)]
    return [*cmd, "--seed", str(_SEED), "--out", str(b.root / out), "--overwrite", *extra]


def _probe(
    b: Bed, out: str, *extra: str, dur: float = 4.0, addr: str = ""
) -> tuple[int, str, Path]:
    res = b.run("head", _probe_cmd(b, out, extra, dur, addr), timeout_s=300)
    return res.returncode, res.stdout + res.stderr, b.root / out


def _records(folder: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (folder / "requests.jsonl").read_bytes().splitlines()]


def _steps(log: Path) -> list[int]:
    """When each step's tokens were written, endpoint clock (the truth log)."""
    lines = log.read_bytes().splitlines()
    return sorted(orjson.loads(x)["t_end_ns"] for x in lines if x.strip())


def _stamp_errors(recs: list[dict[str, Any]], steps: list[int], to_endpoint_ns: int) -> list[int]:
    """Every chunk stamp (coordinator clock), put on the endpoint's clock with the true
    offset, minus the write time of the nearest step (signed: a stamp before its step means
    the clock arithmetic put it too early). Steps are ~9 ms apart; errors are far smaller."""
    out = []
    for r in recs:
        for c in r["chunk_ns"]:
            t = c + to_endpoint_ns
            i = bisect.bisect_left(steps, t)
            near = [steps[j] for j in (i - 1, i) if 0 <= j < len(steps)]
            out.append(min((t - x for x in near), key=abs))
    return out


def _stamp_figures(recs: list[dict[str, Any]], log: Path, what: str) -> list[int]:
    """Signed stamp errors against the truth log, sorted (their quantiles printed)."""
    to_ep = (OFFSETS_S["endpoint"] - OFFSETS_S["head"]) * _NS
    errs = sorted(_stamp_errors(recs, _steps(log), to_ep))
    q = [errs[int(f * (len(errs) - 1))] / 1e3 for f in (0.0, 0.01, 0.5, 0.99, 1.0)]
    print(
        f"{what}: stamp − truth over {len(errs)} stamps: min {q[0]:+.0f} µs, p1 {q[1]:+.0f}, "
        f"p50 {q[2]:+.0f}, p99 {q[3]:+.0f}, max {q[4]:+.0f} µs"
    )
    return errs


def _t_vs_truth(probe: dict[str, Any], log: Path, what: str) -> float:
    """T of the probe against the tokens the simulator wrote in its window (true offset)."""
    to_ep = (OFFSETS_S["endpoint"] - OFFSETS_S["head"]) * _NS
    m = probe
    w0, w1 = m["window_start_ns"], m["window_end_ns"]
    truth = truth_tokens(log, w0 + to_ep, w1 + to_ep) / ((w1 - w0) / _NS)
    t: float = m["output_tokens_per_s"]
    print(f"{what}: T {t:.1f} tok/s, truth {truth:.1f} tok/s")
    assert t == pytest.approx(truth, rel=0.02)
    return t


def _counted(recs: list[dict[str, Any]]) -> dict[int, int]:
    return {r["request_id"]: r["completion_tokens"] for r in recs if r["phase"] == "window"}


def _check_offsets(
    probe: dict[str, Any], nodes: dict[str, str], offsets_s: dict[str, int] = OFFSETS_S
) -> list[dict[str, Any]]:
    """Each actor's measured offset within its stated uncertainty of the namespace truth."""
    per_worker: list[dict[str, Any]] = probe["load_generator"]["per_worker"]
    for w in per_worker:
        host = nodes[w["node_id"]]
        true_ns = (offsets_s[host] - offsets_s["head"]) * _NS
        err = w["clock_offset_ns"] - true_ns
        print(
            f"worker {w['worker']} on {host}: offset {w['clock_offset_ns'] / _NS:+.6f} s, "
            f"true {true_ns / _NS:+.0f} s, error {err / 1e3:+.1f} µs, stated "
            f"±{w['clock_uncertainty_ns'] / 1e3:.1f} µs, drift {w['clock_drift_ppm']} ppm "
            f"over {w['clock_samples']} samples"
        )
        assert abs(err) <= w["clock_uncertainty_ns"]
    return per_worker


def test_probe_across_hosts_matches_the_namespaces_and_the_truth_log(bed: Bed) -> None:
    nodes = _nodes(bed)
    with _sim(bed, "ray4") as log:
        rc, text, folder = _probe(bed, "ray4", "--ray", bed.head, "--workers", "4")
    assert rc == 0, text[-3000:]
    probe = orjson.loads((folder / "result.json").read_bytes())["probes"][0]
    recs = _records(folder)
    # every scheduled request recorded once, none failed
    ids = sorted(r["request_id"] for r in recs)
    assert ids == list(range(len(ids))) and len(ids) >= 40
    assert [r["error_message"] for r in recs if r["status"] == "error"] == []
    per_worker = _check_offsets(probe, nodes)
    assert sorted(nodes[w["node_id"]] for w in per_worker) == ["w1", "w1", "w2", "w2"]
    # every chunk stamp, on the endpoint's clock by the true offsets, at its step's write:
    # per actor, the median lies within the offset's stated uncertainty (plus delivery)
    _stamp_figures(recs, log, "ray, 4 actors on 2 hosts")
    for w in per_worker:
        mine = [r for r in recs if r["request_id"] % 4 == w["worker"]]  # dealt k mod N
        errs = _stamp_figures(mine, log, f"  worker {w['worker']}")
        unc = w["clock_uncertainty_ns"]
        assert -unc <= errs[len(errs) // 2] <= unc + _DELIVERY_NS
    t = _t_vs_truth(probe, log, "ray")
    # the in-process probe of the same seed against the same endpoint: the same figures
    with _sim(bed, "inproc") as log1:
        rc1, text1, one = _probe(bed, "inproc")
    assert rc1 == 0, text1[-3000:]
    recs1 = _records(one)
    _stamp_figures(recs1, log1, "in-process (the same clock arithmetic without offsets)")
    one_probe = orjson.loads((one / "result.json").read_bytes())["probes"][0]
    t1 = _t_vs_truth(one_probe, log1, "in-process")
    print(f"counted: ray {len(_counted(recs))}, in-process {len(_counted(recs1))}")
    assert _counted(recs) == _counted(recs1)
    assert t == pytest.approx(t1, rel=0.1)


def _one_line(text: str, marker: str) -> str:
    (line,) = [x for x in text.splitlines() if marker in x][:1] or [""]
    return " ".join(line.split())


def test_a_worker_host_lost_mid_probe_fails_the_load_generator_not_the_server(bed: Bed) -> None:
    """w2 loses power mid-window (link gone, every process killed): the requests its actors
    held are ``worker_lost`` naming the node, the probe is "load generator failed" (exit 3),
    nothing lost or doubled. w2 then comes back in a new time namespace (+2000 s) and the
    next probe measures its new offset."""
    nodes = _nodes(bed)
    w2_nodes = {n for n, h in nodes.items() if h == "w2"}
    rc, text = _lose_host_mid_probe(bed, "lost", "w2", "--ray", bed.head, "--workers", "4")
    assert rc == 3, text[-3000:]
    assert "load generator failed" in text and "Traceback" not in text
    recs = _records(bed.root / "lost")
    ids = [r["request_id"] for r in recs]
    assert len(ids) == len(set(ids))  # none doubled
    # none missing up to the window's end (later ones whose slot had not come are dropped)
    last = max(r["request_id"] for r in recs if r["phase"] == "window")
    assert set(range(last + 1)) <= set(ids)
    lost = [r for r in recs if r["error_kind"] == "worker_lost"]
    probe = orjson.loads((bed.root / "lost" / "result.json").read_bytes())["probes"][0]
    per_worker = probe["load_generator"]["per_worker"]
    dead = {w["worker"] for w in per_worker if w["lost"]}
    assert dead and {w["node_id"] for w in per_worker if w["lost"]} <= w2_nodes
    assert lost and all(r["request_id"] % 4 in dead for r in lost)
    assert all(any(n[:12] in r["error_message"] for n in w2_nodes) for r in lost)
    assert not [r for r in recs if r["status"] == "error" and r["error_kind"] != "worker_lost"]
    assert probe["slo_detail"]["load_generator_failed"]
    print(
        f"host lost: {len(recs)} records, {len(lost)} worker_lost (workers {sorted(dead)} on "
        f"w2), 0 missing, 0 doubled; exit {rc}"
    )
    # the host comes back with another clock: the next probe measures it
    bed.revive_host("w2", 2000)
    bed.ray_node("w2", bed.head, cpus=2)
    moved = {**OFFSETS_S, "w2": 2000}
    with _sim(bed, "revived"):
        rc2, text2, folder = _probe(bed, "revived", "--ray", bed.head, "--workers", "4")
    assert rc2 == 0, text2[-3000:]
    per_worker = _check_offsets(
        orjson.loads((folder / "result.json").read_bytes())["probes"][0], _nodes(bed), moved
    )
    assert sum(1 for w in per_worker if w["clock_offset_ns"] > 900 * _NS) == 2


def test_an_unreachable_endpoint_follows_the_single_host_rules(bed: Bed) -> None:
    """An endpoint that refuses: the bed's own endpoint host, up, with nothing listening on
    the port (no simulator runs there between tests), so every connect is refused at once
    (no empty address, no timing-dependent wait). The probe across hosts ends as the
    in-process probe does: the same exit status, no traceback, and the same kind of error
    (the refused connect's errno name), whatever the wording around it."""
    refusing = bed.hosts["endpoint"].addr
    rc1, text1, out1 = _probe(bed, "nowhere1", dur=2.0, addr=refusing)
    rc4, text4, out4 = _probe(
        bed, "nowhere4", "--ray", bed.head, "--workers", "4", dur=2.0, addr=refusing
    )
    print(f"refused endpoint: in-process exit {rc1}, ray exit {rc4}")
    assert rc1 == rc4 == 2, (text1 + text4)[-3000:]
    assert "Traceback" not in text1 + text4
    for text, out in ((text1, out1), (text4, out4)):
        line = _one_line(text, "error")
        print(f"  {out.name}: {line}")
        assert "ECONNREFUSED" in line  # the kind: refused, not timed out or unreachable
        assert not (out / "requests.jsonl").exists() or not _records(out)


def _lose_host_mid_probe(b: Bed, out: str, host: str, *extra: str) -> tuple[int, str]:
    """A probe during which ``host`` loses power once 40 requests are on disk; the endpoint
    host, if it was the one, is brought back afterwards (same clock) for the next run."""
    with _sim(b, out):
        proc = b.spawn("head", _probe_cmd(b, out, extra, 8.0, ""), log=f"probe-{out}.log")
        spill = b.root / out / "requests.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if spill.exists() and len(spill.read_bytes().splitlines()) >= 40:
                break
            time.sleep(0.2)
        b.kill_host(host)
        rc = proc.wait(180)
    if host == "endpoint":
        b.revive_host("endpoint", OFFSETS_S["endpoint"])
    return rc, (b.root / f"probe-{out}.log").read_text()


def test_an_endpoint_host_lost_mid_probe_follows_the_single_host_rules(bed: Bed) -> None:
    """The endpoint's machine goes away mid-window: in-flight requests time out, new ones
    cannot connect; across hosts the probe ends as the in-process probe does (an error probe,
    exit 3, the same verdict), every request recorded once."""
    rc1, text1 = _lose_host_mid_probe(bed, "eplost1", "endpoint")
    rc4, text4 = _lose_host_mid_probe(
        bed, "eplost4", "endpoint", "--ray", bed.head, "--workers", "4"
    )
    v1, v4 = _one_line(text1, "no SLO verdict"), _one_line(text4, "no SLO verdict")
    print(f"endpoint lost: in-process exit {rc1}: {v1}\n  ray exit {rc4}: {v4}")
    assert rc1 == rc4 == 3, (text1 + text4)[-3000:]
    assert "Traceback" not in text1 + text4 and "load generator failed" not in text4
    d1 = orjson.loads((bed.root / "eplost1" / "result.json").read_bytes())["probes"][0]
    d4 = orjson.loads((bed.root / "eplost4" / "result.json").read_bytes())["probes"][0]
    assert d1["slo_detail"]["error_probe"] and d4["slo_detail"]["error_probe"]
    for out in ("eplost1", "eplost4"):
        recs = _records(bed.root / out)
        ids = [r["request_id"] for r in recs]
        assert len(ids) == len(set(ids))
        kinds: dict[str, int] = {}
        for r in recs:
            if r["status"] == "error":
                kinds[r["error_kind"]] = kinds.get(r["error_kind"], 0) + 1
        print(f"  {out}: {len(recs)} records, errors {kinds}")
        assert "worker_lost" not in kinds
