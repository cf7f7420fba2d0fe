"""Typed access to a config dict: every lookup either returns a valid value or raises one line.

Key aliases are tried in order (``num_key_value_heads``, ``num_kv_heads`` …); a missing key
names the first alias and the ``--set`` override that supplies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenwatt.errors import GeometryError

__all__ = ["Reader"]

_SET_HINT = "(or model.overrides in a spec)"


class Reader:
    """Looks keys up in a text config, with user-forced values for some geometry fields first.

    ``forced`` maps a ModelGeometry field name (``layers``, ``experts`` …) to a value the user
    set; lookups that declare that ``field`` return it without reading the config.
    """

    def __init__(self, data: Mapping[str, Any], forced: Mapping[str, Any] | None = None) -> None:
        self.data = data
        self.forced = dict(forced or {})

    def raw(self, *keys: str) -> tuple[str, Any] | None:
        """The first key of ``keys`` present with a non-null value, and that value."""
        for key in keys:
            if key in self.data and self.data[key] is not None:
                return key, self.data[key]
        return None

    def has(self, *keys: str) -> bool:
        return self.raw(*keys) is not None

    @staticmethod
    def _as_int(key: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise GeometryError(f"config.json: {key} must be an integer, got {value!r}")
        if isinstance(value, float):
            if not value.is_integer():
                raise GeometryError(f"config.json: {key} must be an integer, got {value!r}")
            value = int(value)
        if value < minimum:
            raise GeometryError(f"config.json: {key} must be ≥ {minimum}, got {value}")
        return int(value)

    def int_(self, *keys: str, field: str | None = None, minimum: int = 1) -> int:
        """A required integer ≥ ``minimum``; ``field`` names the geometry field that forces it."""
        if field is not None and field in self.forced:
            return int(self.forced[field])
        found = self.raw(*keys)
        if found is None:
            hint = f"{field}=N" if field is not None else f"config.{keys[0]}=N"
            raise GeometryError(
                f"config.json has no {keys[0]}; set it with --set {hint} {_SET_HINT}"
            )
        return self._as_int(found[0], found[1], minimum)

    def opt_int(
        self, *keys: str, field: str | None = None, minimum: int = 0, default: int | None = None
    ) -> int | None:
        """An optional integer ≥ ``minimum``; ``default`` when absent or null."""
        if field is not None and field in self.forced:
            return int(self.forced[field])
        found = self.raw(*keys)
        if found is None:
            return default
        return self._as_int(found[0], found[1], minimum)

    def bool_(self, key: str, default: bool, *, field: str | None = None) -> bool:
        if field is not None and field in self.forced:
            return bool(self.forced[field])
        found = self.raw(key)
        if found is None:
            return default
        if not isinstance(found[1], bool):
            raise GeometryError(f"config.json: {key} must be true or false, got {found[1]!r}")
        return found[1]

    def str_(self, key: str) -> str | None:
        found = self.raw(key)
        if found is None:
            return None
        if not isinstance(found[1], str):
            raise GeometryError(f"config.json: {key} must be a string, got {found[1]!r}")
        return found[1]

    def int_list(self, key: str, *, minimum: int = 0) -> list[int] | None:
        found = self.raw(key)
        if found is None:
            return None
        if not isinstance(found[1], list):
            raise GeometryError(f"config.json: {key} must be a list of integers, got {found[1]!r}")
        return [self._as_int(key, v, minimum) for v in found[1]]

    def str_list(self, key: str) -> list[str] | None:
        found = self.raw(key)
        if found is None:
            return None
        value = found[1]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise GeometryError(f"config.json: {key} must be a list of strings, got {value!r}")
        return list(value)

    def mapping(self, key: str) -> Mapping[str, Any] | None:
        found = self.raw(key)
        if found is None:
            return None
        if not isinstance(found[1], dict):
            raise GeometryError(f"config.json: {key} must be an object, got {found[1]!r}")
        return found[1]
