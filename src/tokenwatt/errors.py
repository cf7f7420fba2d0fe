"""Errors a user can act on.

    TokenwattError
    ├── SpecError          bad spec, config.json, override or flag (names the field and the fix)
    ├── GeometryError      config.json cannot be turned into a model geometry
    ├── HardwareError      unknown accelerator or bad custom figures
    ├── TargetError        endpoint unreachable or not OpenAI-compatible at start
    ├── PowerSourceError   a power source is missing or unreachable at start
    └── ReportError        result file unreadable or of an unknown schema version

Per-request failures during a run are data (counted in the results), never exceptions.
The CLI prints ``str(error)`` on one line and exits non-zero; anything else is a bug.
"""

from __future__ import annotations


class TokenwattError(Exception):
    """Root of every error the CLI turns into a one-line message."""


class SpecError(TokenwattError):
    """The benchmark spec, a flag or an override is invalid."""


class GeometryError(TokenwattError):
    """A model config cannot be parsed into a geometry."""


class HardwareError(TokenwattError):
    """An accelerator is unknown or its figures are invalid."""


class TargetError(TokenwattError):
    """The endpoint cannot be used at all (checked before a run starts)."""


class PowerSourceError(TokenwattError):
    """A power source cannot be opened or read at the start of a run."""


class ReportError(TokenwattError):
    """A result file cannot be read or rendered."""
