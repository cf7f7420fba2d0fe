"""Probes that measured nothing an SLO can judge end as error probes, with their cause, and
exit 3: a sender that raised (was: all sending stopped silently, exit 0, "achieved 3.0 vs 10
offered" unflagged), and an endpoint that never answers (was: exit 0 with the advice to
lower the rate or relax the SLO)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import yaml

from faultserver import FaultServer, threaded
from test_faults_probe import run_cli, spec_dict
from tokenwatt.load.derive import UNRESPONSIVE, summarize_probe
from tokenwatt.load.probe import run_probe
from tokenwatt.load.target import open_target
from tokenwatt.spec import parse_spec
from tokenwatt.traffic.traces import TraceReplay, TraceRow

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_an_exception_in_the_sender_ends_the_probe_as_an_error_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sender's own code raises at row 20 of 40 (injected: the trace parser now refuses the
    10^12-token row that did this, so no real input reaches the sender's failure path)."""
    raw = yaml.safe_load((ROOT / "examples" / "sim-azure-trace.yaml").read_text())
    raw["search"]["probe"] = {"warmup_s": 0.0, "min_duration_s": 60, "max_duration_s": 60}
    raw["sim"]["efficiency"] = 0.9
    spec = parse_spec(raw)
    real = TraceReplay._blocks_prompt
    seen = [0]

    def failing(self: TraceReplay, row: TraceRow, rng: np.random.Generator) -> list[Any]:
        seen[0] += 1
        if seen[0] > 20:
            raise MemoryError("cannot build a prompt of 10^12 tokens")
        return real(self, row, rng)

    monkeypatch.setattr(TraceReplay, "_blocks_prompt", failing)

    async def main() -> Any:
        async with open_target(spec) as target:
            rate = 10.0
            run = await run_probe(spec, target.client, rate_rps=rate, seed=0)
            return run, summarize_probe(
                index=1, run=run, spec=spec, geometry=None, accelerator=None
            )

    run, sm = asyncio.run(main())
    assert run.sender_error == "MemoryError: cannot build a prompt of 10^12 tokens"
    assert len(run.records) == 20  # what was sent is kept and judged
    assert sm.slo_detail.error_probe and not sm.slo_passed
    assert sm.slo_detail.reason is not None
    assert sm.slo_detail.reason.startswith("load generator failed: the sender stopped on Memory")
    assert "window_cut" in sm.flags


@pytest.mark.timeout(120)
def test_a_never_answering_endpoint_is_an_error_probe_exit_3(tmp_path: Path) -> None:
    with threaded(FaultServer(modes=["no_first_token"])) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(spec_dict(srv.url, server_metrics={"enabled": False})))
        out = tmp_path / "out"
        args = ["probe", str(spec), "--rate", "4", "--duration", "1", "--warmup", "0"]
        proc = run_cli([*args, "--out", str(out)], timeout=100)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert f"no SLO verdict: {UNRESPONSIVE}: all" in " ".join(proc.stdout.split())
    assert "relax the SLO" not in proc.stdout
    detail = orjson.loads((out / "result.json").read_bytes())["probes"][0]["slo_detail"]
    assert detail["error_probe"] and detail["reason"].startswith(UNRESPONSIVE)
    assert srv.total_posts >= 4


def test_timeouts_under_load_stay_slo_misses() -> None:
    """Some requests answered, the rest timed out before a first token: an SLO miss."""
    from tokenwatt.load.derive import halt_reason
    from tokenwatt.records import RequestRecord

    def rec(i: int, kind: str | None) -> RequestRecord:
        r = RequestRecord(request_id=i, scheduled_ns=i, prompt_tokens_client=1, max_tokens=1)
        r.status = "ok" if kind is None else "error"
        r.error_kind = kind  # type: ignore[assignment]
        return r

    from types import SimpleNamespace

    records = [rec(0, None), *(rec(i, "timeout_first_token") for i in range(1, 50))]
    loaded = SimpleNamespace(sender_error=None, records=records)
    assert halt_reason(loaded) is None  # type: ignore[arg-type]
    silent = SimpleNamespace(sender_error=None, records=records[1:])
    assert (halt_reason(silent) or "").startswith(UNRESPONSIVE)  # type: ignore[arg-type]
