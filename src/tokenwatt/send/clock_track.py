"""One remote clock followed through a probe: offset samples, interpolation, drift, refusal.

A Ray actor's clock offset (its ``CLOCK_MONOTONIC`` minus the coordinator's) is measured by
exchange (``ray_workers.measure_offset``) before the probe, again every ``RECLOCK_S`` during it
and once after it. Two hosts' crystals differ by parts per million, so the offset moves by
microseconds per second; a host whose clock is stepped or slewed moves it more. The samples
(those whose round trip was more than twice the tightest's, plus 0.1 ms, dropped: a call held
up by load says little) give, for any instant of the probe, the offset interpolated between the
two samples around it (held flat before the first and after the last), which is what a record's
stamps are shifted by. The figures reported per actor: the drift (least-squares slope of offset
over time, ppm = µs per s) and the uncertainty (the worst sample's ± plus how far any sample
lies from the line through its neighbours beyond their own ±, i.e. what interpolation cannot
explain: a step or a bend of the remote clock).

Refusal: a stamp is placed only to within that uncertainty. TTFT and TPOT are durations on
one host and do not move, but a request's send time and the window edges do; the probe's
judged figures are quoted to the SLO's resolution, taken here as ``CLOCK_SHARE_OF_SLO`` of
the tightest latency limit. A clock known worse than that makes the probe "load generator
failed" (``load.keepup``), with the remedy: a coordinator nearer the workers (a shorter round
trip), a quieter network, or NTP/PTP-disciplined hosts whose clocks do not step.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

__all__ = ["CLOCK_SHARE_OF_SLO", "RECLOCK_S", "OffsetTrack", "clock_limit_ns"]

RECLOCK_S = 1.0  # an actor's offset is measured again this often during a probe
CLOCK_SHARE_OF_SLO = 0.1  # the clock must be known to this share of the tightest limit
_NS = 1_000_000_000
_WIDE_FACTOR, _WIDE_SLACK_NS = 2, 100_000  # a sample wider than 2 × the tightest + 0.1 ms


def clock_limit_ns(limits_ms: list[float | None]) -> int | None:
    """The largest clock uncertainty the SLO allows (None: no latency limit set)."""
    set_ms = [x for x in limits_ms if x is not None]
    return round(min(set_ms) * 1e6 * CLOCK_SHARE_OF_SLO) if set_ms else None


@dataclass(slots=True)
class OffsetTrack:
    """An actor's offset samples: (coordinator time, offset, ±), in time order."""

    at_ns: list[int] = field(default_factory=list)
    offset_ns: list[int] = field(default_factory=list)
    uncertainty_ns: list[int] = field(default_factory=list)

    def add(self, at_ns: int, offset_ns: int, uncertainty_ns: int) -> None:
        self.at_ns.append(at_ns)
        self.offset_ns.append(offset_ns)
        self.uncertainty_ns.append(uncertainty_ns)

    @property
    def measured(self) -> int:
        return len(self.at_ns)

    def _tight(self) -> tuple[list[int], list[int], list[int]]:
        """The samples the offset is read from: those not much wider than the tightest (a
        round trip held up by load says less than the line through the others). All
        samples still count for :meth:`unexplained_ns`, so a step is seen in any of them."""
        wide = _WIDE_FACTOR * min(self.uncertainty_ns) + _WIDE_SLACK_NS
        keep = [i for i, u in enumerate(self.uncertainty_ns) if u <= wide]
        return (
            [self.at_ns[i] for i in keep],
            [self.offset_ns[i] for i in keep],
            [self.uncertainty_ns[i] for i in keep],
        )

    @property
    def latest_ns(self) -> int:
        """The offset of the latest tight sample."""
        return self._tight()[1][-1]

    @property
    def best_ns(self) -> int:
        """The offset of the sample with the shortest round trip (the tightest one)."""
        return self.offset_ns[self.uncertainty_ns.index(min(self.uncertainty_ns))]

    def at(self, t_ns: int) -> int:
        """The offset at coordinator time ``t_ns``: linear between the tight samples around
        it, held flat before the first and after the last."""
        ts, os_, _ = self._tight()
        i = bisect_right(ts, t_ns)
        if i == 0:
            return os_[0]
        if i == len(ts):
            return os_[-1]
        t0, t1, o0, o1 = ts[i - 1], ts[i], os_[i - 1], os_[i]
        return o0 if t1 == t0 else o0 + round((o1 - o0) * (t_ns - t0) / (t1 - t0))

    def drift_ppm(self) -> float | None:
        """Least-squares slope of the tight samples' offset over time, µs per s (None:
        fewer than 2 of them)."""
        ts, os_, _ = self._tight()
        n = len(ts)
        if n < 2:
            return None
        mt, mo = sum(ts) / n, sum(os_) / n
        var = sum((t - mt) ** 2 for t in ts)
        if var == 0:
            return None
        cov = sum((t - mt) * (o - mo) for t, o in zip(ts, os_, strict=True))
        return cov / var * 1e6

    def unexplained_ns(self) -> int:
        """How far any inner sample lies from the line through its two neighbours beyond
        what the three samples' own ± allow (a step or a bend of the clock, not noise)."""
        worst = 0
        u = self.uncertainty_ns
        for i in range(1, len(self.at_ns) - 1):
            t0, t, t1 = self.at_ns[i - 1], self.at_ns[i], self.at_ns[i + 1]
            o0, o1 = self.offset_ns[i - 1], self.offset_ns[i + 1]
            line = o0 if t1 == t0 else o0 + (o1 - o0) * (t - t0) / (t1 - t0)
            noise = u[i] + max(u[i - 1], u[i + 1])
            worst = max(worst, round(abs(self.offset_ns[i] - line) - noise))
        return worst

    def uncertainty(self) -> int:
        """± of an interpolated offset: the worst tight sample's ± plus what the line misses."""
        return max(self._tight()[2]) + self.unexplained_ns()

    def refusal(self, limit_ns: int | None, who: str) -> str | None:
        """The reason line when the clock is known worse than ``limit_ns`` (None: fine)."""
        u = self.uncertainty()
        if limit_ns is None or u <= limit_ns:
            return None
        drift = self.drift_ppm()
        moved = "" if drift is None else f", drift {drift:+.1f} ppm"
        return (
            f"clock of {who} known only to ±{u / 1e6:.2f} ms{moved} > {limit_ns / 1e6:.2f} ms "
            f"({CLOCK_SHARE_OF_SLO:.0%} of the tightest SLO limit); run the coordinator nearer "
            "the workers (shorter round trip) or on hosts whose clocks do not step (NTP/PTP)"
        )
