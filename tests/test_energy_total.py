"""J per total token (input included) and the prompt tokens a window is charged with, by hand;
the audit record travels into the result unchanged."""

from __future__ import annotations

import pytest

from test_metrics_energy import report, scope
from tokenwatt.load.energy_window import activity_intervals, in_window_prompt_tokens
from tokenwatt.metrics.energy import energy_metrics
from tokenwatt.records import RequestRecord
from tokenwatt.result import EnergyAudit

S = 1_000_000_000


def rec(  # noqa: PLR0917 - one request's stamps, in order
    i: int, sent: float, first: float | None, end: float | None, prompt: int | None,
    client: int = 100,
) -> RequestRecord:  # fmt: skip
    r = RequestRecord(request_id=i, scheduled_ns=int(sent * S), prompt_tokens_client=client,
                      max_tokens=16)  # fmt: skip
    r.sent_ns = int(sent * S)
    r.first_token_ns = None if first is None else int(first * S)
    r.end_ns = None if end is None else int(end * S)
    r.done_ns = r.end_ns
    r.prompt_tokens = prompt
    return r


def test_prompt_tokens_are_charged_where_their_prefill_ended() -> None:
    records = [
        rec(0, 0.5, 0.9, 3.0, 400),  # prefill ended before the window: not charged
        rec(1, 1.0, 1.2, 4.0, 300),  # inside
        rec(2, 1.5, 1.9, 2.5, None, client=250),  # no usage: the client's count
        rec(3, 2.8, 3.1, 3.5, 999),  # first token after the window
        rec(4, 1.6, None, None, 77),  # failed before its first token
    ]
    assert in_window_prompt_tokens(records, 1 * S, 3 * S) == 300 + 250
    busy, prefill = activity_intervals(records)
    assert busy[1] == (1 * S, 4 * S) and prefill[1] == (1 * S, int(1.2 * S))
    assert len(busy) == 4  # the request that never ended has no interval


def test_joules_per_total_token_by_hand() -> None:
    rep = report(scope("gpu", 600.0, 10.0), window_s=10.0)
    audit = {"source": "nvml", "scope": "gpu", "method": "energy_counter", "gpus_only": True,
             "window_s": 10.0, "samples_in_window": 100, "expected_period_s": 0.1,
             "valid": True, "verdict": "valid"}  # fmt: skip
    m = energy_metrics(
        rep, output_tokens=1000, input_tokens=5000, audit=[EnergyAudit.model_validate(audit)]
    )
    assert m.joules_per_output_token == pytest.approx(0.6)  # 600 J / 1000 output tokens
    assert m.joules_per_total_token == pytest.approx(0.1)  # 600 J / (1000 + 5000) tokens
    assert m.input_tokens == 5000
    assert m.audit[0].method == "energy_counter" and m.audit[0].valid
    assert energy_metrics(rep, output_tokens=1000).joules_per_total_token is None
