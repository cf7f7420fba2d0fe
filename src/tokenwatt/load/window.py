"""The measurement window's rules as a pure object: which scheduled requests count, and when
the window closes. No clock, no I/O: times are plain integers (ns), so every rule is tested
with integers (``tests/test_probe_window.py``); ``load.probe`` drives it with real times.

* A request scheduled at ``t`` counts when ``w0 <= t`` and the window is still open.
* The window closes at the first moment it is at least ``min_duration_ns`` long *and* holds
  at least ``min_requests`` counted requests; when the count binds, ``w1`` is the time of the
  first request that would exceed it (count ÷ length is then an unbiased rate). It closes at
  ``w0 + max_duration_ns`` at the latest. With ``max_requests`` it instead holds exactly that
  many requests (``w1`` = the next arrival), unless the longest window comes first.
* ``on_time(now)`` closes what no arrival closes: the longest window, and (closed loop, whose
  starts are not known ahead) the shortest once enough requests are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WindowRules"]


@dataclass(slots=True)
class WindowRules:
    min_duration_ns: int
    max_duration_ns: int
    min_requests: int
    max_requests: int | None = None
    closed_loop: bool = False
    w0: int = 0
    w1: int | None = None
    count: int = 0  # counted requests so far
    last_counted_ns: int = 0

    def close(self, at_ns: int) -> None:
        if self.w1 is None:
            self.w1 = at_ns

    def admit(self, t_ns: int) -> bool:
        """Does a request scheduled at ``t_ns`` count? (May close the window.)"""
        if t_ns < self.w0 or self.w1 is not None:
            return False
        end_min = self.w0 + self.min_duration_ns
        if t_ns >= self.w0 + self.max_duration_ns:
            self.close(self.w0 + self.max_duration_ns)
            return False
        if self.max_requests is not None:
            if self.count >= self.max_requests:
                self.close(t_ns)
                return False
        elif self.count >= self.min_requests and t_ns >= end_min:
            self.close(t_ns if self.last_counted_ns >= end_min else end_min)
            return False
        self.count += 1
        self.last_counted_ns = t_ns
        return True

    def on_time(self, now_ns: int) -> None:
        """Close on time alone: open-loop arrivals are admitted ahead of their send time, so
        only a closed loop may close on the count here."""
        if self.w1 is not None or now_ns < self.w0:
            return
        end_min = self.w0 + self.min_duration_ns
        if now_ns >= self.w0 + self.max_duration_ns:
            self.close(self.w0 + self.max_duration_ns)
        elif (
            self.closed_loop
            and self.max_requests is None
            and self.count >= self.min_requests
            and now_ns >= end_min
        ):
            # no start since the last counted one, else admit would have closed the window
            self.close(now_ns if self.last_counted_ns >= end_min else end_min)
