"""Power logs other tools wrote beside a run, read after the fact (``tokenwatt import --power``).

A measured run samples its own sources (``power.monitor``); an imported run brings the log its
operator kept. Formats, detected from the text (never the file name):

* ``nvidia-smi --query-gpu=timestamp,power.draw --format=csv`` (optionally ``index`` or
  ``uuid``/``pci.bus_id`` columns, ``nounits``, ``noheader`` is refused: no column names);
  timestamps ``YYYY/MM/DD HH:MM:SS.mmm``;
* ``nvidia-smi dmon -o DT`` (date and time columns; without them a sample cannot be placed in
  time, refused);
* DCGM exporter text snapshots (Prometheus exposition, several scrapes appended), each sample
  with its own timestamp in ms: ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ counter, used
  when present) else ``DCGM_FI_DEV_POWER_USAGE`` (W);
* AIPerf's GPU telemetry export (``gpu_telemetry_export.jsonl``: one JSON record per GPU per
  scrape, ``timestamp_ns`` and ``telemetry_data``), from DCGM, pynvml or amdsmi: the energy
  counter (MJ, field ``energy_consumption`` or the vendor-prefixed ``nvidia_``/``amd_`` names
  of later versions) when every GPU has one, else the power (``gpu_power_usage``,
  ``nvidia_power_usage``, ``amd_power``, W);
* ``nvidia-smi dmon`` rows as CSV with a relative first column (``time,gpu,pwr,…`` then a
  units row ``s,Idx,W,…``), as loggers that wrap dmon write them: seconds since the logger
  started, no wall clock, so such a log is read for a window stated on its own clock and is
  never placed on a run's span (``merge_logs`` refuses it, ``logs_beside`` passes it over);
* SPEC PTDaemon's sample log (``spl.txt``, the power analyser's log MLPerf Inference power
  submissions ship): ``Time,MM-DD-YYYY HH:MM:SS.mmm,Watts,W,Volts,…,Mark,…`` lines, the
  analyser's total at the wall (scope ``wall``, never summed with GPU logs); non-positive
  readings (an analyser off or a bad reading) are skipped, as MLPerf's own checker does.

nvidia-smi, dmon and PTDaemon write the machine's local wall time without a zone; it is read as UTC,
the same convention as the peers' own naive dates (vLLM's ``date``), so the two align when
both came from one machine. Energy over a window goes through ``power.integrate`` (counter
deltas, power trapezoids) and ``power.audit`` (method, checks), as for a measured probe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import Any

import orjson

from tokenwatt.bounded import read_bounded
from tokenwatt.errors import TokenwattError
from tokenwatt.power.audit import ChannelData, audit_scope
from tokenwatt.power.base import SourceKind
from tokenwatt.power.integrate import integrate
from tokenwatt.power.results import EnergyReport, ScopeEnergy
from tokenwatt.result import EnergyAudit

__all__ = [
    "MAX_LOG_BYTES",
    "PowerLog",
    "PowerLogError",
    "log_energy",
    "logs_beside",
    "merge_logs",
    "parse_power_log",
    "read_power_log",
]

MAX_LOG_BYTES = 256 * 1024 * 1024  # a day of 8 GPUs at 10 Hz is ~200 MB of nvidia-smi CSV
COVERED_ENOUGH = 0.9  # below this share of the window with readings: flagged "partial"


class PowerLogError(TokenwattError):
    """A power log that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True, slots=True)
class PowerLog:
    """One log's readings per device: unix-epoch ns stamps (ns since the logger started where
    ``relative``) and W (sampler) or J (counter)."""

    source: str  # "nvidia-smi", "nvidia-smi dmon", "dcgm-exporter", "aiperf", "ptdaemon"
    kind: SourceKind
    channels: dict[str, tuple[list[int], list[float]]]
    file: str = ""
    scope: str = "gpu"  # "wall" for an analyser at the plug (PTDaemon)
    relative: bool = False  # stamps are ns since the logger started, not unix time

    @property
    def span_ns(self) -> tuple[int, int]:
        """The first and last stamp over every device."""
        firsts = [t[0] for t, _ in self.channels.values() if t]
        lasts = [t[-1] for t, _ in self.channels.values() if t]
        return min(firsts), max(lasts)


