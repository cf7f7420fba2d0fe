"""One scrape of a Prometheus text page: the bounded, guarded GET, its stamp, the parse.

Why one: the engine witness (``engine.scrape``: vLLM, SGLang, llama.cpp ``/metrics``) and the
power sources (``power.prometheus``: dcgm-exporter, the simulator's energy counter) both poll
Prometheus pages from their own threads. Both fetch through ``httpget.get`` (total deadline,
byte bound, same-origin redirects, no proxy for loopback, credentials never in a message),
stamp the reading at the middle of the round trip on ``tokenwatt.clock`` and read the text
with prometheus-client's own parser, so exposition quirks (escapes, ``_total`` suffixes,
histograms) are read the way Prometheus reads them — here, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tokenwatt.clock import now_ns, stamp_between
from tokenwatt.httpget import get

__all__ = ["PromPage", "PromTextError", "Series", "parse_page", "scrape_text"]

Series = list[tuple[dict[str, str], float]]


class PromTextError(ValueError):
    """The text is not Prometheus exposition format."""


@dataclass(frozen=True, slots=True)
class PromPage:
    """Every sample of a page by its exposition name (labels, value), and the type of the
    family each name belongs to (counter, gauge, histogram, untyped, ...)."""

    series: dict[str, Series] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)


def scrape_text(
    url: str,
    *,
    timeout_s: float,
    max_bytes: int | None = None,
    headers: dict[str, str] | None = None,
    verify_tls: bool = True,
) -> tuple[int, str]:
    """(stamp, text) of ``GET url``: the stamp is the middle of the round trip on the run's
    monotonic clock. Raises ``httpget.HttpError`` as ``httpget.get`` does."""
    t0 = now_ns()
    body = get(
        url, timeout_s=timeout_s, max_bytes=max_bytes, headers=headers, verify_tls=verify_tls
    )
    t1 = now_ns()
    return stamp_between(t0, t1), body.decode("utf-8", errors="replace")


def parse_page(text: str, *, only: str | None = None) -> PromPage:
    """The samples of ``text``; with ``only`` just the lines that mention that name (a page
    with hundreds of series stays cheap when one metric is wanted). Raises ``PromTextError``
    on text that is not exposition format."""
    if only is not None:
        text = "\n".join(ln for ln in text.splitlines() if only in ln) + "\n"
    series: dict[str, Series] = {}
    types: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                series.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
                types[s.name] = family.type
    except (ValueError, TypeError, IndexError) as exc:
        raise PromTextError(f"not Prometheus text format ({exc})") from None
    return PromPage(series, types)
