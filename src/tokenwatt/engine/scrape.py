"""Scrape an engine's /metrics at a probe's start, every ``interval_s`` and at its end.

Why a thread: the client's event loop must not stall on a slow /metrics answer, and the
power monitor already runs its pollers the same way. Each scrape is stamped at the middle
of its HTTP round trip on ``tokenwatt.clock`` (the client's clock), so the engine window and
the client window share one time base.

    scraper = EngineScraper("http://127.0.0.1:8080/metrics", "auto", interval_s=1.0)
    scraper.start()          # first scrape, blocking but bounded (detects the engine)
    ...                      # the probe runs
    window = scraper.stop()  # last scrape, blocking -> result.EngineFigures

A server without metrics is not an error: the window says so once in ``unavailable``; the
scrapes stay in ``samples`` and the run's warnings in ``warnings``. Every
scrape is bounded in total time (``timeout_s``, not per socket read: a /metrics that trickles
one byte a second once held the probe's start forever) and in bytes (``MAX_METRICS_BYTES``); a
slow or huge answer is dropped with one warning and the probe goes on. Values that cannot be
counts (NaN, negative) are refused by name (``engine.checks``).
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit, urlunsplit

from tokenwatt.engine.checks import checked_sample
from tokenwatt.engine.names import ENGINES, EngineName, detect_engine
from tokenwatt.engine.parse import EngineSample, MetricsParseError, parse_samples, sample_from_text
from tokenwatt.engine.window import clip_samples, summarize
from tokenwatt.httpget import HttpError
from tokenwatt.promscrape import scrape_text
from tokenwatt.result import EngineFigures

__all__ = ["MAX_METRICS_BYTES", "EngineScraper", "fetch_text", "metrics_url_for"]

# a vLLM /metrics page with every histogram is ~100-300 KB; 8 MB is far above any engine's and
# far below what parsing costs to be felt
MAX_METRICS_BYTES = 8 << 20


def metrics_url_for(endpoint_url: str) -> str:
    """``/metrics`` next to an OpenAI base URL: http://h:p/v1 → http://h:p/metrics."""
    parts = urlsplit(endpoint_url.rstrip("/"))
    path = parts.path
    for suffix in ("/v1", "/openai/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/") + "/metrics", "", ""))


def fetch_text(url: str, timeout_s: float, max_bytes: int = MAX_METRICS_BYTES) -> str:
    """GET ``url`` as text through the one guarded, bounded GET (``promscrape.scrape_text``):
    complete within ``timeout_s`` (total, not per socket read) and at most ``max_bytes`` long;
    raises ``httpget.HttpError`` on failure."""
    return scrape_text(url, timeout_s=timeout_s, max_bytes=max_bytes)[1]


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
        self.warnings: list[str] = []  # each once: refused values, dropped scrapes
        self._warned: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _scrape(self) -> None:
        try:
            t_ns, text = scrape_text(
                self.url, timeout_s=self.timeout_s, max_bytes=MAX_METRICS_BYTES
            )
        except (HttpError, ValueError) as reason:
            if not self.samples and self.unavailable is None:
                self.unavailable = f"no engine metrics at {self.url} ({reason})"
            else:
                self._warn(f"an engine /metrics scrape was dropped ({reason})")
            return
        try:
            if self.engine is None:
                self.engine = detect_engine(set(parse_samples(text)))
                if self.engine is None:
                    self.unavailable = (
                        f"{self.url} serves no vLLM/SGLang/TGI/llama.cpp/TRT-LLM names"
                    )
                    return
            sample, refused = checked_sample(sample_from_text(text, self.engine, t_ns))
        except MetricsParseError as exc:
            self.unavailable = f"{self.url}: {exc}"
            return
        for figure, warning in refused.items():
            self._warn(warning, figure)
        with self._lock:
            self.samples.append(sample)

    def _warn(self, text: str, key: str | None = None) -> None:
        """``text`` once per ``key`` (the text itself by default) over the scraper's life."""
        if (key or text) not in self._warned:
            self._warned.add(key or text)
            self.warnings.append(text)

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

    def stop(self, window_ns: tuple[int, int] | None = None) -> EngineFigures:
        """Take the last scrape now and summarize the window; with ``window_ns`` (the client's
        window on ``tokenwatt.clock``) the counters are interpolated to its edges. A restart
        read in the window joins ``warnings``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + self.interval_s)
        if self.unavailable is None:
            self._scrape()
        if self.unavailable is not None and len(self.samples) < 2:
            return EngineFigures(engine=self.engine, url=self.url, unavailable=self.unavailable)
        with self._lock:
            samples = sorted(self.samples, key=lambda s: s.t_ns)
        if window_ns is not None:
            samples = clip_samples(samples, *window_ns)
        return summarize(samples, engine=self.engine, url=self.url, warnings=self.warnings)