def read_power_log(path: Path) -> PowerLog:
    """Read and parse one log file (the one bounded reader: ``MAX_LOG_BYTES``, regular files
    only, so a device file or FIFO named as a log is refused before it is read)."""
    data = read_bounded(path, max_bytes=MAX_LOG_BYTES, error=PowerLogError, what="power log")
    text = data.decode("utf-8", errors="replace")
    return parse_power_log(text, path.name)


_SNIFF_BYTES = 4096  # enough for a header and the first samples of every format
_MAX_BESIDE = 200  # files looked at in the peer file's folder


def _kind(lines: list[str]) -> str | None:
    """Which log format the first lines are, from their own content; None: not a power log."""
    if not lines:
        return None
    if "power.draw" in lines[0] and "timestamp" in lines[0]:
        return "nvidia-smi"
    if lines[0].lstrip().startswith("#") and "pwr" in lines[0].split():
        return "dmon"
    head = lines[0].split(",")
    if head[0] == "time" and "pwr" in head and len(lines) > 1 and lines[1].startswith("s,"):
        return "dmon-relative"
    if any(line.startswith("DCGM_FI_DEV_") for line in lines):
        return "dcgm"
    if lines[0].startswith("Time,") and ",Watts," in lines[0]:
        return "ptdaemon"
    first = lines[0].lstrip()
    if first.startswith("{") and '"timestamp_ns"' in first and '"telemetry_data"' in first:
        return "aiperf"
    return None


def logs_beside(path: Path) -> list[Path]:
    """Power logs in the folder of a peer's result file, recognised by their first bytes
    (never their names); the result file itself and unreadable files are skipped."""
    found = []
    for entry in sorted(path.parent.iterdir())[:_MAX_BESIDE]:
        if entry == path or not entry.is_file():
            continue
        try:
            with entry.open("rb") as f:
                head = f.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
        kind = _kind([line for line in head.splitlines() if line.strip()])
        if kind is not None and kind != "dmon-relative":  # no wall clock: cannot be placed
            found.append(entry)
    return found


def parse_power_log(text: str, name: str = "power log") -> PowerLog:
    """The log's format from its text, then its readings; one line naming the problem else."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise PowerLogError(f"{name}: empty")
    kind = _kind(lines)
    if kind == "nvidia-smi":
        return _nvidia_smi_csv(lines, name)
    if kind == "dmon":
        return _dmon(lines, name)
    if kind == "dcgm":
        return _dcgm(lines, name)
    if kind == "dmon-relative":
        return _dmon_relative(lines, name)
    if kind == "ptdaemon":
        return _ptdaemon(lines, name)
    if kind == "aiperf":
        return _aiperf(lines, name)
    raise PowerLogError(
        f"{name}: not a power log tokenwatt reads (nvidia-smi --query-gpu=timestamp,power.draw "
        "--format=csv, nvidia-smi dmon -o DT, a DCGM exporter dump with timestamps, AIPerf's "
        "gpu_telemetry_export.jsonl or PTDaemon's spl.txt)"
    )


def _smi_time_ns(text: str) -> int:
    """nvidia-smi's ``2024/10/30 18:42:33.189`` (local wall time, read as UTC) in unix ns."""
    stamp = datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
    return round(stamp.timestamp() * 1e9)


def _watts(cell: str) -> float | None:
    """``250.12 W`` or ``250.12`` as watts; None for ``[N/A]`` and the like."""
    try:
        return float(cell.strip().removesuffix("W").strip())
    except ValueError:
        return None


def _add(channels: dict[str, tuple[list[int], list[float]]], dev: str, t: int, v: float) -> None:
    ts, vs = channels.setdefault(dev, ([], []))
    if ts and t <= ts[-1]:  # a repeated or out-of-order stamp adds nothing to integrate
        return
    ts.append(t)
    vs.append(v)


