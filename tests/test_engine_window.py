"""Engine window arithmetic, the scraper over real HTTP, and the client-vs-engine checks.
Every expected number is a hand calculation written next to it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from tokenwatt.engine import (
    AGREEMENT_TOLERANCES,
    EngineSample,
    EngineScraper,
    compare_client_engine,
    engine_batch_and_steps,
    metrics_url_for,
    summarize,
    window_figures,
)
from tokenwatt.engine.window import counter_delta, time_weighted_mean
from tokenwatt.errors import SpecError
from tokenwatt.result import EngineAgreement, EngineFigures
from tokenwatt.spec import parse_spec

S = 1_000_000_000


def test_counter_delta_across_a_reset() -> None:
    assert counter_delta([10, 15, 20]) == 10
    # restart after 20: counts from zero again, 3 then 8 → 10 + 3 + 5
    assert counter_delta([10, 20, 3, 8]) == 18


def test_time_weighted_mean_is_trapezoid_over_time() -> None:
    # 0 for 1 s rising to 4, then 4 held for 3 s: (1·2 + 3·4) / 4 = 3.5
    assert time_weighted_mean([0, 1, 4], [0, 4, 4]) == pytest.approx(3.5)
    assert time_weighted_mean([0], [7]) == 7


def _sample(t_s: float, gen: float, steps: float, busy: float, running: float) -> EngineSample:
    return EngineSample(
        int(t_s * S),
        {"generated_tokens": gen, "decode_steps": steps, "busy_slot_decodes": busy},
        {"running": running, "waiting": 0.0},
    )


def test_summarize_window() -> None:
    w = summarize(
        [_sample(0, 100, 50, 60, 2), _sample(2, 300, 150, 260, 2), _sample(4, 500, 250, 460, 2)],
        engine="llamacpp",
        url="u",
    )
    assert w.duration_s == 4
    assert w.generated_tokens == 400 and w.generated_tokens_per_s == 100
    assert w.decode_steps == 200 and w.decode_steps_per_s == 50
    assert w.busy_slots_per_decode == pytest.approx(400 / 200)
    assert w.running_mean == 2
    assert "requests_finished" in w.missing and "kv_usage" in w.missing
    assert "generated_tokens" not in w.missing
    assert w.scrapes == 3 and w.engine == "llamacpp"


def _window(**kw: float) -> EngineFigures:
    return window_figures("vllm", "u", duration_s=10.0, **kw)


def test_agreement_within_tolerance() -> None:
    # engine: 1000 tokens in 10 s = 100 tok/s; 250 steps → 4 tokens per step = B;
    # 250 steps in 10 s on 2 replicas → 12.5 steps/s each
    w = _window(generated_tokens=1000, running_mean=7.0, decode_steps=250)
    assert engine_batch_and_steps(w, 2) == (4.0, 12.5)
    # client: T = 101 tok/s (1% high), τ = 0.0792 s → B = 101 × 0.0792 / 2 = 3.9996,
    # s = 1/0.0792 = 12.626 (1.0% high)
    out = {
        a.figure: a
        for a in compare_client_engine(
            client_tokens_per_s=101.0, client_tau_s=0.0792, replicas=2, window=w
        )
    }
    assert out["T"].ok and out["T"].rel_diff == pytest.approx(0.01)
    assert out["B"].client == pytest.approx(3.9996) and out["B"].ok
    assert out["s"].client == pytest.approx(1 / 0.0792) and out["s"].ok
    assert all(a.cause is None for a in out.values())


def test_engine_batch_falls_back_to_running_requests() -> None:
    # no step counter: time-weighted running 7 over R = 2 → 3.5 per replica; no s
    assert engine_batch_and_steps(_window(generated_tokens=1000, running_mean=7.0), 2) == (
        3.5,
        None,
    )


def test_several_tokens_per_step_shows_in_s() -> None:
    # 2 busy slots, 25 steps/s, 100 tok/s: speculative decoding emits 2 tokens per sequence
    # per step, so the client's 1/τ = 1/0.02 = 50 counts tokens, twice the 25 steps/s
    w = _window(generated_tokens=1000, decode_steps=250, busy_slots_per_decode=2.0)
    out = {
        a.figure: a
        for a in compare_client_engine(
            client_tokens_per_s=100.0, client_tau_s=0.02, replicas=1, window=w, tokens_per_chunk=2
        )
    }
    assert out["s"].ok is False and out["s"].rel_diff == pytest.approx(1.0)
    assert "several tokens per engine step" in (out["s"].cause or "")
    assert "2.00 tokens per chunk" in (out["s"].cause or "")


def test_disagreement_names_a_cause_by_direction() -> None:
    w = _window(generated_tokens=1000, busy_slots_per_decode=4.0)

    def check(t: float, c: float) -> dict[str, EngineAgreement]:
        out = compare_client_engine(
            client_tokens_per_s=t, client_tau_s=0.02, replicas=1, window=w, tokens_per_chunk=c
        )
        return {a.figure: a for a in out}

    low, high = check(90.0, 1.0), check(100.0, 3.0)
    # T 90 vs 100: client 10% low → traffic the client did not send
    assert low["T"].ok is False and "did not send" in (low["T"].cause or "")
    # B = 90·0.02 = 1.8 vs busy slots 4 → idle time
    assert low["B"].ok is False and "idle" in (low["B"].cause or "")
    assert high["T"].ok and "tokens per chunk" in (high["B"].cause or "")
    assert low["s"].ok is None  # the window counts no steps


def test_tolerances_are_the_issue_s() -> None:
    # alpha: the acceptance length under speculative decoding
    assert AGREEMENT_TOLERANCES == {"T": 0.02, "B": 0.05, "s": 0.05, "alpha": 0.03}


def test_metrics_url_next_to_the_endpoint() -> None:
    assert metrics_url_for("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url_for("http://h:1/v1/") == "http://h:1/metrics"
    assert metrics_url_for("https://h/proxy/v1") == "https://h/proxy/metrics"


_NODE = {
    "endpoint": {"url": "sim"},
    "hardware": {"accelerator": "h100-sxm"},
    "model": {"source": "qwen3-8b"},
}


def test_spec_section() -> None:
    spec = parse_spec(_NODE)
    assert spec.server_metrics.engine == "auto" and spec.server_metrics.url is None
    with pytest.raises(SpecError, match=r"server_metrics\.engine"):
        parse_spec({**_NODE, "server_metrics": {"engine": "ollama"}})
    with pytest.raises(SpecError, match=r"server_metrics\.interval_s"):
        parse_spec({**_NODE, "server_metrics": {"interval_s": 0}})


class _Counter:
    """A /metrics that counts up by 8 generated tokens per scrape (real HTTP, 127.0.0.1)."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def text(self) -> str:
        with self.lock:
            self.n += 1
            n = self.n
        return (
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0"}} {8 * n}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0"} 3\n'
        )


