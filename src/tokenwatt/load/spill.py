"""Incremental ``requests.jsonl``: every record appended the moment it ends.

A probe keeps its records in memory for its figures, but a run killed hard (SIGKILL, a
power cut, the OOM killer) must still leave what it measured on disk. ``RecordSpill`` is a
probe's ``on_record``: it appends each record as one line with ``phase: "pending"`` (the
window is not known yet); the finished probe rewrites the file with final phases. A write
failure (full disk, a folder removed) never stops the probe: the spill stops, remembers the
error, and what is already on disk stays there.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import orjson

from tokenwatt.records import RequestRecord

__all__ = ["PENDING_PHASE", "RecordSpill"]

PENDING_PHASE = "pending"  # a line written before the window was known


class RecordSpill:
    """Append records to ``path`` as they end (see the module doc); ``error`` is the first
    write failure, if any (later records are then kept in memory only)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.written = 0
        self.error: str | None = None
        self._fh: IO[bytes] | None = None

    def __call__(self, rec: RequestRecord) -> None:
        if self.error is not None:
            return
        try:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = self.path.open("ab")
            self._fh.write(orjson.dumps({"phase": PENDING_PHASE, **rec.to_dict()}) + b"\n")
            self._fh.flush()
            self.written += 1
        except OSError as exc:
            self.error = f"{self.path}: {exc.strerror or exc}"
            self.close()

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError as exc:
                self.error = self.error or f"{self.path}: {exc.strerror or exc}"
            self._fh = None