def _nvidia_smi_csv(lines: list[str], name: str) -> PowerLog:
    header = [c.strip().lower() for c in lines[0].split(",")]
    t_col = header.index("timestamp")
    p_col = next(i for i, c in enumerate(header) if c.startswith("power.draw"))
    id_col = next((header.index(c) for c in ("index", "uuid", "pci.bus_id") if c in header), None)
    channels: dict[str, tuple[list[int], list[float]]] = {}
    seen: dict[str, int] = {}
    for n, line in enumerate(lines[1:], 2):
        cells = line.split(",")
        if len(cells) < len(header):
            raise PowerLogError(f"{name}: line {n} has {len(cells)} columns, the header has "
                                f"{len(header)}")  # fmt: skip
        try:
            t = _smi_time_ns(cells[t_col])
        except ValueError:
            raise PowerLogError(f"{name}: line {n}: timestamp {cells[t_col].strip()!r} is "
                                "not YYYY/MM/DD HH:MM:SS.mmm") from None  # fmt: skip
        w = _watts(cells[p_col])
        if w is None:
            continue
        if id_col is not None:
            dev = cells[id_col].strip()
        else:  # one row per GPU per loop, in index order, the loop's rows share a stamp
            key = cells[t_col].strip()
            seen[key] = seen.get(key, -1) + 1
            dev = str(seen[key])
        _add(channels, dev, t, w)
    return _checked(PowerLog("nvidia-smi", "power_sampler", channels, name))


def _dmon(lines: list[str], name: str) -> PowerLog:
    cols = lines[0].lstrip("#").split()
    lower = [c.lower() for c in cols]
    if "date" not in lower or "time" not in lower:
        raise PowerLogError(f"{name}: nvidia-smi dmon without its date and time columns; "
                            "record it with `nvidia-smi dmon -o DT`")  # fmt: skip
    d, tm, g, p = (lower.index(c) for c in ("date", "time", "gpu", "pwr"))
    channels: dict[str, tuple[list[int], list[float]]] = {}
    for line in lines[1:]:
        if line.lstrip().startswith("#"):
            continue
        cells = line.split()
        if len(cells) < len(cols):
            continue
        try:
            stamp = datetime.strptime(f"{cells[d]} {cells[tm]}", "%Y%m%d %H:%M:%S")
            w = float(cells[p])
        except ValueError:
            continue
        t = round(stamp.replace(tzinfo=UTC).timestamp() * 1e9)
        _add(channels, cells[g], t, w)
    return _checked(PowerLog("nvidia-smi dmon", "power_sampler", channels, name))


def _dmon_relative(lines: list[str], name: str) -> PowerLog:
    """dmon rows as CSV after a ``time`` column of seconds since the logger started (the
    units row ``s,Idx,W,…`` skipped); stamps kept on that clock, the log marked relative."""
    cols = lines[0].split(",")
    t_col, g_col, p_col = (cols.index(c) for c in ("time", "gpu", "pwr"))
    channels: dict[str, tuple[list[int], list[float]]] = {}
    for n, line in enumerate(lines[2:], 3):
        cells = line.split(",")
        if len(cells) < len(cols):
            raise PowerLogError(f"{name}: line {n} has {len(cells)} columns, the header has "
                                f"{len(cols)}")  # fmt: skip
        try:
            t = float(cells[t_col])
        except ValueError:
            raise PowerLogError(f"{name}: line {n}: time {cells[t_col]!r} is not seconds") from None
        try:
            w = float(cells[p_col])
        except ValueError:  # dmon prints "-" where a reading is not available
            continue
        _add(channels, cells[g_col].strip(), round(t * 1e9), w)
    log = PowerLog("nvidia-smi dmon", "power_sampler", channels, name, relative=True)
    return _checked(log)


_SAMPLE = re.compile(r"^(DCGM_FI_DEV_\w+)\{([^}]*)\}\s+(\S+)(?:\s+(\d+))?\s*$")
_GPU = re.compile(r'\bgpu="([^"]*)"')


