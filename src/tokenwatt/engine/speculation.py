"""The engine's own speculative-decoding figures: the witness for the client's steps.

vLLM (V1) counts, per engine: ``vllm:spec_decode_num_drafts_total`` (sequences that carried
a draft into a verify step), ``…_num_draft_tokens_total`` (tokens proposed),
``…_num_accepted_tokens_total`` and ``…_num_accepted_tokens_per_pos_total{position}``
(accepted at draft position i). Its acceptance length is 1 + accepted ÷ drafts: the tokens a
verify step yields per sequence, before the request's length cuts the last step short (so it
reads a little above the client's emitted-tokens ÷ steps on short outputs). SGLang exposes
only the gauge ``sglang:spec_accept_length`` (a recent running mean). llama.cpp's
llama-server (``--metrics``) counts ``llamacpp:spec_decode_num_drafts_total`` (its help text:
"verification steps"), ``…_num_draft_tokens_total`` and ``…_num_accepted_tokens_total``
under the same names with its own prefix (captured: tests/fixtures/engine_metrics), and
reports each response's ``timings.draft_n`` and ``timings.draft_n_accepted``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenwatt.engine.parse import parse_samples

__all__ = ["SpecCounters", "spec_counters_from_text"]

_PREFIXES = ("vllm:spec_decode_num_", "llamacpp:spec_decode_num_")


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """One scrape's speculative-decoding counters, summed over engines; ``accept_length``
    is set where the engine publishes only a gauge (SGLang)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()
    accept_length_gauge: float | None = None

    def minus(self, before: SpecCounters) -> SpecCounters:
        """The increase since ``before`` (counters only; the gauge is this scrape's)."""
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        a = list(self.accepted_per_pos) + [0.0] * (n - len(self.accepted_per_pos))
        b = list(before.accepted_per_pos) + [0.0] * (n - len(before.accepted_per_pos))
        return SpecCounters(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted_tokens=self.accepted_tokens - before.accepted_tokens,
            accepted_per_pos=tuple(x - y for x, y in zip(a, b, strict=True)),
            accept_length_gauge=self.accept_length_gauge,
        )

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted ÷ drafts (vLLM's "mean acceptance length"), else SGLang's gauge."""
        if self.drafts > 0:
            return 1.0 + self.accepted_tokens / self.drafts
        return self.accept_length_gauge

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted ÷ proposed draft tokens (vLLM's "draft acceptance rate")."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None


def spec_counters_from_text(text: str) -> SpecCounters | None:
    """The spec-decode figures in Prometheus ``text``; None when the engine exposes none
    (speculation off). ``MetricsParseError`` when the text is not exposition format."""
    samples = parse_samples(text)

    prefix = next((p for p in _PREFIXES if p + "drafts_total" in samples), _PREFIXES[0])

    def total(name: str) -> float | None:
        series = samples.get(prefix + name)
        return None if series is None else sum(v for _, v in series)

    drafts = total("drafts_total")
    gauge_series = samples.get("sglang:spec_accept_length")
    gauge = None
    if gauge_series:
        gauge = sum(v for _, v in gauge_series) / len(gauge_series)
    if drafts is None and gauge is None:
        return None
    per: dict[int, float] = {}
    for labels, v in samples.get(prefix + "accepted_tokens_per_pos_total", []):
        pos = labels.get("position", "")
        if pos.isdigit():
            per[int(pos)] = per.get(int(pos), 0.0) + v
    return SpecCounters(
        drafts=drafts or 0.0,
        draft_tokens=total("draft_tokens_total") or 0.0,
        accepted_tokens=total("accepted_tokens_total") or 0.0,
        accepted_per_pos=tuple(per.get(i, 0.0) for i in range(max(per) + 1)) if per else (),
        accept_length_gauge=gauge,
    )
