"""Typed access to a config dict: every lookup either returns a valid value or raises one line.

Key aliases are tried in order (``num_key_value_heads``, ``num_kv_heads`` …); a missing key
names the first alias and the ``--set`` override that supplies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenwatt.errors import GeometryError

__all__ = ["MAX_SIZE", "Reader", "short_repr"]

_SET_HINT = "(or model.overrides in a spec)"
# No size in a real config.json comes near this (the largest are context lengths and
# windows, ~10^7); anything above is a corrupted file, and refusing it keeps every count a
# plausible integer. Sizes with tighter physical bounds pass their own ``maximum``.
MAX_SIZE = 2**40


def short_repr(value: Any) -> str:
    """``repr`` cut to one short line, so an error naming a huge value stays readable."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    def _as_int(key: str, value: Any, minimum: int, maximum: int = MAX_SIZE) -> int:
        fix = f"fix it in the file or with --set config.{key}=N"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise GeometryError(
                f"config.json: {key} must be an integer, got {short_repr(value)}; {fix}"
            )
        given = value
        if isinstance(value, float):
            if not value.is_integer():
                raise GeometryError(
                    f"config.json: {key} must be an integer, got {short_repr(value)}; {fix}"
                )
            value = int(value)
        if value < minimum:
            raise GeometryError(f"config.json: {key} must be ≥ {minimum}, got {value}; {fix}")
        if value > maximum:
            raise GeometryError(
                f"config.json: {key} {short_repr(given)} is beyond any real model (at most "
                f"{maximum:,}); {fix}"
            )
        return int(value)

    def forced_int(self, field: str, minimum: int, maximum: int) -> int:
        """A user-set value, held to the same bounds as the config key it replaces."""
        value = int(self.forced[field])
        if not minimum <= value <= maximum:
            raise GeometryError(
                f"override {field}={value} is out of range; give a whole number from "
                f"{minimum} to {maximum:,}"
            )
        return value

    def int_(
        self, *keys: str, field: str | None = None, minimum: int = 1, maximum: int = MAX_SIZE
    ) -> int:
        """A required integer in [``minimum``, ``maximum``]; ``field`` names the geometry
        field that forces it."""
        if field is not None and field in self.forced:
            return self.forced_int(field, minimum, maximum)
        found = self.raw(*keys)
        if found is None:
            hint = f"{field}=N" if field is not None else f"config.{keys[0]}=N"
            raise GeometryError(
                f"config.json has no {keys[0]}; set it with --set {hint} {_SET_HINT}"
            )
        return self._as_int(found[0], found[1], minimum, maximum)

    def opt_int(
        self,
        *keys: str,
        field: str | None = None,
        minimum: int = 0,
        maximum: int = MAX_SIZE,
        default: int | None = None,
    ) -> int | None:
        """An optional integer in [``minimum``, ``maximum``]; ``default`` when absent or null."""
        if field is not None and field in self.forced:
            return self.forced_int(field, minimum, maximum)
        found = self.raw(*keys)
        if found is None:
            return default
        return self._as_int(found[0], found[1], minimum, maximum)

    def bool_(self, key: str, default: bool, *, field: str | None = None) -> bool:
        if field is not None and field in self.forced:
            return bool(self.forced[field])
        found = self.raw(key)
        if found is None:
            return default
        if not isinstance(found[1], bool):
            raise GeometryError(
                f"config.json: {key} must be true or false, got {short_repr(found[1])}"
            )
        return found[1]

    def str_(self, key: str) -> str | None:
        found = self.raw(key)
        if found is None:
            return None
        if not isinstance(found[1], str):
            raise GeometryError(f"config.json: {key} must be a string, got {short_repr(found[1])}")
        return found[1]

    def int_list(self, key: str, *, minimum: int = 0) -> list[int] | None:
        found = self.raw(key)
        if found is None:
            return None
        if not isinstance(found[1], list):
            raise GeometryError(
                f"config.json: {key} must be a list of integers, got {short_repr(found[1])}"
            )
        return [self._as_int(key, v, minimum) for v in found[1]]

    def str_list(self, key: str) -> list[str] | None:
        found = self.raw(key)
        if found is None:
            return None
        value = found[1]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise GeometryError(
                f"config.json: {key} must be a list of strings, got {short_repr(value)}"
            )
        return list(value)