def _dcgm(lines: list[str], name: str) -> PowerLog:
    series: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for line in lines:
        m = _SAMPLE.match(line.strip())
        if m is None or m.group(1) not in _DCGM_METRICS:
            continue
        if m.group(4) is None:
            raise PowerLogError(f"{name}: DCGM samples without timestamps cannot be placed in "
                                "time; dump them with their timestamps (ms)")  # fmt: skip
        gpu = _GPU.search(m.group(2))
        value = float(m.group(3)) * _DCGM_METRICS[m.group(1)]
        _add(series.setdefault(m.group(1), {}), gpu.group(1) if gpu else "0",
             int(m.group(4)) * 1_000_000, value)  # fmt: skip
    counter = series.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    if counter:
        return _checked(PowerLog("dcgm-exporter", "energy_counter", counter, name))
    return _checked(
        PowerLog("dcgm-exporter", "power_sampler", series.get("DCGM_FI_DEV_POWER_USAGE", {}), name)
    )


# metric -> factor to J (counter) or W (power)
_DCGM_METRICS = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1e-3, "DCGM_FI_DEV_POWER_USAGE": 1.0}


_PTD_TIME = "%m-%d-%Y %H:%M:%S.%f"  # PTDaemon's ``12-23-2020 10:21:51.496``


def _ptdaemon(lines: list[str], name: str) -> PowerLog:
    """PTDaemon's ``spl.txt``: field 1 the time, field 3 the analyser's total watts (a merged
    multi-analyser log keeps the total there and each analyser's fields after ``Mark``)."""
    channels: dict[str, tuple[list[int], list[float]]] = {}
    for n, line in enumerate(lines, 1):
        if not line.startswith("Time,"):
            continue
        cells = line.split(",")
        if len(cells) < 4 or cells[2].strip() != "Watts":
            raise PowerLogError(f"{name}: line {n} is not Time,<time>,Watts,<W>,…")
        try:
            stamp = datetime.strptime(cells[1].strip(), _PTD_TIME).replace(tzinfo=UTC)
            w = float(cells[3])
        except ValueError:
            raise PowerLogError(
                f"{name}: line {n}: time {cells[1].strip()!r} is not MM-DD-YYYY HH:MM:SS.mmm "
                "or watts not a number"
            ) from None
        if w > 0:  # -1: analyser off or a bad reading
            _add(channels, "analyser", round(stamp.timestamp() * 1e9), w)
    return _checked(PowerLog("ptdaemon", "power_sampler", channels, name, scope="wall"))


# AIPerf's telemetry_data fields across versions: energy counters in MJ, power in W
_AIPERF_ENERGY = ("energy_consumption", "nvidia_energy_consumption", "amd_energy_consumption")
_AIPERF_POWER = ("gpu_power_usage", "nvidia_power_usage", "amd_power")


