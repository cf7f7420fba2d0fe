"""Scrape an engine's /metrics at a probe's start, every ``interval_s`` and at its end.

Why a thread: the client's event loop must not stall on a slow /metrics answer, and the
power monitor already runs its pollers the same way. Each scrape is stamped at the middle
of its HTTP round trip on ``tokenwatt.clock`` (the client's clock), so the engine window and
the client window share one time base.

    scraper = EngineScraper("http://127.0.0.1:8080/metrics", "auto", interval_s=1.0)
    scraper.start()          # first scrape, blocking (detects the engine)
    ...                      # the probe runs
    window = scraper.stop()  # last scrape, blocking -> EngineWindow

A server without metrics is not an error: the window says so once in ``unavailable``.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from tokenwatt.clock import now_ns
from tokenwatt.engine.names import ENGINES, EngineName, detect_engine
from tokenwatt.engine.parse import EngineSample, MetricsParseError, parse_samples, sample_from_text
from tokenwatt.engine.window import EngineWindow, clip_samples, summarize

__all__ = ["EngineScraper", "fetch_text", "metrics_url_for"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def metrics_url_for(endpoint_url: str) -> str:
    """``/metrics`` next to an OpenAI base URL: http://h:p/v1 → http://h:p/metrics."""
    parts = urlsplit(endpoint_url.rstrip("/"))
    path = parts.path
    for suffix in ("/v1", "/openai/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/") + "/metrics", "", ""))


def fetch_text(url: str, timeout_s: float) -> str:
    """GET ``url`` as text; raises OSError (URLError, HTTPError, timeouts) on failure."""
    handlers: list[urllib.request.BaseHandler] = []
    if (urlsplit(url).hostname or "") in _LOOPBACK:
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    with opener.open(url, timeout=timeout_s) as resp:
        data: bytes = resp.read()
    return data.decode("utf-8", errors="replace")


class EngineScraper:
    """Collects ``EngineSample``s of one /metrics URL over one window."""

    def __init__(
        self, url: str, engine: str = "auto", *, interval_s: float = 1.0, timeout_s: float = 5.0
    ) -> None:
        if engine != "auto" and engine not in ENGINES:
            raise ValueError(f"engine must be auto or one of {', '.join(ENGINES)}, got {engine!r}")
        self.url = url
        self.engine: EngineName | None = None if engine == "auto" else engine  # type: ignore[assignment]
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples: list[EngineSample] = []
        self.unavailable: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _scrape(self) -> None:
        t0 = now_ns()
        try:
            text = fetch_text(self.url, self.timeout_s)
        except (OSError, ValueError) as exc:
            if not self.samples and self.unavailable is None:
                reason = getattr(exc, "reason", None) or exc
                self.unavailable = f"no engine metrics at {self.url} ({reason})"
            return
        t_ns = (t0 + now_ns()) // 2
        try:
            if self.engine is None:
                self.engine = detect_engine(set(parse_samples(text)))
                if self.engine is None:
                    self.unavailable = (
                        f"{self.url} serves no vLLM/SGLang/TGI/llama.cpp/TRT-LLM names"
                    )
                    return
            sample = sample_from_text(text, self.engine, t_ns)
        except MetricsParseError as exc:
            self.unavailable = f"{self.url}: {exc}"
            return
        with self._lock:
            self.samples.append(sample)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._scrape()

    def start(self) -> EngineScraper:
        """Take the first scrape now, then one every ``interval_s`` in a daemon thread."""
        self._scrape()
        if self.unavailable is None and self.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="engine-metrics", daemon=True)
            self._thread.start()
        return self

    def stop(self, window_ns: tuple[int, int] | None = None) -> EngineWindow:
        """Take the last scrape now and summarize the window; with ``window_ns`` (the client's
        window on ``tokenwatt.clock``) the counters are interpolated to its edges."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + self.interval_s)
        if self.unavailable is None:
            self._scrape()
        if self.unavailable is not None and len(self.samples) < 2:
            return EngineWindow(self.engine, self.url, unavailable=self.unavailable)
        with self._lock:
            samples = sorted(self.samples, key=lambda s: s.t_ns)
        if window_ns is not None:
            samples = clip_samples(samples, *window_ns)
        return summarize(samples, engine=self.engine, url=self.url)
