"""What one chunk write costs the simulator: the uvloop transport against a bare ``write(2)``.

The simulator writes each step's frames one socket after another after the step's deadline, so
the p99 emit lateness of a step with N streams is at least about N × the cost of one write. This
opens N loopback TCP connections on uvloop and times writing one ~160-byte chunked SSE frame to
each, alternating the two ways round by round (so both see the same machine load), and prints
the minimum, 10th percentile and median cost per write.

    python benchmarks/sim_write_cost.py --streams 256 --rounds 300
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import uvloop

FRAME = b"9a\r\n" + b"data: " + b"x" * 140 + b"\n\n\r\n"


class _Sink(asyncio.Protocol):
    def __init__(self, transports: list[Any] | None = None) -> None:
        self.transports = transports

    def connection_made(self, transport: Any) -> None:  # uvloop's is no asyncio.Transport
        if self.transports is not None:
            self.transports.append(transport)

    def data_received(self, data: bytes) -> None:
        pass


async def measure(streams: int, rounds: int) -> dict[str, list[float]]:
    loop = asyncio.get_running_loop()
    server_side: list[Any] = []
    server = await loop.create_server(lambda: _Sink(server_side), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    for _ in range(streams):
        await loop.create_connection(_Sink, "127.0.0.1", port)
    await asyncio.sleep(0.2)
    fds = [t.get_extra_info("socket").fileno() for t in server_side]
    out: dict[str, list[float]] = {"transport.write": [], "os.write": []}
    for r in range(rounds):
        for mode in sorted(out, reverse=bool(r % 2)):
            t0 = time.perf_counter_ns()
            if mode == "transport.write":
                for t in server_side:
                    t.write(FRAME)
            else:
                write = os.write
                for t, fd in zip(server_side, fds, strict=True):
                    if not t.get_write_buffer_size():
                        write(fd, FRAME)
            out[mode].append((time.perf_counter_ns() - t0) / streams / 1e3)
            await asyncio.sleep(0.003)  # let the readers drain
    server.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    res = uvloop.run(measure(args.streams, args.rounds))
    for mode, v in res.items():
        v.sort()
        print(
            f"{mode:16s} per write: min {v[0]:.2f} µs, p10 {v[len(v) // 10]:.2f} µs, "
            f"median {statistics.median(v):.2f} µs  ({args.streams} sockets, {len(v)} rounds)"
        )


if __name__ == "__main__":
    main()