@pytest.fixture
def server() -> Iterator[tuple[str, _Counter]]:
    counter = _Counter()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = counter.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", counter
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_scraper_over_http_detects_and_differences(server: tuple[str, _Counter]) -> None:
    base, counter = server
    scraper = EngineScraper(base + "/metrics", "auto", interval_s=0.02).start()
    threading.Event().wait(0.15)
    w = scraper.stop()
    assert w.engine == "vllm" and w.unavailable is None
    assert w.scrapes == counter.n >= 3
    # every scrape adds 8: first to last is 8 × (scrapes − 1)
    assert w.generated_tokens == 8 * (w.scrapes - 1)
    assert w.running_mean == pytest.approx(3)
    assert len(scraper.samples) == w.scrapes


def test_server_without_metrics_says_so_once(server: tuple[str, _Counter]) -> None:
    base, _ = server
    w = EngineScraper(base + "/nometrics", "vllm", interval_s=0.02).start().stop()
    assert w.unavailable is not None and "no engine metrics" in w.unavailable
    assert w.generated_tokens is None and w.scrapes == 0


def test_unknown_engine_name_is_refused() -> None:
    with pytest.raises(ValueError, match="engine must be"):
        EngineScraper("http://127.0.0.1:9/metrics", "ollama")


def test_an_idle_engine_reads_as_client_s_above_the_engine() -> None:
    # one stream: 200 decode steps in a 10 s window, decoding only 2 s of it (τ = 10 ms);
    # the engine's steps/s over the window is 20, the client's 1/τ is 100: client above
    w = _window(generated_tokens=200, decode_steps=200, busy_slots_per_decode=1.0)
    out = {
        a.figure: a
        for a in compare_client_engine(
            client_tokens_per_s=20.0, client_tau_s=0.01, replicas=1, window=w
        )
    }
    assert out["s"].ok is False and out["s"].rel_diff is not None and out["s"].rel_diff > 0
    assert "idled" in (out["s"].cause or "")

    def verdicts(share: float | None, replicas: int = 1) -> dict[str, bool | None]:
        return {
            a.figure: a.ok
            for a in compare_client_engine(
                client_tokens_per_s=20.0 * replicas,
                client_tau_s=0.01,
                replicas=replicas,
                window=w,
                client_decode_share=share,
            )
        }

    # B reads 0.2 of the engine's and s 5x; the client itself saw something decoding only
    # 20% of the window (2 s of 10): the witnesses agree on all but that time: said, not flagged
    assert verdicts(0.2) == {"T": True, "B": True, "s": True}
    explained = compare_client_engine(
        client_tokens_per_s=20.0, client_tau_s=0.01, replicas=1, window=w, client_decode_share=0.2
    )[2]
    assert "idle-explained" in (explained.cause or "") and "80%" in (explained.cause or "")
    # the same pattern while the client saw decoding all the time (several tokens per engine
    # step, speculative decoding): flagged
    assert verdicts(1.0) == {"T": True, "B": False, "s": False}
