"""Speculative decoding on a real engine: llama.cpp's llama-server with the CI model as its own
draft (``--model-draft`` with ``--spec-type draft-simple``, greedy: every draft token
accepted) and the draft capped (``--spec-draft-n-max``; this build refuses the older
``--draft-max``). The client's steps and acceptance length against the server's own counters
(``llamacpp:spec_decode_num_*_total``) and each response's ``timings``."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import pytest

from test_realengine import ALIAS, find_gguf, find_server, free_port, running_server
from tokenwatt.client import StreamClient
from tokenwatt.clock import now_ns
from tokenwatt.engine.speculation import spec_counters_from_text
from tokenwatt.metrics.steps import step_figures
from tokenwatt.records import RequestRecord
from tokenwatt.spec.endpoint import Timeouts

pytestmark = [pytest.mark.realengine, pytest.mark.timeout(300)]

DRAFT_MAX, OUT, REQUESTS = 4, 48, 2  # this 2-core VM: ~0.2 s a token, ~1 s a verify step
PROMPT = "Count upwards: one two three four five six seven eight nine ten eleven twelve"
# llama-server writes each accepted token as its own SSE event, back to back. Seen here
# (2 loaded cores, -t 1): verify steps 430–1040 ms apart, a step's events 0–12 ms apart. A
# plain step (the drafter proposed nothing) is one target forward: about 40 ms on a CI machine
# four times faster than this one, so 50 ms merged it into its neighbour. Events within 20 ms
# are one step
BURST_NS = 20_000_000


SYNTH_RATES = "0.9,0.7,0.5,0.3"  # llama-server's --spec-synth-rates (benchmarking only)


@pytest.fixture(scope="module", params=[None, SYNTH_RATES], ids=["greedy-self-draft", "synth"])
def draft_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """``None``: every draft accepted; ``SYNTH_RATES``: the server's synthetic acceptance
    (unconditional per-position probabilities), so steps carry 1 to 5 tokens."""
    server, gguf = find_server(), find_gguf()
    if server is None or gguf is None:
        pytest.skip("llama-server or the GGUF not found: run .ci/setup-realengine")
    port = free_port()
    log = tmp_path_factory.mktemp("llama-spec") / "llama-server.log"
    cmd = [str(server), "-m", str(gguf), "-md", str(gguf), "--spec-type", "draft-simple"]
    cmd += ["--spec-draft-n-max", str(DRAFT_MAX), "--spec-draft-n-min", "0", "--host"]
    cmd += ["127.0.0.1", "--port", str(port), "-c", "2048"]
    cmd += ["-np", "1", "-t", "1", "--alias", ALIAS, "--metrics"]
    if request.param is not None:
        cmd += ["--spec-synth-rates", request.param]
    with running_server(cmd, port, log, health_timeout_s=90):
        yield f"http://127.0.0.1:{port}"


def _metrics(base: str) -> str:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        return str(r.read().decode())


def _timings(base: str) -> dict[str, int]:
    """One greedy non-streamed request: llama.cpp's own per-response draft statistics."""
    body = {"prompt": PROMPT, "n_predict": OUT, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(f"{base}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as r:
        t = json.loads(r.read())["timings"]
    return {k: int(t.get(k, 0)) for k in ("predicted_n", "draft_n", "draft_n_accepted")}


def _stream(base: str) -> list[RequestRecord]:
    async def main() -> list[RequestRecord]:
        greedy = {"temperature": 0}
        async with StreamClient(
            f"{base}/v1", api="completions", model=ALIAS, timeouts=Timeouts(), extra_body=greedy
        ) as c:
            out = []
            for i in range(REQUESTS):
                rec = await c.stream(
                    request_id=i,
                    scheduled_ns=now_ns(),
                    prompt=PROMPT,
                    max_tokens=OUT,
                    prompt_tokens_client=16,
                )
                out.append(rec)
            return out

    return asyncio.run(main())


def test_client_steps_agree_with_llama_server_draft_counters(draft_server: str) -> None:
    before = spec_counters_from_text(_metrics(draft_server))
    records = _stream(draft_server)
    after = spec_counters_from_text(_metrics(draft_server))
    assert before is not None and after is not None
    d = after.minus(before)
    assert all(r.ok and r.output_tokens == OUT for r in records)
    chunks = [len(r.chunk_ns) for r in records]
    fig = step_figures(records, burst_ns=BURST_NS, declared_k=DRAFT_MAX)
    print(
        f"llama-server draft-max {DRAFT_MAX}: events per request {chunks}; client steps "
        f"{fig.decode_steps}, α {fig.acceptance_length:.3f}, ITL per chunk "
        f"{(fig.itl_chunk_s or 0) * 1e3:.2f} ms, per token {(fig.itl_token_s or 0) * 1e3:.2f} ms "
        f"| server drafts {d.drafts:.0f}, draft tokens {d.draft_tokens:.0f}, accepted "
        f"{d.accepted_tokens:.0f}, α {d.acceptance_length}"
    )
    assert d.drafts > 0 and d.draft_tokens <= DRAFT_MAX * d.drafts
    assert d.acceptance_rate is not None and d.acceptance_length is not None
    assert fig.speculation == "declared" and not fig.coalesced
    assert fig.acceptance_length is not None
    # the client's steps are the server's verify steps ("drafts"), plus at most one plain step
    # per request: near the length cap the drafter may propose nothing (n-min 0)
    assert d.drafts <= fig.decode_steps <= d.drafts + REQUESTS
    # the client's extra steps are plain decodes the server drafted nothing for (near the
    # length limit), one token each: over the drafted steps alone α is the server's
    extra = fig.decode_steps - d.drafts
    drafted_alpha = (fig.decode_tokens - extra) / (fig.decode_steps - extra)
    assert drafted_alpha == pytest.approx(d.acceptance_length, rel=0.03)
    undeclared = step_figures(records, burst_ns=BURST_NS)
    if d.acceptance_rate == 1.0:  # the model drafting for itself, greedily
        assert d.acceptance_length > 4.0
        # every step the same size reads as coalescing when undeclared: the documented limit
        # of telling speculation from chunk sizes alone
        assert undeclared.coalesced
    else:  # synthetic acceptance: sizes vary, speculation detected without a declaration
        assert 1.0 < d.acceptance_length < 4.0
        assert undeclared.speculation == "detected" and not undeclared.coalesced
    t = _timings(draft_server)
    assert t["draft_n"] > 0 and t["draft_n_accepted"] <= t["draft_n"]
