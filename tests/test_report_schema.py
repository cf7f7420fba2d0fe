"""The result file: golden round trip, version handling, redaction, and the golden's arithmetic."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tokenwatt.errors import ReportError
from tokenwatt.result import (
    SCHEMA_VERSION,
    BenchResult,
    load_result,
    write_result,
)
from tokenwatt.spec import BenchSpec

GOLDEN = Path(__file__).parent / "fixtures" / "report" / "result-v1.json"
DEMO_V1 = Path(__file__).parent / "fixtures" / "report" / "result-v1-demo.json"


def _golden_data() -> dict:
    return json.loads(GOLDEN.read_text("utf-8"))


def test_golden_round_trips_exactly(tmp_path: Path) -> None:
    """A version-1 file reads; written back it keeps every figure it had, reads back equal."""
    result = load_result(GOLDEN)
    assert result.schema_version == 1 and SCHEMA_VERSION == 3
    out = write_result(result, tmp_path / "run")
    assert out == tmp_path / "run" / "result.json"
    written = json.loads(out.read_text("utf-8"))
    assert written["geometry"]["kv_bytes_per_token_full_context"] == 98304
    assert _subset(_renamed(_golden_data(), written), written)
    assert load_result(tmp_path / "run") == result
    assert not [p for p in (tmp_path / "run").iterdir() if p.name != "result.json"]


def _renamed(v1: dict, written: dict) -> dict:
    """A version-1 file as today's version writes it back: ``kv_bytes_per_token`` (it counts
    full-context layers only) is ``kv_bytes_per_token_full_context`` in the geometry and in
    MBU's inputs, and a probe's ``achieved_rate_rps`` (it was the counted rate) is
    ``counted_rate_rps``, achieved now being the successes ÷ window."""
    out = json.loads(json.dumps(v1))
    kv = out["geometry"].pop("kv_bytes_per_token")
    assert written["geometry"]["kv_bytes_per_token_full_context"] == kv
    assert "kv_bytes_per_token" not in written["geometry"]
    probes = [out["single_stream"], out["boundary"], *out["probes"]]
    again = [written["single_stream"], written["boundary"], *written["probes"]]
    for p, w in zip(probes, again, strict=True):
        p["counted_rate_rps"] = p.pop("achieved_rate_rps")
        assert w["achieved_rate_rps"] == pytest.approx(p["requests_ok"] / p["window_s"])
        inputs = (p.get("mbu_detail") or {}).get("inputs")
        if inputs is not None and "kv_bytes_per_token" in inputs:
            inputs["kv_bytes_per_token_full_context"] = inputs.pop("kv_bytes_per_token")
    return out


def _subset(small: object, big: object) -> bool:
    """Every key and value of ``small`` is in ``big`` (new version-2 fields may be added)."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(
            k in big and _subset(v, big[k]) for k, v in small.items()
        )
    if isinstance(small, list):
        return (
            isinstance(big, list)
            and len(small) == len(big)
            and all(_subset(a, b) for a, b in zip(small, big, strict=True))
        )
    return small == big


def test_version_1_demo_file_reads_with_every_extra_declared(tmp_path: Path) -> None:
    """``tokenwatt demo`` as of version 1 (kept verbatim) wrote ~15 undeclared keys per probe;
    version 2 declares them, so the strict reader loads the file and nothing is lost."""
    raw = json.loads(DEMO_V1.read_text("utf-8"))
    r = load_result(DEMO_V1)
    assert r.schema_version == 1
    b, rb = r.boundary, raw["boundary"]
    assert b is not None
    assert (b.phase, b.seed, b.window_start_ns, b.requests_counted) == (
        rb["phase"],
        rb["seed"],
        rb["window_start_ns"],
        rb["requests_counted"],
    )
    assert b.slo_detail.quantiles_s == rb["slo_detail"]["quantiles_s"]
    assert b.slo_detail.trend_rank_correlation == rb["slo_detail"]["trend_rank_correlation"]
    assert r.search is not None and r.search.lo_rps == raw["search"]["lo_rps"]
    assert [s.reason for s in r.search.history] == [h["reason"] for h in raw["search"]["history"]]
    out = write_result(r, tmp_path / "again")
    written = json.loads(out.read_text("utf-8"))
    assert _subset(_renamed(raw, written), written)
    assert load_result(out) == r


