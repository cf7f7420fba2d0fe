"""An engine's /metrics recorded by someone else beside a run, read back as samples
(``tokenwatt import --engine-metrics``), so an imported run gets the engine witness a measured
probe gets.

Format: Prometheus exposition text of several scrapes appended in one file, every sample
carrying its own timestamp (ms since the epoch, as Prometheus' ``/federate`` and exposition
dumps write it); one scrape is the samples that share a timestamp. ``# HELP``/``# TYPE`` lines
apply to every scrape. The engine is detected from the metric names (``engine.names``).
Samples without timestamps cannot be placed in time and are refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenwatt.bounded import read_bounded
from tokenwatt.engine.names import EngineName, detect_engine
from tokenwatt.engine.parse import EngineSample, MetricsParseError, sample_from_text
from tokenwatt.errors import TokenwattError

__all__ = ["MAX_DUMP_BYTES", "EngineDumpError", "parse_engine_dump", "read_engine_dump"]

MAX_DUMP_BYTES = 256 * 1024 * 1024
_LINE = re.compile(r"^(?P<sample>[a-zA-Z_:][\w:]*(?:\{.*\})?\s+\S+)\s+(?P<ms>-?\d+)\s*$")


class EngineDumpError(TokenwattError):
    """A metrics dump that cannot be read; the message names the file and the fix."""


def read_engine_dump(path: Path) -> tuple[EngineName, list[EngineSample]]:
    """Read and parse one dump file (the one bounded reader: ``MAX_DUMP_BYTES``, regular
    files only, so a device file or FIFO named as a dump is refused before it is read)."""
    data = read_bounded(path, max_bytes=MAX_DUMP_BYTES, error=EngineDumpError, what="metrics dump")
    text = data.decode("utf-8", errors="replace")
    return parse_engine_dump(text, path.name)


def _scrapes(text: str, name: str) -> tuple[list[str], dict[int, list[str]]]:
    """The comment lines and each timestamp's sample lines (timestamps dropped)."""
    comments: list[str] = []
    groups: dict[int, list[str]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line not in comments:
                comments.append(line)
            continue
        m = _LINE.match(line)
        if m is None:
            raise EngineDumpError(f"{name}: line {n} has no timestamp; dump the scrapes with "
                                  "their sample timestamps (ms)")  # fmt: skip
        groups.setdefault(int(m.group("ms")), []).append(m.group("sample"))
    return comments, groups


def parse_engine_dump(
    text: str, name: str = "metrics dump"
) -> tuple[EngineName, list[EngineSample]]:
    """The engine and its samples in time order; ``t_ns`` in unix ns (the peer's clock)."""
    comments, groups = _scrapes(text, name)
    names = {s.split("{", 1)[0].split()[0] for lines in groups.values() for s in lines}
    engine = detect_engine(names)
    if engine is None:
        raise EngineDumpError(f"{name}: no engine's metric names (vllm:, sglang:, tgi_, "
                              "llamacpp:, trtllm_) in the dump")  # fmt: skip
    samples = []
    for ms in sorted(groups):
        page = "\n".join([*comments, *groups[ms]]) + "\n"
        try:
            samples.append(sample_from_text(page, engine, ms * 1_000_000))
        except MetricsParseError as exc:
            raise EngineDumpError(f"{name}: the scrape at {ms} ms is not exposition text: "
                                  f"{exc}") from None  # fmt: skip
    if len(samples) < 2:
        raise EngineDumpError(f"{name}: fewer than two scrapes: no window to count over")
    return engine, samples
