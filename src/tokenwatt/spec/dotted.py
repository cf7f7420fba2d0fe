"""Dotted keys laid over a spec document before validation: ``hardware.gpus=8``.

One rule for every place that overrides a spec field by name: ``--set`` on the command line
and a sweep's per-point settings (``tokenwatt sweep``). The value is read as YAML, so ``8`` is
an int, ``true`` a bool and ``[1, 2]`` a list, exactly as it would be in the spec file.
"""

from __future__ import annotations

from typing import Any

import yaml

from tokenwatt.bounded import parse_yaml
from tokenwatt.errors import SpecError

__all__ = ["put_dotted", "yaml_value"]


def put_dotted(doc: dict[str, Any], key: str, value: Any, *, what: str = "--set") -> None:
    """``doc[a][b][c] = value`` for ``key`` ``a.b.c``, creating mappings on the way; ``what``
    names the flag or field in the one-line error."""
    parts = key.split(".")
    if not all(parts):
        raise SpecError(f"{what}: {key!r} is not a dotted field name (e.g. hardware.gpus)")
    node = doc
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise SpecError(f"{what} {key}: {where} is a value, not a section")
        node = child
    node[parts[-1]] = value


def yaml_value(raw: str) -> Any:
    """A flag's text as the YAML value it spells (text that is not YAML stays text)."""
    try:
        if not raw.strip():
            return ""
        return parse_yaml(raw, source=f"value {raw[:40]!r}", error=SpecError, syntax_errors=True)
    except yaml.YAMLError:
        return raw
