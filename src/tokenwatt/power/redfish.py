"""A BMC's Redfish resources, read out of band: node, chassis or per-GPU EnvironmentMetrics.

``EnvironmentMetrics`` carries ``PowerWatts.Reading`` (W) and, on newer BMCs (NVIDIA HGX
per-GPU resources among them), ``EnergyJoules.Reading`` (a J counter); some carry only
``EnergykWh.Reading`` (a kWh counter, too coarse for short windows). The deprecated
``Chassis/{id}/Power`` resource has ``PowerControl[].PowerConsumedWatts``. BMCs refresh about
once a second or slower, so windows need to be tens of seconds. Credentials come from
environment variables named in the spec; the password is kept only in the request header.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tokenwatt import httpget
from tokenwatt.clock import now_ns
from tokenwatt.errors import PowerSourceError
from tokenwatt.power.base import Channel, PowerSource, Sample, Scope, SourceKind, stamp_between
from tokenwatt.spec import redact_text

__all__ = ["RedfishPower"]

# property → (kind, unit, scale to J or W)
_READINGS: dict[str, tuple[SourceKind, str, float]] = {
    "EnergyJoules": ("energy_counter", "J", 1.0),
    "PowerWatts": ("power_sampler", "W", 1.0),
    "PowerConsumedWatts": ("power_sampler", "W", 1.0),
    "EnergykWh": ("energy_counter", "kWh", 3.6e6),
}
_AUTO_ORDER = ("EnergyJoules", "PowerWatts", "PowerConsumedWatts", "EnergykWh")


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x)


def _value(doc: Any, prop: str) -> float | None:
    """The reading of ``prop`` in a Redfish JSON document, None if absent or null."""
    if not isinstance(doc, dict):
        return None
    if prop == "PowerConsumedWatts":
        for ctl in doc.get("PowerControl") or []:
            if isinstance(ctl, dict) and (v := _number(ctl.get("PowerConsumedWatts"))) is not None:
                return v
        return None
    excerpt = doc.get(prop)
    if isinstance(excerpt, dict):
        return _number(excerpt.get("Reading"))
    return _number(excerpt)


class RedfishPower(PowerSource):
    """Polls one or more Redfish resources; each resource is a channel."""

    name = "redfish"

    def __init__(
        self,
        *,
        url: str,
        paths: list[str],
        reading: str = "auto",
        username_env: str | None = None,
        password_env: str | None = None,
        verify_tls: bool = True,
        scope: Scope = "node",
        interval_s: float = 1.0,
        field: str = "power.sources[]",
    ) -> None:
        super().__init__()
        self.base = url.rstrip("/")
        self.paths = ["/" + p.lstrip("/") for p in paths]
        self._reading = reading
        self._username_env = username_env
        self._password_env = password_env
        self._verify = verify_tls
        self._scope: Scope = scope
        self._field = field
        self._headers: dict[str, str] = {"Accept": "application/json"}
        self._prop = ""
        self._scale = 1.0
        self.poll_interval_s = interval_s
        self.update_period_s = interval_s  # the BMC may be slower: the monitor measures it
        self.timeout_s = min(max(2 * interval_s, 2.0), 10.0)
        self.detail = f"{redact_text(self.base)} {', '.join(self.paths)}"
        self.slow_hint = "BMCs refresh their sensors about once a second or slower"

    def _fail(self, what: str) -> PowerSourceError:
        return PowerSourceError(f"power source redfish ({self._field}): {what}")

    def _credentials(self) -> None:
        if not (self._username_env or self._password_env):
            return
        if not (self._username_env and self._password_env):
            raise self._fail("give both username_env and password_env, or neither")
        user = os.environ.get(self._username_env)
        if not user:
            raise self._fail(f"environment variable {self._username_env} is not set; export it")
        password = os.environ.get(self._password_env)
        if not password:
            raise self._fail(f"environment variable {self._password_env} is not set; export it")
        self._headers["Authorization"] = httpget.basic_auth(user, password)

    def _get(self, path: str) -> tuple[int, Any]:
        t0 = now_ns()
        body = httpget.get(
            self.base + path,
            timeout_s=self.timeout_s,
            headers=self._headers,
            verify_tls=self._verify,
        )
        t1 = now_ns()
        return stamp_between(t0, t1), json.loads(body)

    def open(self) -> None:
        self._credentials()
        docs: list[Any] = []
        for path in self.paths:
            where = f"{redact_text(self.base)}{path}"
            try:
                _, doc = self._get(path)
            except httpget.HttpError as exc:
                if exc.status in (401, 403):
                    env = self._username_env or "username_env/password_env"
                    raise self._fail(
                        f"{where} refused the credentials ({exc}); check the user in ${env} "
                        "and its password"
                    ) from None
                fix = "check url and paths"
                if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                    fix = "set verify_tls: false to accept the BMC's self-signed certificate"
                raise self._fail(f"{where} did not answer ({exc}); {fix}") from None
            except ValueError:
                raise self._fail(f"{where} did not answer with JSON") from None
            docs.append(doc)
        if self._reading == "auto":
            prop = next(
                (p for p in _AUTO_ORDER if all(_value(d, p) is not None for d in docs)), None
            )
            if prop is None:
                raise self._fail(
                    "no EnergyJoules, PowerWatts, PowerControl[].PowerConsumedWatts or "
                    f"EnergykWh reading in {', '.join(self.paths)}; point paths at an "
                    "EnvironmentMetrics or Power resource"
                )
        else:
            prop = self._reading
            missing = [p for p, d in zip(self.paths, docs, strict=True) if _value(d, prop) is None]
            if missing:
                raise self._fail(f"{', '.join(missing)} has no {prop} reading")
        self._prop = prop
        self.kind, self.unit, self._scale = _READINGS[prop]
        if prop == "EnergykWh":
            self.notes.append("EnergykWh is usually coarse (0.001 kWh = 3.6 kJ steps)")
        self.detail = f"{prop} @ {self.detail}"
        self.channels = tuple(Channel(device=p, scope=self._scope) for p in self.paths)

    def read(self) -> list[Sample]:
        out: list[Sample] = []
        failures: list[str] = []
        for i, path in enumerate(self.paths):
            try:
                t, doc = self._get(path)
            except (httpget.HttpError, ValueError) as exc:
                failures.append(f"{path}: {exc}")
                continue
            v = _value(doc, self._prop)
            if v is not None:
                out.append(Sample(i, t, v * self._scale))
        if failures and not out:
            raise OSError("; ".join(failures))
        return out
