"""Time limits from the SLO. A request with no first token ten TTFT limits after its send is a
known miss and is ended there (bounded: 1 s at least, 60 s at most unless twice the limit is
longer), so an endpoint that accepts and never answers is called unresponsive within a minute
(before: ``endpoint.timeouts.first_token_s`` defaulted to 600 s and a 5 s probe ran 10 min).
A server that stalls every stream after its first token is a named failure (before: exit 0
with the advice to lower the rate)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from faultserver import FaultServer
from test_faults_probe import spec_dict
from tokenwatt.load.derive import STALLS, UNRESPONSIVE, halt_reason, summarize_probe
from tokenwatt.load.probe import run_probe
from tokenwatt.load.target import open_target
from tokenwatt.metrics.slo import first_token_limit_s, slo_timeouts
from tokenwatt.records import RequestRecord
from tokenwatt.spec import ProbeSettings, parse_spec
from tokenwatt.spec.endpoint import Timeouts
from tokenwatt.spec.slo import SLO


@pytest.mark.parametrize(
    ("ttft_s", "limit_s"),
    [(0.5, 5.0), (2.0, 20.0), (10.0, 60.0), (100.0, 200.0), (0.05, 1.0), (None, 60.0)],
)
def test_the_first_token_limit_by_hand(ttft_s: float | None, limit_s: float) -> None:
    """10 x the TTFT limit, at least 1 s, at most 60 s or twice the limit if that is more."""
    assert first_token_limit_s(ttft_s) == pytest.approx(limit_s)


def test_the_slo_bounds_the_endpoint_timeout_and_a_shorter_one_stays() -> None:
    slo = SLO(ttft_ms=500, tpot_ms=50)
    assert Timeouts().first_token_s == 60.0  # the default: unresponsive within a minute
    assert slo_timeouts(Timeouts(), slo).first_token_s == 5.0
    assert slo_timeouts(Timeouts(first_token_s=600), slo).first_token_s == 5.0
    assert slo_timeouts(Timeouts(first_token_s=3), slo).first_token_s == 3.0
    other = slo_timeouts(Timeouts(idle_s=7), slo)
    assert (other.idle_s, other.connect_s, other.total_s) == (7, 10, 1800)


def _spec(url: str, **endpoint: Any) -> Any:
    d = spec_dict(url, server_metrics={"enabled": False})
    d["endpoint"] = {**d["endpoint"], "timeouts": endpoint}
    d["slo"] = {"ttft_ms": 200, "tpot_ms": 100}  # the first-token limit is then 2 s
    return parse_spec(d)


async def _probe(mode: str, **timeouts: Any) -> tuple[Any, Any]:
    async with FaultServer(modes=[mode]) as srv:
        spec = _spec(srv.url, **timeouts)
        async with open_target(spec) as target:
            run = await run_probe(
                spec, target.client, rate_rps=4, seed=1,
                settings=ProbeSettings(warmup_s=0, min_duration_s=0.5, min_requests=2,
                                       max_duration_s=5, drain_timeout_s=30, early_stop=False),
            )  # fmt: skip
    sm = summarize_probe(index=1, run=run, spec=spec, geometry=None, accelerator=None)
    return run, sm


def test_an_endpoint_that_never_answers_is_unresponsive_at_ten_ttft_limits() -> None:
    """Default endpoint timeouts (first_token_s 60 s): the SLO's 200 ms TTFT ends each wait
    at 2 s, and the probe is an error probe naming the endpoint unresponsive."""
    run, sm = asyncio.run(asyncio.wait_for(_probe("no_first_token"), 60))
    judged = [r for r in run.records if not r.cancelled]
    assert judged and all(r.error_kind == "timeout_first_token" for r in judged)
    assert all("first_token_s=2 s" in (r.error_message or "") for r in judged)
    assert all(r.done_ns - r.sent_ns >= 2_000_000_000 for r in judged)  # never early
    assert sm.slo_detail.error_probe and not sm.slo_passed
    assert (sm.slo_detail.reason or "").startswith(UNRESPONSIVE)


def test_a_server_that_stalls_every_stream_is_a_named_failure() -> None:
    run, sm = asyncio.run(asyncio.wait_for(_probe("stall", idle_s=0.3), 60))
    judged = [r for r in run.records if not r.cancelled]
    assert judged and all(r.error_kind == "stall" and len(r.chunk_ns) == 3 for r in judged)
    assert sm.slo_detail.error_probe and not sm.slo_passed
    assert (sm.slo_detail.reason or "").startswith(STALLS)


def _rec(i: int, kind: str | None) -> RequestRecord:
    r = RequestRecord(request_id=i, scheduled_ns=i, prompt_tokens_client=1, max_tokens=1)
    r.status = "ok" if kind is None else "error"
    r.error_kind = kind  # type: ignore[assignment]
    return r


def test_stalls_among_answers_stay_slo_misses() -> None:
    """Some requests answered whole: stalls there are latency failures, judged by the SLO."""
    mixed = [_rec(0, None), *(_rec(i, "stall") for i in range(1, 30))]
    assert halt_reason(SimpleNamespace(sender_error=None, records=mixed)) is None  # type: ignore[arg-type]
    silent = [_rec(0, "timeout_first_token"), *(_rec(i, "stall") for i in range(1, 30))]
    why = halt_reason(SimpleNamespace(sender_error=None, records=silent)) or ""  # type: ignore[arg-type]
    assert why.startswith(STALLS) and "29 of them silent" in why