def _first_number(data: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for key in names:
        value = data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _aiperf(lines: list[str], name: str) -> PowerLog:
    """AIPerf's ``gpu_telemetry_export.jsonl``: per GPU (its UUID, else source and index) the
    energy counter in J when every GPU has one, else the power in W."""
    energy: dict[str, tuple[list[int], list[float]]] = {}
    power: dict[str, tuple[list[int], list[float]]] = {}
    for n, line in enumerate(lines, 1):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise PowerLogError(f"{name}: line {n} is not JSON") from None
        stamp, data = rec.get("timestamp_ns"), rec.get("telemetry_data")
        if not isinstance(stamp, int) or not isinstance(data, dict):
            raise PowerLogError(f"{name}: line {n} lacks timestamp_ns or telemetry_data")
        source = rec.get("telemetry_source_url") or rec.get("dcgm_url") or ""
        dev = str(rec.get("gpu_uuid") or f"{source}#{rec.get('gpu_index')}")
        mj = _first_number(data, _AIPERF_ENERGY)
        if mj is not None:
            _add(energy, dev, stamp, mj * 1e6)
        w = _first_number(data, _AIPERF_POWER)
        if w is not None:
            _add(power, dev, stamp, w)
    devices = set(energy) | set(power)
    if devices and all(len(energy.get(d, ([], []))[0]) >= 2 for d in devices):
        return _checked(PowerLog("aiperf", "energy_counter", energy, name))
    return _checked(PowerLog("aiperf", "power_sampler", power, name))


def _checked(log: PowerLog) -> PowerLog:
    if not any(len(t) >= 2 for t, _ in log.channels.values()):
        raise PowerLogError(f"{log.file}: fewer than two readings of any device: no energy")
    return log


def merge_logs(logs: list[PowerLog]) -> PowerLog:
    """Several logs of one run (one per node or per GPU) as one, their devices summed; they
    must measure the same way (all samplers or all counters)."""
    for log in logs:
        if log.relative:
            raise PowerLogError(
                f"{log.file}: its times are seconds since its logger started, not wall-clock "
                "times, so it cannot be placed on the run's span; give a log with dates "
                "(nvidia-smi dmon -o DT, or --query-gpu=timestamp,…)"
            )
    kinds = {log.kind for log in logs}
    if len(kinds) != 1:
        raise PowerLogError("power logs mix energy counters and power samples; give one kind")
    scopes = {log.scope for log in logs}
    if len(scopes) != 1:
        raise PowerLogError("power logs mix the wall (PTDaemon) and GPUs; their joules overlap, "
                            "give the logs of one scope")  # fmt: skip
    if len(logs) == 1:
        return logs[0]
    channels = {f"{log.file}:{dev}": ch for log in logs for dev, ch in log.channels.items()}
    source = " + ".join(sorted({log.source for log in logs}))
    return PowerLog(
        source, logs[0].kind, channels, ", ".join(log.file for log in logs), logs[0].scope
    )


def _period_s(log: PowerLog) -> float:
    gaps = [(b - a) / 1e9 for t, _ in log.channels.values() for a, b in pairwise(t)]
    return median(gaps) if gaps else 0.0


def log_energy(
    log: PowerLog, start_ns: int, end_ns: int, *, tdp_w: float | None = None
) -> tuple[EnergyReport, EnergyAudit]:
    """The log's energy over [start_ns, end_ns] (unix ns; ns on its own clock for a
    ``relative`` log) summed over its devices, as the report and audit a measured probe gets;
    flagged ``partial`` where a device's readings cover less than ``COVERED_ENOUGH`` of the
    window."""
    window_ns = end_ns - start_ns
    per_device: dict[str, float | None] = {}
    coverage, used = 1.0, 0
    counter = log.kind == "energy_counter"
    for dev, (t, v) in sorted(log.channels.items()):
        part = integrate(t, v, start_ns, end_ns, counter=counter)
        per_device[dev] = part.energy_j if part.covered_ns > 0 else None
        coverage = min(coverage, part.covered_ns / window_ns if window_ns > 0 else 0.0)
        used += part.points
    flags = ("partial",) if coverage < COVERED_ENOUGH else ()
    known = [e for e in per_device.values() if e is not None]
    energy = sum(known) if known and len(known) == len(per_device) else None
    window_s = window_ns / 1e9
    period = _period_s(log)
    scope = ScopeEnergy(
        scope=log.scope, source=log.source, source_detail=log.file, kind=log.kind, measured=True,
        energy_j=energy, mean_power_w=energy / window_s if energy is not None else None,
        window_s=window_s, devices=len(per_device), samples_used=used, coverage=coverage,
        update_period_s=period, flags=flags, per_device_j=per_device,
    )  # fmt: skip
    report = EnergyReport(start_ns, end_ns, {log.scope: scope}, (scope,), log.scope)
    chans = [ChannelData(dev, t, v, t) for dev, (t, v) in sorted(log.channels.items())]
    audit = audit_scope(
        source=log.source, scope=log.scope, kind=log.kind, measured=True, chans=chans,
        window=(start_ns, end_ns), expected_period_s=period, flags=flags, energy_j=energy,
        tdp_w=tdp_w,
    )  # fmt: skip
    return report, audit
