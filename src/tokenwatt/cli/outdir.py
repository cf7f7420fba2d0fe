"""Where a run writes: one layout for ``probe`` and ``bench``, never over an older run.

``--out DIR`` is used as it is when it does not exist or is empty; when it holds anything,
the run gets a fresh ``DIR/<name>-YYYYmmdd-HHMMSS`` folder instead (said in the output), so
reusing ``--out`` never mixes one run's ``requests-NN.jsonl`` with another's result.
``--overwrite`` writes into ``DIR`` itself; once the new run has written, the files an
earlier run left there (and only those: older than this run) are removed, so a run refused
by its checks leaves the earlier one intact. Without ``--out`` a run goes to
``results/<name>-<time>``.

The folder is only *chosen* here, and checked to be writable (the nearest existing parent),
so a typo fails in one line at the start; it is created by the first file written, after
every other check has passed, so a refused run leaves no empty folder behind.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path

from tokenwatt.errors import SpecError

__all__ = ["RUN_FILES", "choose_out_dir", "fresh_dir", "remove_stale"]

DEFAULT_ROOT = Path("results")
# What a run writes (bench: result.json, report.html, requests-NN.jsonl; probe: the same
# plus probe.json and requests.jsonl): --overwrite removes exactly these.
RUN_FILES = ("result.json", "report.html", "probe.json", "requests.jsonl", "requests-*.jsonl")


def fresh_dir(name: str, root: Path) -> Path:
    """A folder ``root/<name>-YYYYmmdd-HHMMSS`` that does not exist yet (suffixed -2, -3...)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "run"
    base = root / f"{safe}-{stamp}"
    out, k = base, 1
    while out.exists():
        k += 1
        out = root / f"{base.name}-{k}"
    return out


def _check_writable(out: Path) -> None:
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise SpecError(f"--out: {probe} is a file, not a folder; give a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SpecError(f"--out: {probe} is not writable; give a folder you can write to")
    # access() says yes for root on /proc and /sys, where nothing can be created: try once
    # (a folder made and removed at once), so the run is refused now, not after measuring
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tokenwatt-check-", dir=probe))
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise SpecError(f"--out: cannot create a folder in {probe} ({why}); give another") from None


def remove_stale(out: Path, started_ns: int) -> list[Path]:
    """Remove the run files in ``out`` last written before ``started_ns`` (wall clock, ns):
    what an earlier run left beside this one's. Returns what was removed."""
    removed = []
    for pattern in RUN_FILES:
        for f in out.glob(pattern):
            if f.is_file() and f.stat().st_mtime_ns < started_ns:
                f.unlink()
                removed.append(f)
    return removed


def choose_out_dir(out: Path | None, name: str, *, overwrite: bool = False) -> Path:
    """The folder this run writes to (see the module docstring); nothing is created."""
    if out is None:
        chosen = fresh_dir(name, DEFAULT_ROOT)
    elif out.exists() and out.is_dir() and any(out.iterdir()) and not overwrite:
        chosen = fresh_dir(name, out)
    else:
        chosen = out
    _check_writable(chosen)
    return chosen
