"""Summary-only imports say what they cannot know (real files, tests/fixtures/peers/README.md):
τ from the best figure the file has (per-request records, then the pooled mean ITL, then mean
TPOT) with B's bias flagged by direction, and lengths known only as means giving a flagged
lower bound with the maxima's figure as the band's top; the figures under the names
``tokenwatt mbu`` and ``probe`` use (``mbu`` the headline, ``mbu_decode_only`` the seed's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tokenwatt.geometry import load_geometry
from tokenwatt.hardware import get_accelerator
from tokenwatt.importers import read_runs
from tokenwatt.importers.to_result import imported_result
from tokenwatt.result import BenchResult, ProbeSummary
from tokenwatt.spec import BenchSpec

PEERS = Path(__file__).parent / "fixtures" / "peers"
# what `vllm bench serve --save-result` writes only with --save-detailed
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
            "queue_times", "generated_texts", "errors")  # fmt: skip


def _import(path: Path) -> BenchResult:
    spec = BenchSpec.model_validate(
        {
            "endpoint": {"url": "http://imported.invalid/x"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
        }
    )
    _, runs = read_runs(path)
    geometry = load_geometry("llama-3.1-8b")
    return imported_result(runs, spec, geometry, get_accelerator("h100-sxm"), path)


def _summary_only_vllm(tmp: Path) -> Path:
    doc = json.loads((PEERS / "vllm_sim_detailed.json").read_text())
    out = tmp / "vllm_summary.json"
    out.write_text(json.dumps({k: v for k, v in doc.items() if k not in DETAILED}))
    return out


def _flags(p: ProbeSummary) -> set[str]:
    return set(p.flags)


def test_vllm_summary_takes_tau_from_its_pooled_itl_and_flags_it(tmp_path: Path) -> None:
    doc = json.loads((PEERS / "vllm_sim_detailed.json").read_text())
    [summary] = _import(_summary_only_vllm(tmp_path)).probes
    [detailed] = _import(PEERS / "vllm_sim_detailed.json").probes
    assert summary.itl_token_weighted_s == pytest.approx(doc["mean_itl_ms"] / 1e3, rel=1e-12)
    assert {"tau_from_pooled_itl", "kv_lengths_from_means"} <= _flags(summary)
    assert "tau_from_tpot" not in _flags(summary)
    d = summary.mbu_detail
    assert d is not None and any("+0.6…+2.3 %" in n for n in d.notes)
    # the per-request arrays are the truth here: one token per chunk, so the pooled mean ITL
    # is τ and the flag's size bounds the gap
    assert not ({"tau_from_pooled_itl", "tau_from_tpot"} & _flags(detailed))
    assert detailed.itl_token_weighted_s is not None
    ratio = summary.itl_token_weighted_s / detailed.itl_token_weighted_s
    assert 1 - 1e-3 < ratio < 1.023
    # a closed loop: the headline is the seed's figure, named as `tokenwatt mbu` names it
    assert summary.mbu is not None and d.mbu == summary.mbu == d.mbu_decode_only
    # fixed lengths are this run's truth (128 → 64 every request): the lower end is exact
    assert detailed.mbu == pytest.approx(summary.mbu, rel=0.01)


def test_a_file_with_only_mean_tpot_is_flagged_reads_high() -> None:
    """GuideLLM's report keeps no per-request records and no per-chunk ITL: τ is mean TPOT."""
    doc = json.loads((PEERS / "guidellm_report_v2.json").read_text())
    probes = _import(PEERS / "guidellm_report_v2.json").probes
    for p, b in zip(probes, doc["benchmarks"], strict=True):
        tpot = b["metrics"]["inter_token_latency_ms"]["successful"]["mean"] / 1e3
        assert p.itl_token_weighted_s == pytest.approx(tpot, rel=1e-12)
        assert {"tau_from_tpot", "kv_lengths_from_means"} <= _flags(p)
        d = p.mbu_detail
        assert d is not None
        assert any("+12 %" in n and "+25 %" in n and "read high" in n for n in d.notes)


def test_mean_lengths_band_runs_from_fixed_lengths_to_the_maxima() -> None:
    """inference-perf's report: three requests of varying lengths, means and maxima only."""
    doc = yaml.safe_load((PEERS / "inference_perf_lifecycle.yaml").read_text())
    [p] = _import(PEERS / "inference_perf_lifecycle.yaml").probes
    s = doc["successes"]
    d = p.mbu_detail
    assert d is not None and "kv_lengths_from_means" in p.flags
    low = d.mbu if d.mbu is not None else d.mbu_decode_only  # open loop: decode-only
    assert low is not None and d.mbu_lengths_upper_bound is not None
    # the lower end is KV at the means, the upper at one request of the maxima, by hand
    i = d.inputs
    mean_in, mean_out = round(s["prompt_len"]["mean"]), round(s["output_len"]["mean"])
    assert i.mean_context_per_token == pytest.approx(mean_in + (mean_out - 1) / 2, rel=1e-12)
    per_cached = i.kv_bytes_per_output_token / i.mean_context_per_token
    top = s["prompt_len"]["max"] + (s["output_len"]["max"] - 1) / 2
    extra = i.output_tokens_per_s * per_cached * (top - i.mean_context_per_token)
    want = low + extra / i.node_bandwidth_bytes_per_s
    assert d.mbu_lengths_upper_bound == pytest.approx(want, rel=1e-9)
    assert d.mbu_lengths_upper_bound > low


def test_mlenergy_file_imports_its_own_energy_and_the_node_s_runs(tmp_path: Path) -> None:
    """ML.ENERGY's result file (tests/fixtures/public): the stated node's configurations
    only, tokens/J from its own mean power within 1 % of its energy per token, τ its median
    ITL flagged as reading low, and the same MBU as the real-hardware table's row."""
    from public_rows import all_rows

    name = "meta-llama__Llama-3.1-8B-Instruct__lm-arena-chat.json"
    path = Path(__file__).parent / "fixtures" / "public" / "mlenergy" / name
    doc = json.loads(path.read_text())
    on_h100 = [c for c in doc["configurations"] if c["gpu_model"] == "H100"]
    fmt, runs = read_runs(path)
    assert fmt == "mlenergy" and len(runs) == len(doc["configurations"])
    spec = BenchSpec.model_validate(
        {
            "endpoint": {"url": "http://imported.invalid/x"},
            "model": {"source": "llama-3.1-8b"},
            "hardware": {"accelerator": "h100-sxm"},
        }
    )
    acc = get_accelerator("h100-sxm")
    result = imported_result(runs, spec, load_geometry("llama-3.1-8b"), acc, path)
    assert len(result.probes) == len(on_h100)  # the B200 configurations left out
    table = {r.point: r for r in all_rows() if r.gpu == acc.display_name and "8B" in r.model}
    for p, c in zip(result.probes, on_h100, strict=True):
        assert p.tokens_per_joule == pytest.approx(1 / c["energy_per_token_joules"], rel=0.01)
        assert p.itl_token_weighted_s == pytest.approx(c["median_itl_ms"] / 1e3, rel=1e-12)
        assert {"tau_from_median_itl", "kv_lengths_from_means"} <= set(p.flags)
        row = table[f"max_num_seqs {c['max_num_seqs']}"]
        assert p.mbu == pytest.approx(row.mbu, rel=1e-9)
