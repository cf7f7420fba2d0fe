"""Kernel receive timestamps, and the conversion of their realtime clock to ``perf_counter_ns``.

Linux stamps every received packet when a socket sets ``SO_TIMESTAMPNS``; ``recvmsg`` hands the
stamp of the data it returns (for TCP: the newest segment in that read) as ancillary data, on
CLOCK_REALTIME. That is when the bytes reached this host, however late Python gets to them. The
rest of the product uses CLOCK_MONOTONIC (``time.perf_counter_ns``), so each stamp is shifted by
``realtime − monotonic``, measured once per client from the tightest of many back-to-back
(monotonic, realtime, monotonic) readings. Both clocks are slewed alike by NTP; only a step of the
realtime clock during a run would move the offset. Seen on this project's VM: a 7.5 s step
mid-bench; every later TTFT read 7.5 s late (TPOT, a difference of stamps, did not move) and
the search failed every rate down to 0.43 req/s on a server that holds 13. So ``RealtimeOffset``
guards each stamp: a kernel stamp later than the read that returned it is impossible, so the
realtime clock stepped forward; a first stamp before its request was sent, that it stepped back.
Either way the offset is measured again (``realtime_steps`` counts it) and the stamp converted
anew; ``ClientClock.drift_ns`` (measured again at close) still says how far it moved in all.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

from tokenwatt.clock import ClientClock

# <asm-generic/socket.h>; Python's socket module does not export it. Other Linux ports (alpha,
# mips, parisc, sparc) use different numbers, where the option fails and user stamps are used.
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
TIMESPEC = struct.Struct("@qq")
ANC_BUFSIZE = socket.CMSG_SPACE(TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0


def measure_offset(pairs: int = 200) -> tuple[int, int]:
    """(realtime − monotonic, uncertainty) in ns from the tightest of ``pairs`` brackets."""
    mono = time.perf_counter_ns
    real = time.time_ns
    best_width = 1 << 62
    best_offset = 0
    for _ in range(pairs):
        m1 = mono()
        r = real()
        m2 = mono()
        width = m2 - m1
        if width < best_width:
            best_width = width
            best_offset = r - (m1 + m2) // 2
    return best_offset, (best_width + 1) // 2


# A stamp may exceed its read's own user time by the offset's uncertainty and the two clock
# reads' granularity; a step smaller than this is not seen, and errs by less than it.
STEP_SLACK_NS = 1_000_000


class RealtimeOffset:
    """realtime − monotonic, shared by a client's connections, measured again when a stamp
    proves the realtime clock stepped (``to_monotonic``)."""

    __slots__ = ("ns", "steps")

    def __init__(self, ns: int) -> None:
        self.ns = ns
        self.steps = 0

    def remeasure(self) -> None:
        self.ns, _ = measure_offset()
        self.steps += 1

    def to_monotonic(self, real_ns: int, read_ns: int, sent_ns: int | None) -> int:
        """A kernel stamp on the monotonic clock; ``read_ns``: when the read that carried it
        returned; ``sent_ns``: the request's send for its first read (None after). A stamp
        later than the read or before the send is impossible: the offset is taken again; a
        stamp still impossible then is clamped to the read (its latest possible time)."""
        stamp = real_ns - self.ns
        if stamp <= read_ns + STEP_SLACK_NS and (
            sent_ns is None or stamp >= sent_ns - STEP_SLACK_NS
        ):
            return stamp
        self.remeasure()
        stamp = real_ns - self.ns
        return read_ns if stamp > read_ns + STEP_SLACK_NS else stamp


def open_stamp_holder(timeout_s: float = 1.0) -> socket.socket | None:
    """A loopback UDP socket with SO_TIMESTAMPNS whose own datagrams come back stamped.

    Linux switches receive stamping on for the whole host when the first socket asks for it, and
    does so from a deferred work item: packets arriving in the meantime carry no stamp. Keeping
    this socket open for the client's life holds the switch on, and seeing a stamped datagram
    proves it is on before the first request. None: no kernel stamps here.
    """
    if not sys.platform.startswith("linux") or not hasattr(socket.socket, "recvmsg"):
        return None
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.05)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s.sendto(b"t", s.getsockname())
            try:
                _data, anc, _flags, _addr = s.recvmsg(16, ANC_BUFSIZE)
            except TimeoutError:
                continue
            if any(
                level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS for level, kind, _ in anc
            ):
                s.setblocking(False)
                return s
            time.sleep(0.001)
    except OSError:
        pass
    s.close()
    return None


def kernel_stamps_available() -> bool:
    """Whether received packets here carry SO_TIMESTAMPNS stamps (checked, not assumed)."""
    holder = open_stamp_holder()
    if holder is None:
        return False
    holder.close()
    return True


def enable_kernel_stamps(sock: socket.socket) -> bool:
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def take_clock_info(*, kernel: bool, pairs: int = 200) -> ClientClock:
    offset, unc = measure_offset(pairs)
    if kernel:
        method = (
            "SO_TIMESTAMPNS kernel receive stamps (CLOCK_REALTIME) shifted to CLOCK_MONOTONIC by "
            f"the tightest of {pairs} (perf_counter_ns, time_ns, perf_counter_ns) readings"
        )
    else:
        method = "perf_counter_ns taken in user space when each read returned (no kernel stamps)"
    return ClientClock(
        timestamp_source="kernel" if kernel else "user",
        realtime_minus_monotonic_ns=offset,
        offset_uncertainty_ns=unc,
        pairs=pairs,
        method=method,
    )


def with_drift(info: ClientClock, pairs: int = 200) -> ClientClock:
    offset, _ = measure_offset(pairs)
    return info.model_copy(update={"drift_ns": offset - info.realtime_minus_monotonic_ns})
