"""A hostile /metrics on a real socket (tests/faultserver.py): it trickles, floods, goes
backwards, serves NaN or negative counters, or is two engines answering in turn. The scrape
is bounded in time and bytes, values that cannot be counts are refused by name, and a series
that goes up and down is named as several engines, never read as restarts."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
import yaml

from faultserver import FaultServer, threaded
from test_faults_probe import run_cli, spec_dict
from tokenwatt.engine import EngineScraper
from tokenwatt.engine.checks import SEVERAL_ENGINES, counter_shape
from tokenwatt.engine.scrape import MAX_METRICS_BYTES
from tokenwatt.httpget import BoundError, get_bounded
from tokenwatt.result import load_result


def _scrape_all(srv: FaultServer, scrapes: int, timeout_s: float = 1.0) -> EngineScraper:
    """``scrapes`` scrapes through the public start/stop (interval 0: start and end only),
    repeated on fresh scrapers so the server's scrape counter walks its script."""
    url = f"http://127.0.0.1:{srv.port}/metrics"
    scraper = EngineScraper(url, "vllm", interval_s=0.05, timeout_s=timeout_s).start()
    while srv.scrapes < scrapes - 1:
        time.sleep(0.02)
    return scraper


def _bounded(fn: object, limit_s: float) -> object:
    """Run ``fn`` in a thread; it must return within ``limit_s`` (a hang is the bug)."""
    out: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except Exception as exc:
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"still blocked after {limit_s} s"
    if errors:
        raise errors[0]
    return out[0]


def test_a_trickling_metrics_is_dropped_at_the_deadline() -> None:
    with threaded(FaultServer(metrics="trickle")) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        scraper = EngineScraper(url, "auto", interval_s=0, timeout_s=1.0)
        _bounded(scraper.start, 15)
        assert scraper.unavailable is not None
        assert "no complete answer within 1 s" in scraper.unavailable


def test_a_flooding_metrics_is_refused_past_the_byte_bound() -> None:
    with threaded(FaultServer(metrics="flood")) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        with pytest.raises(BoundError, match=f"larger than {MAX_METRICS_BYTES} bytes"):
            _bounded(lambda: get_bounded(url, timeout_s=30, max_bytes=MAX_METRICS_BYTES), 60)
        scraper = EngineScraper(url, "auto", interval_s=0, timeout_s=30)
        _bounded(scraper.start, 60)
        assert scraper.unavailable is not None and "larger than" in scraper.unavailable


@pytest.mark.parametrize("mode", ["nan", "negative"])
def test_non_count_values_are_refused_by_name(mode: str) -> None:
    with threaded(FaultServer(metrics=mode)) as srv:
        scraper = _scrape_all(srv, 3)
        window = scraper.stop()
    assert window.unavailable is None
    assert window.generated_tokens is None and window.prompt_tokens is None
    assert "generated_tokens" in window.missing
    assert window.running_mean == pytest.approx(1.0)  # the healthy gauge is kept
    refused = [w for w in scraper.warnings if "generated_tokens" in w]
    assert len(refused) == 1 and "refused (not a finite, non-negative value)" in refused[0]
    assert ("nan" if mode == "nan" else "= -1") in refused[0]


def test_one_fall_is_a_restart_counted_from_zero() -> None:
    with threaded(FaultServer(metrics="backwards")) as srv:
        scraper = _scrape_all(srv, 5)
        window = scraper.stop()
    values = [s.counters["generated_tokens"] for s in scraper.samples]
    assert counter_shape(values) == "restart"
    assert window.unavailable is None
    # hand count: rises before the fall, the value after it (from zero), rises after it
    i = next(k for k in range(1, len(values)) if values[k] < values[k - 1])
    rises = sum(b - a for a, b in itertools.pairwise(values) if b >= a)
    assert window.generated_tokens == pytest.approx(rises + values[i])
    assert any("fell once: read as an engine restart" in w for w in scraper.warnings)


def test_two_engines_behind_one_url_are_named_not_summed() -> None:
    with threaded(FaultServer(metrics="replicas")) as srv:
        window = _scrape_all(srv, 5).stop()
    assert window.unavailable is not None and SEVERAL_ENGINES in window.unavailable
    assert window.generated_tokens is None


def test_counter_shapes() -> None:
    assert counter_shape([1, 2, 3]) == "rising"
    assert counter_shape([100, 110, 5, 20]) == "restart"
    assert counter_shape([100, 5, 120]) == "several"  # climbs back past where it fell from
    assert counter_shape([100, 5, 101, 8]) == "several"


@pytest.mark.timeout(120)
def test_probe_against_a_trickling_metrics_runs_and_says_so(tmp_path: Path) -> None:
    """Before: ``probe`` hung before sending anything, printed nothing and ignored SIGTERM."""
    with threaded(FaultServer(metrics="trickle")) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(spec_dict(srv.url)))
        out = tmp_path / "out"
        args = ["probe", str(spec), "--rate", "5", "--duration", "1", "--out", str(out)]
        proc = run_cli(args, timeout=100)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    r = load_result(out) if (out / "result.json").exists() else None
    text = proc.stdout + proc.stderr + (" ".join(r.warnings) if r else "")
    assert "no complete answer within 5 s" in text
    assert srv.total_posts > 0


def test_power_http_shares_the_total_deadline() -> None:
    """Redfish, Prometheus power and the engine scrape read through the same bounded GET."""
    from tokenwatt import httpget
    from tokenwatt.engine import fetch_text

    with threaded(FaultServer(metrics="trickle")) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        with pytest.raises(httpget.HttpError, match="no complete answer within 1 s"):
            _bounded(lambda: httpget.get(url, timeout_s=1.0), 15)
        with pytest.raises(httpget.HttpError, match="no complete answer within 1 s"):
            _bounded(lambda: fetch_text(url, 1.0), 15)


def test_levels_from_the_window_edges_only_are_not_a_measured_zero() -> None:
    """llama.cpp is scraped at the window's edges only: its running/waiting levels there (idle
    at both ends) are no mean of the window; they are None, never 0 (was: a measured 0)."""
    with threaded(FaultServer(metrics="ok")) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        window = EngineScraper(url, "vllm", interval_s=0).start().stop()
    assert window.scrapes == 2 and window.generated_tokens == pytest.approx(100.0)
    assert window.running_mean is None and "running" in window.missing


@pytest.mark.timeout(120)
def test_sigterm_during_a_trickling_first_scrape_is_heard(tmp_path: Path) -> None:
    """Before: the first scrape held SIGTERM until the trickle ended (47.5 s for a 47-byte
    head; an endless trickle: forever). Now the scrape ends at its deadline and the signal is
    acted on (2.7 s measured); liveness asserted with a wide margin, not a speed."""
    import signal
    import subprocess
    import sys
    import time

    with threaded(FaultServer(metrics="trickle")) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(spec_dict(srv.url)))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenwatt", "probe", str(spec), "--rate", "5",
             "--duration", "30", "--out", str(tmp_path / "out")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(3)  # inside the first scrape (its deadline is 5 s)
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode != 0 and "Traceback" not in err