def test_golden_content_is_what_the_views_need() -> None:
    r = load_result(GOLDEN)
    assert r.boundary is not None and r.boundary.rate_rps == 9.25
    assert [p.index for p in r.probes] == list(range(1, 11))
    assert r.single_stream is not None and r.single_stream.index == 0
    assert r.search is not None and r.search.stop_reason == "converged"
    # The bracket closed within the target precision: (9.5 - 9.25) / 9.25.
    assert r.search.precision_reached == pytest.approx((9.5 - 9.25) / 9.25, abs=1e-4)
    assert r.search.precision_reached < r.search.precision_target
    assert r.spec.endpoint.api_key_env == "OPENAI_API_KEY"  # a variable's name, kept


def test_golden_mbu_is_coherent_with_the_seed_formula() -> None:
    """Recompute MBU from the stored inputs by hand: (R·s·W(B) + KV/s) / (N·BW)."""
    r = load_result(GOLDEN)
    geo = r.geometry
    assert r.boundary is not None
    detail = r.boundary.mbu_detail
    assert detail is not None
    d = detail.inputs
    e, k = geo.experts, geo.experts_per_token
    b = d.output_tokens_per_s * d.itl_token_weighted_s / d.replicas
    assert b == pytest.approx(d.batch_per_replica, rel=1e-4)
    unique = e * (1 - (1 - k / e) ** b)
    assert unique == pytest.approx(d.expected_distinct_experts, rel=1e-4)
    w = geo.dense_weight_bytes + geo.moe_layers * unique * geo.expert_bytes
    assert w == pytest.approx(d.weight_bytes_per_step, rel=1e-4)
    assert d.mean_context_per_token is not None
    kv = d.output_tokens_per_s * d.mean_context_per_token * geo.kv_bytes_per_token_full_context
    assert kv == pytest.approx(d.kv_bytes_per_s, rel=1e-5)
    rated = r.gpus * r.accelerator.bandwidth_bytes_per_s
    assert rated == d.node_bandwidth_bytes_per_s
    mbu = (d.replicas * w / d.itl_token_weighted_s + kv) / rated
    assert mbu == pytest.approx(r.boundary.mbu, abs=5e-4)
    assert detail.mbu_weights is not None and detail.mbu_kv is not None
    assert detail.mbu_weights + detail.mbu_kv == pytest.approx(r.boundary.mbu, abs=2e-4)
    assert r.boundary.goodput_output_tokens_per_s_per_gpu == pytest.approx(
        r.boundary.goodput_output_tokens_per_s / r.gpus, abs=0.01
    )
    # Qwen3-30B-A3B: 96 KiB of BF16 KV per token (48 layers x 4 KV heads x 128 x 2 x 2 B).
    assert geo.kv_bytes_per_token_full_context == 48 * 4 * 128 * 2 * 2 == 96 * 1024


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON at line 1"),
        ("[1, 2]", "not a tokenwatt result file"),
        ('{"schema_version": 99}', "unknown schema_version 99 (written by a newer tokenwatt"),
        ('{"schema_version": 0}', "unknown schema_version 0; this tokenwatt reads 1"),
        ('{"schema_version": "1"}', "schema_version must be an integer"),
        ('{"schema_version": 1}', "invalid result file: tool_version: Field required"),
    ],
)
def test_bad_files_fail_in_one_line(tmp_path: Path, content: str, fragment: str) -> None:
    p = tmp_path / "result.json"
    p.write_text(content, "utf-8")
    with pytest.raises(ReportError) as info:
        load_result(tmp_path)
    msg = str(info.value)
    assert fragment in msg
    assert "\n" not in msg
    assert str(p) in msg


