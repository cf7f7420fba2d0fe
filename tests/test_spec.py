"""The spec: validation errors name the field path; secrets never survive redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.errors import SpecError
from tokenwatt.spec import load_spec, parse_spec, redact, redact_text


def test_minimal_spec_gets_documented_defaults() -> None:
    spec = parse_spec({**M, "model": {"source": "qwen3-30b-a3b"}})
    assert spec.endpoint.is_sim
    assert spec.slo.kind == "percentile"
    assert (spec.slo.ttft_ms, spec.slo.tpot_ms, spec.slo.percentile) == (2000.0, 200.0, 0.99)
    assert spec.hardware.gpus_per_replica == 1


def test_length_shorthand_and_slo_preset() -> None:
    spec = parse_spec(
        {
            **M,
            "workload": {
                "input_tokens": 512,
                "output_tokens": {"kind": "uniform", "min": 8, "max": 9},
            },
            "slo": {"preset": "MLPerf-Llama2-70B-Interactive"},
        }
    )
    assert spec.workload.input_tokens.kind == "fixed"
    assert (spec.slo.ttft_ms, spec.slo.tpot_ms) == (450.0, 40.0)


H100 = {"accelerator": "h100-sxm"}
M = {"model": {"source": "x"}, "endpoint": {"url": "sim"}, "hardware": H100}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**M, "slo": {"ttft_ms": -1}}, "slo.ttft_ms: Input should be greater than 0"),
        ({**M, "hardware": {**H100, "replicas": 0}}, "hardware.replicas: Input should be"),
        ({**M, "endpoint": {"url": "ftp://x"}}, "endpoint.url: must be 'sim' or an http(s) URL"),
        ({**M, "bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({}, "model: Field required"),
        ({**M, "slo": {"preset": "nope"}}, "unknown preset 'nope'"),
        ({**M, "workload": {"arrival": {"kind": "weibull"}}}, "workload.arrival"),
    ],
)  # fmt: skip
def test_errors_name_the_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(data, source="s.yaml")
    text = str(info.value)
    assert message in text
    assert "\n" not in text and text.startswith("s.yaml: ")


def test_bad_yaml_is_one_line_with_position(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("model:\n  source: [unclosed\n")
    with pytest.raises(SpecError, match=r"not valid YAML at line \d+"):
        load_spec(p)
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec(tmp_path / "missing.yaml")


def test_redact_removes_secrets_and_keeps_token_counts() -> None:
    data = {
        "endpoint": {
            "url": "https://user:hunter2@example.com/v1",
            "api_key_env": "OPENAI_API_KEY",
            "extra_body": {"api_key": "sk-live", "Authorization": "Bearer x", "auth_token": "t"},
            "timeouts": {"first_token_s": 5.0},
        },
        "workload": {"input_tokens": {"kind": "fixed", "value": 7}, "output_tokens": 3},
        "sim": {"max_batched_tokens": 8192},
        "power": {"sources": [{"kind": "redfish", "password_env": "BMC_PW", "password": "pw"}]},
    }
    out = redact(data)
    text = repr(out)
    for secret in ("hunter2", "sk-live", "Bearer x", "'t'", "'pw'"):
        assert secret not in text
    assert out["endpoint"]["api_key_env"] == "OPENAI_API_KEY"
    assert out["endpoint"]["url"] == "https://***@example.com/v1"
    assert out["workload"] == data["workload"]
    assert out["endpoint"]["timeouts"] == {"first_token_s": 5.0}
    assert out["sim"] == {"max_batched_tokens": 8192}
    assert out["power"]["sources"][0]["password_env"] == "BMC_PW"


@pytest.mark.parametrize(
    ("text", "secrets", "shown"),
    [
        (
            "cannot reach http://bob:pa@ss@h:80/v1/models",
            (),
            "cannot reach http://***@h:80/v1/models",
        ),
        (
            "GET https://h/m?api_key=K1&x=1&access_token=T2#f",
            (),
            "GET https://h/m?api_key=***&x=***&access_token=***#***",
        ),
        # in a URL every query value is hidden: its name says nothing about the value
        (
            "power: up @ http://127.0.0.1:9/metrics?k=TOK1 and http://h/?TOK2;x=TOK3,",
            (),
            "power: up @ http://127.0.0.1:9/metrics?k=*** and http://h/?***;x=***",
        ),
        (
            "'http://u:TOK1@h/x?q=' {'url': 'http://h/'}",
            (),
            "'http://***@h/x?q=' {'url': 'http://h/'}",
        ),
        ("GET /x?api_key=K1&n=3 failed", (), "GET /x?api_key=***&n=3 failed"),
        (
            "HTTP 500: bad Authorization: Bearer sk-abcdef",
            ("sk-abcdef",),
            "HTTP 500: bad Authorization: Bearer ***",
        ),
        ("input_tokens=5, max_tokens: 7", ("ab", None), "input_tokens=5, max_tokens: 7"),
        ("mail bob@example.com", (), "mail bob@example.com"),
    ],
)
def test_redact_text(text: str, secrets: tuple[str | None, ...], shown: str) -> None:
    assert redact_text(text, secrets) == shown


@pytest.mark.parametrize(
    ("gpus", "replicas", "shared"), [(1, 2, True), (3, 2, True), (4, 2, False)]
)
def test_replicas_may_share_gpus(gpus: int, replicas: int, shared: bool) -> None:
    """MPS or fractional GPUs: fewer GPUs than replicas, or GPUs that replicas do not divide,
    are a node description like any other (N_GPU ÷ R GPUs per replica)."""
    spec = parse_spec({**M, "hardware": {**H100, "gpus": gpus, "replicas": replicas}})
    assert spec.hardware.gpus_per_replica == gpus / replicas
    assert spec.hardware.shares_gpus is shared
