"""Trace replay: Azure CSV and Mooncake JSONL parsing against hand-worked rows, the time scale,
Mooncake hash ids as shared prompt blocks, and one-line errors naming the line."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from tokenwatt.errors import SpecError
from tokenwatt.spec.workload import Trace as TraceSpec
from tokenwatt.traffic.traces import TraceReplay, load_trace, parse_azure, parse_mooncake

TRACES = resources.files("tokenwatt") / "examples" / "traces"

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:46.7000000,879,1
"""


def test_azure_rows_sorted_with_every_fractional_digit() -> None:
    t = parse_azure(AZURE, Path("a.csv"))
    assert t.format == "azure"
    # sorted by time; offsets from the first row, all seven fractional digits kept:
    # 46.7000000 − 46.6805900 = 0.0194100 s; 50.9951690 − 46.6805900 = 4.3145790 s
    assert [(r.offset_ns, r.input_tokens, r.output_tokens) for r in t.rows] == [
        (0, 374, 44),
        (19_410_000, 879, 1),
        (4_314_579_000, 396, 109),
    ]
    assert t.native_rate_rps == pytest.approx(2 / 4.314579)


def test_azure_numeric_seconds() -> None:
    t = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n10.5,3,4\n12,5,6\n", Path("a"))
    assert [r.offset_ns for r in t.rows] == [0, 1_500_000_000]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("TIME,ContextTokens,GeneratedTokens\n1,2,3\n", "needs columns TIMESTAMP"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\nnoon,2,3\n", "line 3: TIMESTAMP"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,0,3\n", "line 2: ContextTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,2.5\n", "line 2: GeneratedTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "holds no requests"),
    ],
)
def test_azure_errors_name_the_line(text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match) as info:
        parse_azure(text, Path("t.csv"))
    assert str(info.value).startswith("workload.trace.path: t.csv") and "\n" not in str(info.value)


MOONCAKE = """{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]}
{"timestamp": 250, "input_length": 9, "output_length": 2, "hash_ids": [7, 8, 5]}

{"timestamp": 1000, "input_length": 6, "output_length": 1, "hash_ids": [7, 3]}
{"timestamp": 1250, "input_length": 12, "output_length": 1, "hash_ids": [7, 8]}
"""


def test_mooncake_rows_and_shared_blocks() -> None:
    t = parse_mooncake(MOONCAKE, Path("m.jsonl"))
    assert [r.offset_ns for r in t.rows] == [0, 250_000_000, 1_000_000_000, 1_250_000_000]
    assert t.rows[0].hash_ids == (7, 8, 9)
    rep = TraceReplay(t, prompt_format="token_ids", seed=3, block_tokens=4)
    ps = list(rep.plans())
    assert [len(p.prompt) for p in ps] == [10, 9, 6, 12]  # cut or padded to input_length
    assert [p.prompt_tokens_client for p in ps] == [10, 9, 6, 12]
    assert [p.max_tokens for p in ps] == [3, 2, 1, 1]
    a, b, c, d = (p.prompt for p in ps)
    assert a[:8] == b[:8] and a[8] != b[8]  # blocks 7, 8 shared; 9 vs 5 differ
    assert c[:4] == a[:4] and c[4:6] != a[4:6]  # block 7 shared, then block 3
    assert d[:8] == a[:8]  # blocks 7, 8, then 4 random tokens past the last block
    # shared_prefix_tokens: leading full blocks sent before. Row 0: none. Row 1: 7, 8 (8).
    # Row 2: 7 (4); block 3 is new and only half used. Row 3: 7, 8 (8).
    assert [p.shared_prefix_tokens for p in ps] == [0, 8, 4, 8]


def test_mooncake_text_blocks_count_in_words() -> None:
    t = parse_mooncake(MOONCAKE, Path("m.jsonl"))
    ps = list(TraceReplay(t, prompt_format="text", seed=3, block_tokens=4).plans())
    for p in ps:
        assert isinstance(p.prompt, str)
        assert len(p.prompt.split(" ")) == p.prompt_tokens_client == len(p.prompt.split())
    assert str(ps[0].prompt).split()[:8] == str(ps[1].prompt).split()[:8]


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("[1]", "line 1: not a JSON object"),
        ('{"timestamp": "x", "input_length": 1, "output_length": 1}', "timestamp"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 1}', "input_length"),
        ('{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": ["a"]}', "hash"),
        ("{oops", "line 1: not a JSON object"),
    ],
)
def test_mooncake_errors(line: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_mooncake(line + "\n", Path("m.jsonl"))


def test_time_scale_and_rate() -> None:
    t = parse_azure(AZURE, Path("a.csv"))
    rep = TraceReplay(t, prompt_format="text", seed=0, time_scale=0.5)
    assert list(rep.offsets_ns()) == [0, 9_705_000, 2_157_289_500]
    scale = t.time_scale_for(10.0)  # 2 gaps over 4.314579 s → 10 rps
    offs = list(TraceReplay(t, prompt_format="text", seed=0, time_scale=scale).offsets_ns())
    assert (len(offs) - 1) / (offs[-1] / 1e9) == pytest.approx(10.0, rel=1e-6)
    fast = rep.at_rate(10.0)
    assert fast.rate_rps == pytest.approx(10.0) and fast.first(9) == offs
    assert rep.rate_rps == pytest.approx(2 * t.native_rate_rps)  # time_scale 0.5
    assert [p.prompt for p in fast.plans()] == [p.prompt for p in rep.plans()]
    with pytest.raises(SpecError, match="time_scale"):
        TraceReplay(t, prompt_format="text", seed=0, time_scale=0.0)
    with pytest.raises(SpecError, match="positive"):
        t.time_scale_for(-1.0)
    one = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n", Path("a"))
    with pytest.raises(SpecError, match="at least two rows"):
        one.time_scale_for(1.0)


def test_bundled_examples_parse() -> None:
    with resources.as_file(TRACES / "azure_sample.csv") as p:
        az = load_trace(p, "azure")
    with resources.as_file(TRACES / "mooncake_sample.jsonl") as p:
        spec = TraceSpec(path=p, format="mooncake")
        mc = TraceReplay.from_spec(spec, prompt_format="token_ids", seed=0)
    assert len(az.rows) == 40 and 1 < az.native_rate_rps < 10
    assert len(mc.trace.rows) == 30
    plans = list(mc.plans())
    assert all(len(p.prompt) == p.prompt_tokens_client for p in plans)
    assert sum(p.shared_prefix_tokens > 0 for p in plans) >= 20  # 3 system prefixes, 30 rows
    with pytest.raises(SpecError, match="cannot read"):
        load_trace(Path("/nonexistent/trace.csv"), "azure")