def test_missing_file_and_dir_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"has no result.json; give a run directory"):
        load_result(tmp_path)
    with pytest.raises(ReportError, match=r"nope.json not found"):
        load_result(tmp_path / "nope.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ReportError, match="cannot read result file"):
        load_result(binary)


def test_every_level_is_strict() -> None:
    """Version 2 declares every field: an unknown key is an error wherever it is."""
    data = _golden_data()
    data["probes"][0]["queue_depth_mean"] = 3.5
    with pytest.raises(ValueError, match="queue_depth_mean"):
        BenchResult.model_validate(data)
    data = _golden_data()
    data["boundary"]["slo_detail"]["typo"] = 1
    with pytest.raises(ValueError, match="typo"):
        BenchResult.model_validate(data)
    data = _golden_data()
    data["throughput_typo"] = 1
    with pytest.raises(ValueError, match="throughput_typo"):
        BenchResult.model_validate(data)


def test_secrets_never_reach_the_file(tmp_path: Path) -> None:
    data = _golden_data()
    data["spec"]["endpoint"]["url"] = "http://alice:hunter2@127.0.0.1:8000/v1"
    data["spec"]["endpoint"]["extra_body"] = {"api_key": "sk-live-123", "temperature": 0}
    r = BenchResult.model_validate(data)
    text = write_result(r, tmp_path).read_text("utf-8")
    assert "hunter2" not in text and "sk-live-123" not in text and "alice" not in text
    spec = load_result(tmp_path).spec
    assert spec.endpoint.url == "http://***@127.0.0.1:8000/v1"
    assert spec.endpoint.extra_body == {"api_key": "***", "temperature": 0}
    # a typed spec handed in is redacted on its way in too (no path writes a key)
    raw = r.spec.model_dump(mode="json")
    raw["endpoint"]["url"] = "http://bob:swordfish@127.0.0.1:8000/v1"
    typed = BenchResult.model_validate({**data, "spec": BenchSpec.model_validate(raw)})
    assert "swordfish" not in write_result(typed, tmp_path / "typed").read_text("utf-8")


def test_golden_latencies_are_ordered() -> None:
    """Quantiles of one sample set can never decrease with q; a hand-typo would break this."""
    r = load_result(GOLDEN)
    for p in [*r.probes, r.single_stream]:
        assert p is not None
        for summary in (p.ttft_s, p.tpot_s, p.itl_s, p.e2e_s):
            qs = [summary.p50, summary.p90, summary.p95, summary.p99]
            assert all(q is not None and math.isfinite(q) for q in qs)
            assert qs == sorted(qs)


def test_redaction_keeps_token_counts_and_drops_secrets() -> None:
    from tokenwatt.spec import redact

    spec = {
        "workload": {"input_tokens": {"value": 1024}, "output_tokens": {"value": 256}},
        "sim": {"max_batched_tokens": 8192},
        "endpoint": {"timeouts": {"first_token_s": 600.0}, "api_key_env": "OPENAI_API_KEY"},
        "headers": {"Authorization": "Bearer sk-1", "hf_token": "hf_abc", "token": "t"},
        "power": [{"password": "pw", "url": "https://root:calvin@10.0.0.5/redfish"}],
    }
    out = redact(spec)
    assert out["workload"] == spec["workload"]
    assert out["sim"] == spec["sim"]
    assert out["endpoint"] == spec["endpoint"]
    assert out["headers"] == {"Authorization": "***", "hf_token": "***", "token": "***"}
    assert out["power"] == [{"password": "***", "url": "https://***@10.0.0.5/redfish"}]


def test_energy_accepts_the_metrics_shape_and_fills_the_headline() -> None:
    from tokenwatt.result import EnergySummary

    metrics = {
        "output_tokens": 142_848,
        "window_s": 60.0,
        "primary_scope": "gpu",
        "measured": True,
        "tokens_per_joule": 1.93,
        "joules_per_output_token": 0.518,
        "scopes": {
            "gpu": {
                "scope": "gpu",
                "source": "prometheus",
                "kind": "energy_counter",
                "measured": True,
                "modelled": False,
                "energy_j": 73_980.0,
                "mean_power_w": 1233.0,
                "window_s": 60.0,
                "tokens_per_joule": 1.93,
                "joules_per_output_token": 0.518,
                "flags": ["gap"],
                "valid": False,
            },
            "cpu": {"scope": "cpu", "source": "rapl", "energy_j": 5400.0, "flags": []},
        },
        "warnings": [],
    }
    e = EnergySummary.model_validate(metrics)
    assert (e.scope, e.source, e.energy_j, e.mean_power_w) == (
        "gpu",
        "prometheus",
        73_980.0,
        1233.0,
    )
    assert e.flags == ["gap"] and e.modelled is False and e.measured is True
    assert e.scopes["cpu"].energy_j == 5400.0
    flat = EnergySummary.model_validate(
        {
            "energy_j": 10.0,
            "mean_power_w": 5.0,
            "source": "constant",
            "scope": "gpu",
            "modelled": True,
        }
    )
    assert flat.modelled and flat.scopes == {}


def test_latency_at_reads_summaries_and_the_verdicts_quantiles() -> None:
    data = _golden_data()
    b = data["boundary"]
    b["slo_detail"]["quantiles_s"] = {"ttft_p99.5": 0.31, "tpot_p99.5": 0.0612}
    p = BenchResult.model_validate(data).boundary
    assert p is not None
    assert p.latency_at("ttft", 0.99) == b["ttft_s"]["p99"]
    assert p.latency_at("tpot", 0.5) == b["tpot_s"]["p50"]
    assert p.latency_at("ttft", 0.995) == 0.31  # not a summary field: the verdict's value
    assert p.latency_at("e2e", 0.995) is None


def test_typed_copies_are_the_objects_the_run_used() -> None:
    """spec, geometry, accelerator and target come back as the library's own types, equal to
    what the spec, the bundled preset and the catalog give today (independent readers)."""
    import dataclasses

    from tokenwatt.geometry import load_geometry
    from tokenwatt.hardware import Accelerator, get_accelerator

    r = load_result(DEMO_V1)
    assert r.spec.model.source == "qwen3-30b-a3b"
    assert r.geometry == load_geometry(r.spec.model.source)
    # the catalog's labels (display name, aliases) have grown since the file was written;
    # its figures have not
    today = dataclasses.replace(get_accelerator("h100-sxm"), display_name="", aliases=())
    assert isinstance(r.accelerator, Accelerator)
    assert dataclasses.replace(r.accelerator, display_name="", aliases=()) == today
    assert r.target is None and r.simulated  # version 1: no target; its spec says sim


def test_version_1_spec_without_endpoint_or_hardware_is_filled_from_the_file(
    tmp_path: Path,
) -> None:
    """Version 1 defaulted endpoint to the simulator and hardware to the file's own figures;
    today both are required, so the reader fills them from exactly those."""
    data = _golden_data()
    del data["spec"]["endpoint"], data["spec"]["hardware"]
    p = tmp_path / "result.json"
    p.write_text(json.dumps(data), "utf-8")
    r = load_result(p)
    assert r.spec.endpoint.url == "sim" and r.simulated
    hw = r.spec.hardware
    assert (hw.accelerator, hw.gpus, hw.replicas) == ("h100-sxm", data["gpus"], data["replicas"])


@pytest.mark.parametrize(
    ("where", "value", "fragment"),
    [
        (("spec", "hardware", "gpus"), 0, "spec.hardware.gpus"),
        (("geometry", "layers"), "many", "geometry.layers"),
        (("accelerator", "bandwidth_bytes_per_s"), None, "accelerator.bandwidth_bytes_per_s"),
        (("target",), {"kind": "cloud", "base_url": "x"}, "target.kind"),
    ],
)
def test_a_bad_typed_copy_is_refused_in_one_line(
    tmp_path: Path, where: tuple[str, ...], value: object, fragment: str
) -> None:
    data = _golden_data()
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    p = tmp_path / "result.json"
    p.write_text(json.dumps(data), "utf-8")
    with pytest.raises(ReportError) as info:
        load_result(p)
    assert fragment in str(info.value) and "\n" not in str(info.value)


PROBE_V2 = Path(__file__).parent / "fixtures" / "report" / "probe-v2"
PROBE_V2_ONLY = Path(__file__).parent / "fixtures" / "report" / "probe-v2-only"


def test_version_2_probe_result_reads_with_counted_and_achieved_apart() -> None:
    """``tokenwatt probe`` of schema 2 (kept verbatim): its ``achieved_rate_rps`` was the
    counted rate; read today it is ``counted_rate_rps``, and achieved is the successes ÷
    window from the file's own counts."""
    raw = json.loads((PROBE_V2 / "result.json").read_text("utf-8"))["probes"][0]
    p = load_result(PROBE_V2).probes[0]
    assert p.counted_rate_rps == raw["achieved_rate_rps"]
    assert p.achieved_rate_rps == pytest.approx(raw["requests_ok"] / raw["window_s"])
    assert p.run is None  # the run record came with schema 3


def test_a_folder_with_only_an_old_probe_json_reads_as_a_one_probe_result(
    tmp_path: Path,
) -> None:
    """Before schema 3 a probe of an endpoint whose config.json could not be read wrote only
    ``probe.json``: ``load_result`` (so ``report`` and ``compare``) reads such a folder, its
    figures as the file holds them, no geometry."""
    raw = json.loads((PROBE_V2_ONLY / "probe.json").read_text("utf-8"))
    r = load_result(PROBE_V2_ONLY)
    assert r.geometry is None and r.accelerator is None and r.search is None
    p = r.probes[0]
    assert r.headline_probe == p
    assert p.output_tokens_per_s == raw["metrics"]["output_tokens_per_s"]
    assert p.achieved_rate_rps == raw["metrics"]["achieved_requests_per_s"]
    assert p.counted_rate_rps == raw["metrics"]["offered_requests_per_s"]  # v2's name for it
    assert p.mbu == raw["mbu"]
    assert p.run is not None and p.run.requests_total == raw["metrics"]["requests_total"]
    assert p.run.started_ns == raw["window"]["started_ns"]
    assert r.model_name == raw["target"]["model"] and r.spec.name == raw["spec"]["name"]
    # written back it is a schema-3 result.json, read back equal
    out = write_result(r, tmp_path / "again")
    assert json.loads(out.read_text("utf-8"))["schema_version"] == SCHEMA_VERSION
    assert load_result(out) == r
