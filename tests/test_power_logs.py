"""Power logs beside an imported run (``power.logs``, ``tokenwatt import --power``): each format
read exactly as the tool writes it, energy over the peer's own span against a hand
calculation, tokens per joule and the audit in the imported result, and bad logs refused in
one line."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tokenwatt.cli import main as cli_main
from tokenwatt.power.logs import PowerLogError, log_energy, parse_power_log
from tokenwatt.result import load_result

PEERS = Path(__file__).parent / "fixtures" / "peers"


def _smi_stamp(t: datetime) -> str:
    return t.strftime("%Y/%m/%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _smi_log(start: datetime, watts: list[list[float]], step_s: float = 0.5) -> str:
    """``nvidia-smi --query-gpu=index,timestamp,power.draw --format=csv -lms 500``: one row
    per GPU per loop, the header and units as nvidia-smi prints them."""
    rows = ["index, timestamp, power.draw [W]"]
    for k, per_gpu in enumerate(watts):
        stamp = _smi_stamp(start + timedelta(seconds=k * step_s))
        rows += [f"{i}, {stamp}, {w:.2f} W" for i, w in enumerate(per_gpu)]
    return "\n".join(rows) + "\n"


def _trapezoid_j(watts: list[float], step_s: float, a_s: float, b_s: float) -> float:
    """∫ P dt over [a, b] with P linear between samples taken every ``step_s`` from 0: summed
    in small slices, independently of ``power.integrate``."""
    n, total = 20_000, 0.0
    for i in range(n):
        t = a_s + (b_s - a_s) * (i + 0.5) / n
        k = min(int(t // step_s), len(watts) - 2)
        frac = (t - k * step_s) / step_s
        total += (watts[k] + (watts[k + 1] - watts[k]) * frac) * (b_s - a_s) / n
    return total


def test_nvidia_smi_csv_energy_matches_the_hand_calculation() -> None:
    start = datetime(2026, 12, 2, 1, 44, 50, tzinfo=UTC)
    gpu0 = [300.0 + 40 * (k % 5) for k in range(40)]
    gpu1 = [250.0 + 10 * (k % 3) for k in range(40)]
    log = parse_power_log(_smi_log(start, [[a, b] for a, b in zip(gpu0, gpu1, strict=True)]))
    assert log.source == "nvidia-smi" and set(log.channels) == {"0", "1"}
    a = start + timedelta(seconds=2.3)
    b = start + timedelta(seconds=15.8)
    report, audit = log_energy(
        log, round(a.timestamp() * 1e9), round(b.timestamp() * 1e9), tdp_w=700.0
    )
    want = _trapezoid_j(gpu0, 0.5, 2.3, 15.8) + _trapezoid_j(gpu1, 0.5, 2.3, 15.8)
    got = report.primary.energy_j  # type: ignore[union-attr]
    assert got == pytest.approx(want, rel=0.01)
    assert audit.method == "sampled_power" and audit.devices == ["0", "1"]
    assert audit.valid, audit.verdict


def test_dmon_and_dcgm_dumps() -> None:
    # `nvidia-smi dmon -o DT -s pu`: power and utilisation columns
    dmon = (
        "#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %\n"
        " 20261202   01:44:50      0    410     55     60     98     60      0      0\n"
        " 20261202   01:44:51      0    430     55     60     98     60      0      0\n"
        " 20261202   01:44:52      0    450     56     61     98     60      0      0\n"
    )
    log = parse_power_log(dmon)
    t0 = round(datetime(2026, 12, 2, 1, 44, 50, tzinfo=UTC).timestamp() * 1e9)
    report, _ = log_energy(log, t0, t0 + 2_000_000_000)
    assert report.primary.energy_j == pytest.approx((410 + 430) / 2 + (430 + 450) / 2)  # type: ignore[union-attr]
    ms = 1_796_174_690_000
    labels = '{gpu="0",UUID="GPU-a",device="nvidia0"}'
    dcgm = "".join(
        f"DCGM_FI_DEV_POWER_USAGE{labels} {400 + k} {ms + 1000 * k}\n"
        f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{labels} {1_000_000 + 400_000 * k} {ms + 1000 * k}\n"
        for k in range(6)
    )
    log = parse_power_log(dcgm)
    assert log.kind == "energy_counter"  # the counter, not the sampled gauge, when both exist
    report, audit = log_energy(log, ms * 1_000_000, (ms + 5000) * 1_000_000)
    assert report.primary.energy_j == pytest.approx(5 * 400.0)  # type: ignore[union-attr]
    assert audit.method == "energy_counter"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("hello, world\n1, 2\n", "not a power log"),
        ("# gpu pwr sm\n 0 100 5\n 0 120 5\n", "dmon -o DT"),
        ('DCGM_FI_DEV_POWER_USAGE{gpu="0"} 100\n', "without timestamps"),
        ("timestamp, power.draw [W]\n2026/12/02 01:44:50.000, 100.00 W\n", "fewer than two"),
        ("timestamp, power.draw [W]\nyesterday, 100.00 W\n", "not YYYY/MM/DD"),
    ],
)
def test_bad_logs_are_one_line(text: str, message: str) -> None:
    with pytest.raises(PowerLogError, match=message) as err:
        parse_power_log(text, "x.csv")
    assert "\n" not in str(err.value)


def test_import_with_a_power_log_gives_tokens_per_joule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = PEERS / "vllm_sim_detailed.json"
    doc = json.loads(src.read_text())
    end = datetime.strptime(doc["date"], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    start = end - timedelta(seconds=doc["duration"])
    first = start - timedelta(seconds=2)  # the log runs from before the run to after it
    watts = [[500.0 + 20 * (k % 4)] for k in range(int((doc["duration"] + 4) / 0.5) + 1)]
    (tmp_path / "power.csv").write_text(_smi_log(first, watts))
    shutil.copy(src, tmp_path / src.name)
    out = tmp_path / "imp"
    args = ["import", str(tmp_path / src.name), "--model", "llama-3.1-8b", "--hardware"]
    args += ["h100-sxm", "--power", str(tmp_path / "power.csv"), "-o", str(out)]
    monkeypatch.setattr("sys.argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli_main()
    assert ended.value.code == 0, capsys.readouterr().err
    # the same log found beside the file without --power (recognised by its content)
    beside = tmp_path / "beside"
    monkeypatch.setattr("sys.argv", ["tokenwatt", *args[:6], "-o", str(beside)])
    with pytest.raises(SystemExit):
        cli_main()
    printed = capsys.readouterr()
    assert "power log found beside" in printed.err and "tok/J" in printed.out
    assert load_result(beside).probes[0].energy == load_result(out).probes[0].energy
    p = load_result(out).probes[0]
    offset = (start - first).total_seconds()
    joules = _trapezoid_j([w[0] for w in watts], 0.5, offset, offset + doc["duration"])
    tokens = round(doc["output_throughput"] * doc["duration"])
    assert p.energy is not None and p.energy.energy_j == pytest.approx(joules, rel=0.01)
    assert p.tokens_per_joule == pytest.approx(tokens / joules, rel=0.01)
    assert p.energy.source == "nvidia-smi" and p.energy.audit[0].method == "sampled_power"


def test_import_power_without_a_run_date_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    start = datetime(2026, 12, 2, tzinfo=UTC)
    (tmp_path / "power.csv").write_text(_smi_log(start, [[100.0], [110.0], [120.0]]))
    args = ["import", str(PEERS / "inference_perf_lifecycle.yaml"), "--model", "llama-3.1-8b"]
    args += ["--hardware", "h100-sxm", "--power", str(tmp_path / "power.csv")]
    args += ["-o", str(tmp_path / "o")]
    monkeypatch.setattr("sys.argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli_main()
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "gives no run date" in err
    assert len(err.strip().splitlines()) == 1


def _vllm_dump(start_ms: int, steps: int, tokens_per_s: float, running: float) -> str:
    """vLLM's /metrics every 500 ms as Prometheus text with sample timestamps: the names and
    types the simulator's vLLM page carries (fixtures/engine_metrics), the counters rising at
    ``tokens_per_s`` with ``running`` sequences per engine step."""
    head = [
        "# TYPE vllm:num_requests_running gauge",
        "# TYPE vllm:generation_tokens_total counter",
        "# TYPE vllm:iteration_tokens_total histogram",
    ]
    lines = list(head)
    for k in range(steps):
        ms, gen = start_ms + 500 * k, tokens_per_s * 0.5 * k
        labels = '{engine="0",model_name="tw-sim"}'
        lines += [
            f"vllm:num_requests_running{labels} {running} {ms}",
            f"vllm:generation_tokens_total{labels} {gen} {ms}",
            f"vllm:iteration_tokens_total_count{labels} {gen / running} {ms}",
            f"vllm:iteration_tokens_total_sum{labels} {gen} {ms}",
        ]
    return "\n".join(lines) + "\n"


def test_import_with_an_engine_dump_gets_the_witness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = PEERS / "vllm_sim_detailed.json"
    doc = json.loads(src.read_text())
    end = datetime.strptime(doc["date"], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    first_ms = round((end.timestamp() - doc["duration"] - 2) * 1000)
    engine_t = 420.0  # the engine's own rate, 4 sequences per step
    (tmp_path / "metrics.prom").write_text(_vllm_dump(first_ms, 24, engine_t, 4.0))
    shutil.copy(src, tmp_path / src.name)
    out = tmp_path / "imp"
    args = ["import", str(tmp_path / src.name), "--model", "llama-3.1-8b", "--hardware"]
    args += ["h100-sxm", "--engine-metrics", str(tmp_path / "metrics.prom"), "-o", str(out)]
    monkeypatch.setattr("sys.argv", ["tokenwatt", *args])
    with pytest.raises(SystemExit) as ended:
        cli_main()
    assert ended.value.code == 0, capsys.readouterr().err
    p = load_result(out).probes[0]
    e = p.engine
    assert e is not None and e.engine == "vllm"
    assert e.generated_tokens_per_s == pytest.approx(engine_t, rel=1e-6)
    assert e.batch_per_replica == pytest.approx(4.0, rel=1e-6)  # tokens per engine step
    agree = {a.figure: a for a in e.agreements}
    assert p.itl_token_weighted_s is not None
    client_b = p.output_tokens_per_s * p.itl_token_weighted_s  # B = T·τ/R, R = 1
    assert agree["B"].client == pytest.approx(client_b, rel=1e-9)
    assert agree["B"].rel_diff == pytest.approx((client_b - 4.0) / 4.0, rel=1e-6)
    assert agree["T"].rel_diff == pytest.approx((doc["output_throughput"] - engine_t) / engine_t)


def test_engine_dump_without_timestamps_is_one_line(tmp_path: Path) -> None:
    from tokenwatt.engine.dump import EngineDumpError, parse_engine_dump

    text = 'vllm:num_requests_running{engine="0"} 4\n'
    with pytest.raises(EngineDumpError, match="no timestamp") as err:
        parse_engine_dump(text, "m.prom")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_named_as_a_log_or_dump_is_refused_before_it_is_read(
    tmp_path: Path, device: str
) -> None:
    """A power log or engine dump that is a link to a device would be read without end: the
    bounded reader refuses it in one line, naming the file, before any byte is read."""
    from tokenwatt.engine.dump import EngineDumpError, read_engine_dump
    from tokenwatt.power.logs import read_power_log

    link = tmp_path / "power.csv"
    link.symlink_to(device)
    with pytest.raises(PowerLogError) as log_err:
        read_power_log(link)
    with pytest.raises(EngineDumpError) as dump_err:
        read_engine_dump(link)
    for err in (log_err, dump_err):
        text = str(err.value)
        assert "not a regular file" in text and str(link) in text and "\n" not in text
